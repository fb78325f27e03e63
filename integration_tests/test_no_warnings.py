"""No warning we cause (issue 26): a sharded EmbeddingBagCollection's forward and backward on 2
gloo ranks, every sharding type the tutorials use, record no Python warning and no torch log
record at WARNING or above on any rank. torch's `is_fx_tracing` warning (once per process: an
lru_cache, reset here so an earlier test cannot hide it) came from our LazyAwaitable's
metaclass; the `shardrec train` output is checked by `nox -s movielens_fresh`."""

from __future__ import annotations

import logging
import warnings

import torch
import torch.fx._symbolic_trace as fx_trace

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import (
    column_wise,
    construct_module_sharding_plan,
    data_parallel,
    row_wise,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, seeded_generator

TABLES = [("t0", 20, 8, ["f0"]), ("t1", 12, 8, ["f1"]), ("t2", 9, 8, ["f2"]), ("t3", 7, 8, ["f3"])]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


def sharded_forward_backward(ctx: RankContext) -> list[str]:
    fx_trace.is_fx_tracing_warning.cache_clear()
    handler = _Records()
    torch_log = logging.getLogger("torch")
    torch_log.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            configs = [
                EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=f)
                for n, r, d, f in TABLES
            ]
            torch.manual_seed(0)
            ebc = EmbeddingBagCollection(configs)
            generators = {
                "t0": row_wise(),
                "t1": table_wise(rank=1),
                "t2": column_wise(ranks=[0, 1]),
                "t3": data_parallel(),
            }
            plan = construct_module_sharding_plan(ebc, generators, world_size=ctx.world_size)
            env = ShardingEnv.from_process_group(ctx.pg)
            sharded = EmbeddingBagCollectionSharder().shard(ebc, plan, env)
            g = seeded_generator("no_warnings", ctx.rank)
            lengths = torch.randint(0, 3, (4 * 3,), generator=g)
            values = torch.cat(
                [
                    torch.randint(0, rows, (int(n),), generator=g)
                    for (_, rows, _, _), n in zip(
                        TABLES, lengths.view(4, 3).sum(1).tolist(), strict=True
                    )
                ]
            )
            kjt = KeyedJaggedTensor(["f0", "f1", "f2", "f3"], values, lengths=lengths)
            out = sharded(kjt).wait()
            out.values().sum().backward()
    finally:
        torch_log.removeHandler(handler)
    return [f"{w.category.__name__}: {w.message}" for w in caught] + handler.messages


def test_sharded_ebc_forward_backward_warns_nothing(pool_factory) -> None:  # type: ignore[no-untyped-def]
    per_rank = pool_factory(2).run(sharded_forward_backward, timeout_s=120)
    assert per_rank == [[], []]
