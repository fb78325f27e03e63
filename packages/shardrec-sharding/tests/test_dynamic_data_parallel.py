"""data_parallel dynamic (raw-id) tables train with the dense optimizer, like the unsharded ones.

A replicated dynamic table is an ordinary parameter of the sharded collection (not in its
fused optimizer): K steps of `torch.optim` (Adam, Adagrad, SGD) on the sharded collection,
every rank its own batch of raw ids, give every raw id the vector the unsharded dynamic
collection gives it when the same optimizer trains it on the concatenation of the ranks'
batches; the replicas hold the same map and rows. This is what `shardrec train
--sharding-type data_parallel` does to raw-id tables (docs/dynamic.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
import torch
from torch import Tensor

from shardrec_collectives import ShardingEnv
from shardrec_embedding import DynamicTableConfig, EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import construct_module_sharding_plan, data_parallel
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, assert_close, random_lengths, seeded_generator

FEATURES = ["u", "i", "g"]
STEPS = 5
POOL = 9  # distinct raw ids per raw feature

OPTIMIZERS: dict[str, Callable[[Iterable[Tensor]], torch.optim.Optimizer]] = {
    "adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
}


def _const(w: Tensor) -> None:
    torch.nn.init.constant_(w, 0.05)  # an id's first row must not depend on its slot


def configs() -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(name="user", num_embeddings=16, embedding_dim=4, feature_names=["u"],
                           init_fn=_const, dynamic=DynamicTableConfig()),
        EmbeddingBagConfig(name="item", num_embeddings=16, embedding_dim=8, feature_names=["i"],
                           init_fn=_const, pooling="MEAN",
                           dynamic=DynamicTableConfig(admission="THRESHOLD",
                                                      admission_threshold=2)),
        EmbeddingBagConfig(name="genre", num_embeddings=5, embedding_dim=4, feature_names=["g"],
                           init_fn=_const),
    ]  # fmt: skip


def batch(rank: int, step: int) -> tuple[KeyedJaggedTensor, Tensor]:
    g = seeded_generator("dyn-dp", rank, step)
    pools = torch.randint(-(2**62), 2**62, (2, POOL), generator=seeded_generator("dyn-dp-pool"))
    size = (rank + step) % 3 + 1
    lengths = random_lengths(len(FEATURES) * size, 3, g)
    per_key = lengths.view(len(FEATURES), size).sum(1).tolist()
    values = [pools[k][torch.randint(0, POOL, (per_key[k],), generator=g)] for k in range(2)]
    values.append(torch.randint(0, 5, (per_key[2],), generator=g))
    kjt = KeyedJaggedTensor(FEATURES, torch.cat(values), lengths=lengths, stride=size)
    return kjt, torch.randn(size, 16, generator=g)


def concat(pairs: list[tuple[KeyedJaggedTensor, Tensor]]) -> tuple[KeyedJaggedTensor, Tensor]:
    dicts = [k.to_dict() for k, _ in pairs]
    kjt = KeyedJaggedTensor(
        FEATURES,
        torch.cat([d[f].values() for f in FEATURES for d in dicts]),
        lengths=torch.cat([d[f].lengths() for f in FEATURES for d in dicts]),
        stride=sum(k.stride() for k, _ in pairs),
    )
    return kjt, torch.cat([c for _, c in pairs])


def rows_by_id(ebc: torch.nn.Module) -> dict[str, dict[int, list[float]]]:
    """Per dynamic table: raw id -> its row."""
    out = {}
    for name in ("user", "item"):
        ids, slots = ebc.dynamic_tables.table(name).items()
        weight = ebc.embedding_bags[name].weight.detach()
        out[name] = {int(i): weight[s].tolist() for i, s in zip(ids, slots, strict=True)}
    return out


def train_sharded(ctx: RankContext, optimizers: list[str]) -> list[dict]:
    env = ShardingEnv.from_process_group(ctx.pg)
    results = []
    for opt in optimizers:
        ebc = EmbeddingBagCollection(configs())
        plan = construct_module_sharding_plan(
            ebc, {n: data_parallel() for n in ("user", "item", "genre")}, world_size=ctx.world_size
        )
        sharded = EmbeddingBagCollectionSharder().shard(ebc, plan, env)
        assert not list(sharded.fused_optimizer.params)  # replicated: the dense optimizer's
        optimizer = OPTIMIZERS[opt](list(sharded.parameters()))
        for step in range(STEPS):
            kjt, coefficients = batch(ctx.rank, step)
            (sharded(kjt).wait().values() * coefficients).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        results.append(
            {"rows": rows_by_id(sharded), "genre": sharded.embedding_bags["genre"].weight.detach()}
        )
    return results


@pytest.mark.parametrize("world", [1, 2])
def test_data_parallel_dynamic_tables_match_unsharded_dense_training(pool_factory, world):  # type: ignore[no-untyped-def]
    per_rank = pool_factory(world).run(train_sharded, list(OPTIMIZERS))
    for o, opt in enumerate(OPTIMIZERS):
        ref = EmbeddingBagCollection(configs())
        optimizer = OPTIMIZERS[opt](list(ref.parameters()))
        for step in range(STEPS):
            kjt, coefficients = concat([batch(r, step) for r in range(world)])
            (ref(kjt).values() * coefficients).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
        expected = rows_by_id(ref)
        assert expected["user"] and expected["item"]
        # the threshold kept some ids out: their rows must not have trained anything
        assert len(expected["item"]) < POOL
        for rank, results in enumerate(per_rank):
            got = results[o]
            what = f"{opt} world {world} rank {rank}"
            for name, rows in expected.items():
                assert got["rows"][name].keys() == rows.keys(), f"{what} {name}: ids differ"
                for i, row in rows.items():
                    assert_close(torch.tensor(got["rows"][name][i]), torch.tensor(row), msg=what)
            assert_close(got["genre"], ref.embedding_bags["genre"].weight.detach(), msg=what)
        # the rows moved away from their constant start
        assert any(abs(v - 0.05) > 1e-3 for r in expected["user"].values() for v in r)
