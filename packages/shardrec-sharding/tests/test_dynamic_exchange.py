"""The shared id exchange of a sharded collection's dynamic tables (one all-to-all of every
table's ids per batch and one of the slots back) against the per-table exchanges it replaces:
the same slots, the same drops and the same map decisions, batch after batch (admissions,
evictions), over row-wise, table-wise and replicated maps; and 3 all-to-alls a batch whatever
the table count."""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist
from test_dynamic_sharding import CASES, batch, configs, plan_for

from shardrec_collectives import ShardingEnv
from shardrec_embedding import DynamicTableConfig, EmbeddingBagCollection
from shardrec_embedding.dynamic import DynamicTables
from shardrec_optim import EmbOptimType
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext

TYPES = [("row_wise", "data_parallel", "table_wise"), ("table_wise", "row_wise", "row_wise")]
PER_TABLE = [3 + 2, 3 + 3]  # all-to-alls alone: 3 a partitioned table, 2 a replicated one


def _sharded(env: ShardingEnv, types: tuple[str, ...], world: int) -> torch.nn.Module:
    small = [
        dataclasses.replace(c, num_embeddings=n, dynamic=DynamicTableConfig(eviction="LRU"))
        for c, n in zip(configs(CASES[0])[:2], (8, 6), strict=True)
    ] + configs(CASES[0])[2:]
    ebc = EmbeddingBagCollection(small)
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": 0.1}
    )
    return sharder.shard(ebc, plan_for(ebc, types, world), env)


def shared_vs_per_table(ctx: RankContext, cases: list[tuple[str, ...]]) -> list[list[object]]:
    env = ShardingEnv.from_process_group(ctx.pg)
    calls = [0]
    original = dist.all_to_all_single

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return original(*args, **kwargs)

    out = []
    for types in cases:
        shared = _sharded(env, types, ctx.world_size).dynamic_tables
        alone = _sharded(env, types, ctx.world_size).dynamic_tables
        rows: list[object] = []
        for step in range(8):
            kjt, _ = batch("exchange", ctx.rank, step)
            for training in (True, False):
                dist.all_to_all_single = counted  # type: ignore[assignment]
                try:
                    calls[0] = 0
                    a = shared.remap(kjt, training=training, owner="shared")
                    n_shared = calls[0]
                    calls[0] = 0
                    b = DynamicTables.remap(alone, kjt, training=training, owner="alone")
                    n_alone = calls[0]
                finally:
                    dist.all_to_all_single = original  # type: ignore[assignment]
                rows.append(
                    (
                        torch.equal(a.features.values(), b.features.values()),
                        torch.equal(a.features.lengths(), b.features.lengths()),
                        sorted(a.dropped) == sorted(b.dropped),
                        shared.stats() == alone.stats(),
                        n_shared,
                        n_alone,
                    )
                )
        rows.append(sum(s["evictions"] for s in shared.stats().values()))
        out.append(rows)
    return out


def test_shared_exchange_matches_per_table_exchanges(pool_factory):  # type: ignore[no-untyped-def]
    per_rank = pool_factory(2).run(shared_vs_per_table, TYPES)
    for rank_rows in per_rank:
        for [*rows, evictions], alone in zip(rank_rows, PER_TABLE, strict=True):
            assert evictions > 0  # the maps were full: decisions beyond plain admissions
            assert all(r[0] and r[1] and r[2] and r[3] for r in rows), rows
            assert all(r[4] == 3 for r in rows), rows  # counts, ids, slots back
            assert all(r[5] == alone for r in rows), rows
