"""Issue 27's audit gaps for raw-id (dynamic) tables, through DistributedModelParallel on 2 gloo
ranks: the bad inputs, each a clear error naming the table, the value and the fix, raised on
every rank (no hang); and the raw ids that are *not* an error (INT64_MIN, INT64_MAX, -1, 0)
train row_wise to the vectors the unsharded table gives them, with every fused optimizer.

The checkpoint refusals (capacity or dim differs) are in test_dynamic_dmp.py
(`test_mismatched_checkpoint_is_refused_on_every_rank`); here, a dynamic-table checkpoint with
one damaged data file fails verification on every rank before anything (rows, id maps,
optimizer state) loads.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch import Tensor, nn

from shardrec_collectives import PeerError, ShardingEnv, barrier
from shardrec_dmp import CheckpointError, DistributedModelParallel, load, save
from shardrec_embedding import DynamicTableConfig, EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_embedding.fused import FusedEmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import SUPPORTED_OPTIONS, EmbOptimType, FusedOptimSpec
from shardrec_planner import ShardingPlan, construct_module_sharding_plan, row_wise, table_wise
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_sharding.dynamic import DynamicShardedEmbeddingBagCollection
from shardrec_testing import RankContext, assert_close, seeded_generator

SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
EXTREMES = [INT64_MIN, INT64_MAX, -1, 0, 1, INT64_MIN + 1, INT64_MAX - 1]

# (dynamic fields or num_embeddings, the error type, words the message must hold: the table,
# the value, the fix)
BAD_CONFIGS: list[tuple[dict[str, object], type[Exception], list[str]]] = [
    ({"num_embeddings": 0}, ValueError, ["'user'", "capacity", "got 0", ">= 1"]),
    ({"num_embeddings": -3}, ValueError, ["'user'", "capacity", "got -3", ">= 1"]),
    ({"capacity": 0}, ValueError, ["'user'", "capacity", "got 0", ">= 1"]),
    ({"capacity": -5}, ValueError, ["'user'", "capacity", "got -5", ">= 1"]),
    ({"eviction": "MRU"}, ValueError, ["'user'", "'MRU'", "LRU, LFU, TTL"]),
    ({"admission": "SOMETIMES"}, ValueError, ["'user'", "'SOMETIMES'", "ALWAYS, THRESHOLD"]),
    ({"unknown_id": "RANDOM"}, ValueError, ["'user'", "'RANDOM'", "ZERO, DEFAULT_ROW"]),
    ({"admission_threshold": 0}, ValueError, ["'user'", "admission_threshold", "got 0", ">= 1"]),
    ({"eviction": "TTL", "ttl_steps": 0}, ValueError, ["'user'", "ttl_steps", "got 0", ">= 1"]),
    ({"eviction": "TTL"}, ValueError, ["'user'", "needs ttl_steps", ">= 1"]),
    ({"capacity": 2.5}, TypeError, ["'user'", "capacity", "2.5", "an int >= 1"]),
]


def _const(w: Tensor) -> None:
    torch.nn.init.constant_(w, 0.05)


def configs(user: dict[str, object] | None = None) -> list[EmbeddingBagConfig]:
    """user (dynamic, 16 slots, dim 4) <- "u"; item (dynamic, 8 slots, dim 2) <- "i";
    `user` overrides the user table's `num_embeddings` or `DynamicTableConfig` fields."""
    fields = dict(user or {})
    rows = fields.pop("num_embeddings", 16)
    return [
        EmbeddingBagConfig(name="user", num_embeddings=rows, embedding_dim=4,  # type: ignore[arg-type]
                           feature_names=["u"], init_fn=_const,
                           dynamic=DynamicTableConfig(**fields)),  # type: ignore[arg-type]
        EmbeddingBagConfig(name="item", num_embeddings=8, embedding_dim=2, feature_names=["i"],
                           init_fn=_const, dynamic=DynamicTableConfig()),
    ]  # fmt: skip


class Model(nn.Module):
    def __init__(self, user: dict[str, object] | None = None) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(configs(user))

    def forward(self, kjt: KeyedJaggedTensor) -> Tensor:
        out = self.sparse(kjt).values()
        loss: Tensor = (out * torch.arange(1.0, out.shape[1] + 1)).sum()
        return loss


def wrap(
    ctx: RankContext,
    kinds: tuple[str, str],
    user: dict[str, object] | None = None,
    spec: FusedOptimSpec = SPEC,
) -> DistributedModelParallel:
    model = Model(user)
    gens = {"row_wise": lambda: row_wise(), "table_wise": lambda: table_wise(rank=1)}
    plan = construct_module_sharding_plan(
        model.sparse,
        {"user": gens[kinds[0]](), "item": gens[kinds[1]]()},
        world_size=ctx.world_size,
    )
    return DistributedModelParallel(
        model,
        env=ShardingEnv.from_process_group(ctx.pg),
        plan=ShardingPlan(plan={"sparse": plan}),
        sharders=[EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())],
    )


def batch(rank: int, step: int) -> KeyedJaggedTensor:
    """Rank `rank`'s batch of `step`: ids drawn from EXTREMES (duplicates across ranks)."""
    g = seeded_generator("dyn-bad", rank, step)
    size = (rank + step) % 3 + 2
    lengths = torch.randint(1, 4, (2 * size,), generator=g)
    pool = torch.tensor(EXTREMES)
    ids = pool[torch.randint(0, pool.numel(), (int(lengths.sum()),), generator=g)]
    return KeyedJaggedTensor(["u", "i"], ids, lengths=lengths, stride=size)


def _message(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# -- bad configs: refused on every rank, through DMP ------------------------------------------


def build_bad(ctx: RankContext) -> list[str]:
    out = []
    for fields, _, _ in BAD_CONFIGS:
        try:
            wrap(ctx, ("row_wise", "table_wise"), fields)
        except (TypeError, ValueError) as exc:
            out.append(_message(exc))
        else:
            out.append("no error")
    return out


def test_bad_configs_are_refused_on_every_rank(pool_factory):  # type: ignore[no-untyped-def]
    for rank, messages in enumerate(pool_factory(2).run(build_bad)):
        for (fields, kind, words), message in zip(BAD_CONFIGS, messages, strict=True):
            assert message.startswith(kind.__name__), (rank, fields, message)
            assert all(w in message for w in words), (rank, fields, message)


# -- float ids: refused on every rank before any exchange -------------------------------------


def float_ids(ctx: RankContext, bad_ranks: tuple[int, ...], kinds: tuple[str, str]) -> list[str]:
    """A good step, then a step whose ids are floats on `bad_ranks`; then a good step again
    (the ranks are still in step: nothing hung or half-exchanged)."""
    dmp = wrap(ctx, kinds)
    dmp(batch(ctx.rank, 0)).backward()
    kjt = batch(ctx.rank, 1)
    if ctx.rank in bad_ranks:
        kjt = KeyedJaggedTensor(["u", "i"], kjt.values().double(), lengths=kjt.lengths())
    got = "no error"
    try:
        dmp(kjt).backward()
    except (TypeError, PeerError) as exc:
        got = _message(exc)
    dmp(batch(ctx.rank, 2)).backward()
    return [got]


@pytest.mark.parametrize(
    ("bad_ranks", "kinds"),
    [((1,), ("row_wise", "table_wise")), ((0, 1), ("table_wise", "row_wise"))],
    ids=["rank1-only", "both"],
)
def test_float_ids_raise_on_every_rank(pool_factory, bad_ranks, kinds):  # type: ignore[no-untyped-def]
    for rank, (message,) in enumerate(pool_factory(2).run(float_ids, bad_ranks, kinds)):
        if rank in bad_ranks:
            assert message.startswith("TypeError"), message
            for words in ("torch.float64", "'user'", "'item'", ".long()"):
                assert words in message, message
        else:
            assert message.startswith("PeerError"), message


# -- extreme int64 ids: not an error; row_wise training equals the unsharded table ----------


def train_extremes(
    ctx: RankContext, specs: list[FusedOptimSpec]
) -> list[dict[str, tuple[Tensor, Tensor]]]:
    """Per spec: 3 steps of user and item row_wise; this rank's (ids, rows) per table."""
    results = []
    for spec in specs:
        dmp = wrap(ctx, ("row_wise", "row_wise"), spec=spec)
        for step in range(3):
            dmp(batch(ctx.rank, step)).backward()
            dmp.fused_optimizer.step()
        sharded = next(
            m for m in dmp.modules() if isinstance(m, DynamicShardedEmbeddingBagCollection)
        )
        out = {}
        for name in ("user", "item"):
            ids, slots = sharded.dynamic_tables.table(name).items()
            weight = sharded.embedding_bags[name].weight
            assert isinstance(weight, Tensor)
            out[name] = (ids.clone(), weight.detach()[slots].clone())
        results.append(out)
    return results


def concat(kjts: list[KeyedJaggedTensor]) -> KeyedJaggedTensor:
    dicts = [k.to_dict() for k in kjts]
    keys = ["u", "i"]
    return KeyedJaggedTensor(
        keys,
        torch.cat([d[f].values() for f in keys for d in dicts]),
        lengths=torch.cat([d[f].lengths() for f in keys for d in dicts]),
        stride=sum(k.stride() for k in kjts),
    )


def spec_for(optimizer: EmbOptimType) -> FusedOptimSpec:
    """A spec of `optimizer` (Adam / LAMB kinds: a smaller rate; LARS: with momentum)."""
    adam_like = "ADAM" in optimizer.name or "LAMB" in optimizer.name
    rate = 0.02 if adam_like else 0.1
    if optimizer is EmbOptimType.LARS_SGD:
        return FusedOptimSpec(optimizer=optimizer, learning_rate=rate, momentum=0.9)
    return FusedOptimSpec(optimizer=optimizer, learning_rate=rate)


# Issue 27: every fused optimizer the static tables support, sharded too (one spec each).
SPECS = [spec_for(o) for o in SUPPORTED_OPTIONS]


def test_extreme_int64_ids_train_row_wise_like_unsharded_with_every_optimizer(pool_factory):  # type: ignore[no-untyped-def]
    per_rank = pool_factory(2).run(train_extremes, SPECS)
    weights = torch.arange(1.0, 7.0)
    for k, spec in enumerate(SPECS):
        ref = FusedEmbeddingBagCollection(configs(), spec)
        for step in range(3):
            (ref(concat([batch(r, step) for r in range(2)])).values() * weights).sum().backward()
        for name in ("user", "item"):
            table = ref.dynamic_tables.table(name)
            weight = ref.embedding_bags[name].weight
            assert isinstance(weight, Tensor)
            seen: set[int] = set()
            for rank_rows in per_rank:
                ids, rows = rank_rows[k][name]
                seen.update(ids.tolist())
                slots = table.find(ids)
                assert bool((slots >= 0).all()), (spec.optimizer, name)
                assert_close(rows, weight.detach()[slots], msg=f"{spec.optimizer} {name}")
            # every extreme id the batches held has a row, split over the two ranks' parts
            assert seen == set(table.items()[0].tolist()), (spec.optimizer, name)
            assert {INT64_MIN, INT64_MAX, -1} <= seen, (spec.optimizer, name, seen)


# -- a damaged dynamic-table checkpoint: refused on every rank, nothing loaded --------------


def snapshot(dmp: DistributedModelParallel) -> dict[str, Tensor]:
    """This rank's rows, id-map buffers and optimizer state."""
    state = {k: p.detach().clone() for k, p in dmp.named_parameters()}
    state.update({k: b.clone() for k, b in dmp.named_buffers()})
    sharded = next(m for m in dmp.modules() if isinstance(m, DynamicShardedEmbeddingBagCollection))
    for name in ("user", "item"):
        for i, (module, _) in enumerate(sharded._lookup_modules_of(name)):
            for key, t in module.optimizer_state().items():
                state[f"opt.{name}.{i}.{key}"] = t.clone()
    return state


def damaged_on_every_rank(ctx: RankContext, path: str) -> str:
    dmp = wrap(ctx, ("row_wise", "table_wise"))
    for step in range(2):
        dmp(batch(ctx.rank, step)).backward()
        dmp.fused_optimizer.step()
    save(path, dmp, {"fused": dmp.fused_optimizer})
    if ctx.rank == 0:  # one byte of rank 1's data file (its part of the id maps among it)
        name = sorted(n for n in os.listdir(path) if n.endswith(".distcp"))[-1]
        with open(f"{path}/{name}", "r+b") as f:
            f.seek(11)
            byte = f.read(1)[0]
            f.seek(11)
            f.write(bytes([byte ^ 0x04]))
    barrier(ShardingEnv.from_process_group(ctx.pg))
    other = wrap(ctx, ("row_wise", "table_wise"))
    other(batch(ctx.rank, 5)).backward()  # a state of its own, which the load must not touch
    other.fused_optimizer.step()
    before = snapshot(other)
    try:
        load(path, other, {"fused": other.fused_optimizer})
    except CheckpointError as exc:
        message = str(exc)
    else:
        message = "no error"
    after = snapshot(other)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before), "the load changed the model"
    return message


def test_damaged_dynamic_checkpoint_is_refused_on_every_rank(pool_factory, tmp_path):  # type: ignore[no-untyped-def]
    path = str(tmp_path / "ckpt")
    messages = pool_factory(2).run(damaged_on_every_rank, path)
    for message in messages:
        assert "is damaged" in message and ".distcp" in message, message
