"""The train pipelines' prefetch stage over tiered (`key_value`) tables, against the same model
with the table in memory: a cache of about two batches' distinct rows, evicting every step,
trained by `TrainPipelineSparseDist` and `PrefetchTrainPipelineSparseDist` on 1 and 2 gloo ranks,
gives exactly the in-memory weights; the prefetches are consumed by the forwards (the rows
loaded ahead counted once, as misses of the prefetch)."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest
import torch
from torch import Tensor, nn

from shardrec_collectives import ShardingEnv
from shardrec_dmp import (
    DistributedModelParallel,
    PrefetchTrainPipelineSparseDist,
    TrainPipelineSparseDist,
)
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    CacheParams,
    KeyValueParams,
    ShardingPlan,
    construct_module_sharding_plan,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder, ShardedEmbeddingBagCollection
from shardrec_testing import RankContext, random_lengths, seeded_generator
from shardrec_tiered import TieredFusedEmbeddingBag

SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
ROWS = 200
STEPS = 7
BATCH = 4
CONFIGS = [
    EmbeddingBagConfig(name="disk", num_embeddings=ROWS, embedding_dim=4, feature_names=["a"]),
    EmbeddingBagConfig(name="ram", num_embeddings=9, embedding_dim=4, feature_names=["b"]),
]


@dataclasses.dataclass
class Batch:
    sparse_features: KeyedJaggedTensor
    coefficients: Tensor

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        return self


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(CONFIGS)
        g = seeded_generator("tiered-pipeline-init")
        with torch.no_grad():
            for c in CONFIGS:
                w = self.sparse.embedding_bags[c.name].weight
                w.copy_(torch.randn(c.num_embeddings, 4, generator=g))

    def forward(self, batch: Batch) -> tuple[Tensor, Tensor]:
        out = self.sparse(batch.sparse_features).values()
        return (out * batch.coefficients).sum(), out


def make_batch(rank: int, step: int) -> Batch:
    g = seeded_generator("tiered-pipeline", rank, step)
    # Full bags of "a": a batch touches up to 3 * BATCH rows of "disk" per rank.
    lengths = torch.cat([torch.full((BATCH,), 3), random_lengths(BATCH, 3, g)])
    a = 3 * BATCH
    values = torch.cat(
        [
            torch.randint(0, ROWS, (a,), generator=g),
            torch.randint(0, 9, (int(lengths[BATCH:].sum()),), generator=g),
        ]
    )
    kjt = KeyedJaggedTensor(["a", "b"], values, lengths=lengths)
    return Batch(kjt, torch.randn(BATCH, 8, generator=g))


def wrap(ctx: RankContext, kernel: str, store: str) -> DistributedModelParallel:
    model = Model()
    table_plan = construct_module_sharding_plan(
        model.sparse,
        {
            "disk": table_wise(rank=0, compute_kernel=kernel),
            "ram": table_wise(rank=ctx.world_size - 1),
        },
        world_size=ctx.world_size,
    )
    if kernel == "key_value":
        # A batch touches up to 12 rows per rank: the cache holds exactly two batches (one
        # awaiting its backward, one prefetched), so rows are evicted on every step.
        table_plan["disk"] = dataclasses.replace(
            table_plan["disk"],
            key_value_params=KeyValueParams(ssd_storage_directory=store),
            cache_params=CacheParams(load_factor=2 * 3 * BATCH * ctx.world_size / ROWS),
        )
    return DistributedModelParallel(
        model,
        env=ShardingEnv.from_process_group(ctx.pg),
        plan=ShardingPlan(plan={"sparse": table_plan}),
        sharders=[EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())],
    )


def sharded_of(dmp: DistributedModelParallel) -> ShardedEmbeddingBagCollection:
    found = [m for m in dmp.modules() if isinstance(m, ShardedEmbeddingBagCollection)]
    assert len(found) == 1
    return found[0]


def tiered_of(dmp: DistributedModelParallel) -> list[TieredFusedEmbeddingBag]:
    return [m for s in sharded_of(dmp)._strategies for m in s.lookup.tiered_modules()]


def train(ctx: RankContext, kernel: str, pipeline: str, store: str) -> dict[str, object]:
    dmp = wrap(ctx, kernel, store)
    opt = dmp.fused_optimizer
    batches = [make_batch(ctx.rank, s) for s in range(STEPS)]
    if pipeline == "none":
        for b in batches:
            loss, _ = dmp(b)
            loss.backward()
            opt.step()
    else:
        cls = {"sparse_dist": TrainPipelineSparseDist, "prefetch": PrefetchTrainPipelineSparseDist}
        pipe = cls[pipeline](dmp, opt, torch.device("cpu"))
        it = iter(batches)
        for _ in batches:
            pipe.progress(it)  # type: ignore[arg-type]
        with pytest.raises(StopIteration):
            pipe.progress(it)
    sharded = sharded_of(dmp)
    out: dict[str, object] = {}
    if "ram" in sharded.embedding_bags:
        out["ram"] = sharded.embedding_bags["ram"].weight.detach().clone()
    tiered = tiered_of(dmp)
    if tiered:
        out["disk"], _ = tiered[0].read_table("disk")
        out["stats"] = tiered[0].stats()["disk"]
        out["pending"] = tiered[0].pending_prefetches
    elif "disk" in sharded.embedding_bags:
        out["disk"] = sharded.embedding_bags["disk"].weight.detach().clone()
    return out


def run_all(ctx: RankContext, store: str) -> list[dict[str, object]]:
    ref = train(ctx, "fused", "none", store)
    runs = [ref]
    for pipeline in ("none", "sparse_dist", "prefetch"):
        runs.append(train(ctx, "key_value", pipeline, f"{store}/{pipeline}"))
    return runs


@pytest.mark.parametrize("world", [1, 2])
def test_tiered_pipelines_match_the_in_memory_table(pool_factory, tmp_path: pathlib.Path, world):  # type: ignore[no-untyped-def]
    per_rank = pool_factory(world).run(run_all, str(tmp_path))
    for rank, runs in enumerate(per_rank):
        ref = runs[0]
        for pipeline, run in zip(("none", "sparse_dist", "prefetch"), runs[1:], strict=True):
            assert set(run) == set(ref) | ({"stats", "pending"} if rank == 0 else set())
            if rank == world - 1:
                assert torch.equal(run["ram"], ref["ram"]), pipeline  # type: ignore[arg-type]
            if rank != 0:
                continue
            assert torch.equal(run["disk"], ref["disk"]), pipeline  # type: ignore[arg-type]
            stats = run["stats"]
            assert isinstance(stats, dict)
            # A cache of ~2 batches over 200 rows: rows are loaded and written back every step.
            assert stats["misses"] > 2 * stats["cache_rows"] and stats["bytes_written"] > 0
            assert run["pending"] == 0
            if pipeline == "none":
                assert stats["prefetch_seconds"] == 0.0
            else:
                assert stats["prefetch_seconds"] > 0.0


# -- the prefetching pipeline's contract: batch counts, reset, eval mode, TorchRec arguments --


def drain(pipe: TrainPipelineSparseDist, it: object) -> list[Tensor]:
    out: list[Tensor] = []
    while True:
        try:
            out.append(pipe.progress(it).detach())  # type: ignore[arg-type, attr-defined]
        except StopIteration:
            return out


def plain(dmp: DistributedModelParallel, batches: list[Batch]) -> list[Tensor]:
    out = []
    for b in batches:
        loss, o = dmp(b)
        out.append(o.detach())
        if dmp.training:
            loss.backward()
            dmp.fused_optimizer.step()
    return out


def modes(ctx: RankContext, store: str) -> list[object]:
    """Per (class, execute_all_batches, n): the batches run, outputs equal the plain loop's,
    no prefetch left queued or row left pinned; then train -> eval -> train again."""
    counts: list[object] = []
    k = 0
    for cls in (TrainPipelineSparseDist, PrefetchTrainPipelineSparseDist):
        for eab in (True, False):
            for n in (0, 1, 2, 3, 5):
                k += 1
                batches = [make_batch(ctx.rank, s) for s in range(n)]
                dmp = wrap(ctx, "key_value", f"{store}/{k}")
                pipe = cls(dmp, dmp.fused_optimizer, "cpu", execute_all_batches=eab)
                got = drain(pipe, iter(batches))
                want = plain(wrap(ctx, "fused", store), batches[: len(got)])
                assert len(got) == len(want) and all(map(torch.equal, got, want)), (cls, eab, n)
                (tiered,) = tiered_of(dmp)
                assert tiered.pending_prefetches == 0
                assert all(int(c.pins.sum()) == 0 for c in tiered.caches)
                counts.append(len(got))
        dmp = wrap(ctx, "key_value", f"{store}/modes-{cls.__name__}")
        ref = wrap(ctx, "fused", store)
        pipe = cls(dmp, dmp.fused_optimizer, "cpu")
        train = [make_batch(ctx.rank, s) for s in range(4)]
        evaluate = [make_batch(ctx.rank, 10 + s) for s in range(3)]
        got = drain(pipe, iter(train))
        dmp.eval()
        with torch.no_grad():
            got += drain(pipe, iter(evaluate))
        dmp.train()
        got += drain(pipe, iter(train[:2]))
        want = plain(ref, train)
        ref.eval()
        with torch.no_grad():
            want += plain(ref, evaluate)
        ref.train()
        want += plain(ref, train[:2])
        assert len(got) == len(want) and all(map(torch.equal, got, want)), cls
    # TorchRec 1.8's arguments; custom_model_fwd replaces model(batch).
    calls: list[int] = []
    dmp = wrap(ctx, "key_value", f"{store}/custom")

    def forward(batch: Batch) -> tuple[Tensor, Tensor]:
        calls.append(1)
        result: tuple[Tensor, Tensor] = dmp(batch)
        return result

    pipe = PrefetchTrainPipelineSparseDist(
        dmp,
        dmp.fused_optimizer,
        torch.device("cpu"),
        apply_jit=False,
        pipeline_postproc=True,
        custom_model_fwd=forward,  # type: ignore[arg-type]
        enable_inplace_copy_batch=True,
        free_features_storage_early=True,
        clear_data_dist_inputs=True,
    )
    batches = [make_batch(ctx.rank, s) for s in range(3)]
    got = drain(pipe, iter(batches))
    assert all(map(torch.equal, got, plain(wrap(ctx, "fused", store), batches)))
    counts.append(len(calls))
    return counts


def test_prefetching_pipelines_keep_the_pipeline_contract(pool_factory, tmp_path):  # type: ignore[no-untyped-def]
    # TorchRec 1.8 (measured, test_dmp.py): execute_all_batches=False runs max(n - 2, 0).
    expected = [0, 1, 2, 3, 5, 0, 0, 0, 1, 3]
    (counts,) = pool_factory(1).run(modes, str(tmp_path))
    assert counts == expected * 2 + [3]
