"""A TorchRec training script that plans a table with `fused_uvm_caching` and `CacheParams`,
written against TorchRec's paths (`import shardrec as torchrec`), runs unchanged on 2 gloo ranks
through `DistributedModelParallel`, trains exactly as the same script with `fused`, and its plan
says which kernel runs."""

from __future__ import annotations

import torch

import shardrec as torchrec
from shardrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from shardrec.distributed.model_parallel import DistributedModelParallel
from shardrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
from shardrec.distributed.types import CacheAlgorithm, CacheParams
from shardrec_testing import RankContext, seeded_generator


def make_ebc() -> torchrec.EmbeddingBagCollection:
    torch.manual_seed(0)
    return torchrec.EmbeddingBagCollection(
        tables=[
            torchrec.EmbeddingBagConfig(
                name="big", embedding_dim=8, num_embeddings=400, feature_names=["f1"]
            ),
            torchrec.EmbeddingBagConfig(
                name="small", embedding_dim=8, num_embeddings=40, feature_names=["f2"]
            ),
        ],
    )


def script(ctx: RankContext, kernel: str) -> tuple[str, dict[str, torch.Tensor]]:
    ebc = make_ebc()
    cache = CacheParams(algorithm=CacheAlgorithm.LRU, load_factor=0.2)
    constraints = {
        "big": ParameterConstraints(
            sharding_types=["row_wise"],
            compute_kernels=[kernel],
            cache_params=cache if kernel != "fused" else None,
        )
    }
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=ctx.world_size, compute_device="cpu"),
        constraints=constraints,
    )
    sharders = [EmbeddingBagCollectionSharder(fused_params={"optimizer": "exact_sgd"})]
    plan = planner.collective_plan(ebc, sharders, ctx.pg)
    model = DistributedModelParallel(ebc, plan=plan, sharders=sharders, device=torch.device("cpu"))
    for step in range(3):
        g = seeded_generator("cache-params-script", ctx.rank, step)
        lengths = torch.randint(0, 4, (8,), generator=g)  # 2 features x 4 samples
        n1, n2 = int(lengths[:4].sum()), int(lengths[4:].sum())
        values = torch.cat(
            [torch.randint(0, 400, (n1,), generator=g), torch.randint(0, 40, (n2,), generator=g)]
        )
        kjt = torchrec.KeyedJaggedTensor.from_lengths_sync(
            keys=["f1", "f2"], values=values, lengths=lengths
        )
        out = model(kjt)
        (out.values() * torch.randn(out.values().shape, generator=g)).sum().backward()
    tables = {}
    for key, value in model.state_dict().items():
        if hasattr(value, "local_shards"):
            tables[key] = torch.cat([s.tensor.detach() for s in value.local_shards()])
        else:
            tables[key] = value.detach().clone()
    return plan.report(), tables


def test_cache_params_script_trains_as_fused(rank_pool) -> None:  # type: ignore[no-untyped-def]
    cached = rank_pool.run(script, "fused_uvm_caching")
    fused = rank_pool.run(script, "fused")
    for rank in range(2):
        report, tables = cached[rank]
        assert "fused_uvm_caching->fused" in report
        assert "big: cache_params algorithm=LRU not applied (no device cache)" in report
        assert tables.keys() == fused[rank][1].keys()
        assert any("big" in k for k in tables)
        for key, value in tables.items():
            assert torch.equal(value, fused[rank][1][key]), key
    # training moved rank 0's rows of `big` (the runs do not agree by leaving tables untouched)
    assert not torch.equal(
        cached[0][1][next(k for k in cached[0][1] if "big" in k)],
        make_ebc().embedding_bags["big"].weight.detach()[:200],
    )
