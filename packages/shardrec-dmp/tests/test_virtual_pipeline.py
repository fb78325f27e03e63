"""A raw-id tier table (`ssd_virtual_table` / `dram_virtual_table`, table_wise, LFU; also
row_wise and column_wise: one tier per rank) under the train pipelines, with a cache of two
batches' distinct ids (three for the prefetching pipeline; rows evicted on every step; the
pipeline maps batch i+1 before batch i's backward, and LFU would evict batch i's new rows
first): the mapped batch's rows are pinned in the cache until its backward, so the pipelines
give exactly the store rows (weights and row-wise Adagrad state) of the plain loop, on 1 and 2
gloo ranks (column_wise: both ranks' caches deciding alike, their stores holding the same
ids)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import Tensor, nn

from shardrec_collectives import ShardingEnv
from shardrec_dmp import (
    DistributedModelParallel,
    PrefetchTrainPipelineSparseDist,
    TrainPipelineSparseDist,
)
from shardrec_embedding import DynamicTableConfig, EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    CacheParams,
    KeyValueParams,
    ShardingPlan,
    column_wise,
    construct_module_sharding_plan,
    row_wise,
    table_wise,
)
from shardrec_planner.cache_params import CacheAlgorithm
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, random_lengths, seeded_generator
from shardrec_tiered.raw_checkpoint import store_ids

SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
STEPS = 8
BAGS = 3
WINDOW = 4  # distinct ids of one step (all ranks): the cache holds two steps'
DIM = 4


@dataclasses.dataclass
class Batch:
    sparse_features: KeyedJaggedTensor
    coefficients: Tensor

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        return self


class Model(nn.Module):
    def __init__(self, capacity: int) -> None:
        super().__init__()
        config = EmbeddingBagConfig(
            name="raw",
            num_embeddings=capacity,
            weight_init_min=-0.25,  # not from num_embeddings: the caches differ in size
            weight_init_max=0.25,
            embedding_dim=DIM,
            feature_names=["f"],
            dynamic=DynamicTableConfig(init_seed=1),
        )
        self.sparse = EmbeddingBagCollection([config])

    def forward(self, batch: Batch) -> tuple[Tensor, Tensor]:
        out = self.sparse(batch.sparse_features).values()
        return (out * batch.coefficients).sum(), out


def make_batch(rank: int, step: int) -> Batch:
    """Ids of a window of WINDOW ids moving by 3 a step (each step brings 3 new ids, one
    shared with the step before): every step evicts rows the step before used."""
    pool = torch.randint(-(2**62), 2**62, (30,), generator=seeded_generator("vpipe-pool"))
    g = seeded_generator("vpipe", rank, step)
    lengths = random_lengths(BAGS, 3, g)
    ids = pool[(torch.randint(0, WINDOW, (int(lengths.sum()),), generator=g) + 3 * step) % 30]
    kjt = KeyedJaggedTensor(["f"], ids, lengths=lengths)
    return Batch(kjt, torch.randn(BAGS, DIM, generator=g))


def train(ctx: RankContext, kernel: str, how: str, store: str) -> tuple[Tensor, Tensor, int] | None:
    # The prefetching pipeline holds three batches (prefetched, mapped, awaiting backward).
    # `<kernel>:row_wise`: a part of that many rows on each rank; `<kernel>:column_wise`: a
    # column block on each rank, every rank's cache deciding every slot (virtual_columns.py).
    kernel, _, sharding = kernel.partition(":")
    parts = ctx.world_size if sharding == "row_wise" else 1
    model = Model((3 if how == "prefetch" else 2) * WINDOW * parts)
    owner = ctx.world_size - 1
    where = {
        "row_wise": row_wise(compute_kernel=kernel),
        "column_wise": column_wise(ranks=list(range(ctx.world_size)), compute_kernel=kernel),
    }.get(sharding, table_wise(rank=owner, compute_kernel=kernel))
    plan = construct_module_sharding_plan(model.sparse, {"raw": where}, world_size=ctx.world_size)
    plan["raw"] = dataclasses.replace(
        plan["raw"],
        key_value_params=KeyValueParams(ssd_storage_directory=f"{store}/{how}"),
        # LFU: a batch's new rows score lowest, the next batch's admission would take them
        cache_params=CacheParams(algorithm=CacheAlgorithm.LFU),
    )
    dmp = DistributedModelParallel(
        model,
        env=ShardingEnv.from_process_group(ctx.pg),
        plan=ShardingPlan(plan={"sparse": plan}),
        sharders=[EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())],
    )
    batches = [make_batch(ctx.rank, s) for s in range(STEPS)]
    if how == "plain":
        for b in batches:
            loss, _ = dmp(b)
            loss.backward()
    else:
        cls = TrainPipelineSparseDist if how == "pipeline" else PrefetchTrainPipelineSparseDist
        pipe = cls(dmp, dmp.fused_optimizer, torch.device("cpu"))
        it = iter(batches)
        for _ in batches:
            pipe.progress(it)  # type: ignore[arg-type]
        with pytest.raises(StopIteration):
            pipe.progress(it)
    cache = dmp.sharded_modules["sparse"].dynamic_tables.table("raw").cache  # type: ignore[union-attr]
    if cache is None:
        return None
    assert int(cache.pins.sum()) == 0  # every batch's pins were released by its backward
    ids = store_ids(cache)
    return ids, torch.from_numpy(cache.store.read(ids.numpy())), cache.misses


def run_cases(ctx: RankContext, store: str) -> list[object]:
    return [
        [train(ctx, kernel, how, f"{store}/{kernel}") for how in ("plain", "pipeline", "prefetch")]
        for kernel in (
            "ssd_virtual_table",
            "dram_virtual_table",
            "dram_virtual_table:row_wise",
            "ssd_virtual_table:column_wise",
        )
    ]


@pytest.mark.parametrize("world", [1, 2])
def test_pipelines_match_the_plain_loop(pool_factory, tmp_path, world):  # type: ignore[no-untyped-def]
    per_rank = pool_factory(world).run(run_cases, str(tmp_path / str(world)))
    owner = per_rank[world - 1]
    for plain, *pipelined in owner[:2]:  # table_wise
        ids, rows, misses = plain
        assert ids.numel() > 2 * WINDOW and misses >= ids.numel()  # the cache evicted
        for run in pipelined:
            assert torch.equal(run[0], ids) and torch.equal(run[1], rows)
    for rank in range(world):  # row_wise: each rank's part; column_wise: its column block
        for case in (2, 3):
            plain, *pipelined = per_rank[rank][case]
            assert plain[0].numel() > 0
            for run in pipelined:
                assert torch.equal(run[0], plain[0]) and torch.equal(run[1], plain[1])
        assert per_rank[rank][3][0][2] >= per_rank[rank][3][0][0].numel() > 2 * WINDOW  # evicted
    if world == 2:  # the ranks' caches made the same decisions: the same ids in each store
        assert torch.equal(per_rank[0][3][0][0], per_rank[1][3][0][0])
