"""An owner whose id map raises part-way through a batch (after the ids were exchanged) makes
every rank raise, instead of leaving the others waiting in the way-back exchange: the owner its
own error (a note names the table and its rank), the others a `DynamicMapError` (a
`PeerError`) naming the table, the owner rank and the cause; the failing map is left consistent (the
pending ids it entered are dropped, as on one rank), and the ranks stay in step: the next
batches train on both, and every map is as before the failed batch (a twin module that never
saw it gives the same maps, outputs, weights and optimizer state, bit for bit). Also: a rank
refusing its batch (float ids) makes the other raise, with
no extra collective on the good path (the flags ride in the id exchange's headers)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.distributed as dist
from test_dynamic_exchange import _sharded
from test_dynamic_sharding import CASES, batch, configs, plan_for
from torch.distributed._shard.sharded_tensor import ShardedTensor

from shardrec_collectives import PeerError, ShardingEnv
from shardrec_embedding import DynamicTableConfig, EmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_sharding.dynamic import DynamicMapError
from shardrec_testing import RankContext

FAIL_FROM = 2  # the failing rank's map raises in its first admission from this step on
STEPS = 8


def _consistent(part: torch.nn.Module) -> bool:
    """The map finds exactly the ids its slots hold (no pending entry left behind)."""
    ids, slots = part.items()  # type: ignore[operator]
    held = torch.equal(part.find(ids), slots)  # type: ignore[operator]
    return held and len(part.map) == ids.numel()  # type: ignore[arg-type]


def owner_fails(ctx: RankContext, types: tuple[str, ...], table: str) -> list[object]:
    """STEPS training steps of the sharded collection; on rank 1 only, table `table`'s map
    raises a MemoryError inside its admission at one step. Per step: "ok" or the error's
    (type, message, cause type) and whether the failing table's map is consistent."""
    env = ShardingEnv.from_process_group(ctx.pg)
    sharded = _sharded(env, types, ctx.world_size)
    part = sharded.dynamic_tables.table(table)
    if ctx.rank == 1:
        original = part._insert_new
        fired = [False]

        def failing(uniq: torch.Tensor, occurrences: torch.Tensor, step: int) -> torch.Tensor:
            if step >= FAIL_FROM and not fired[0]:
                fired[0] = True
                raise MemoryError("injected: no memory for the new ids")
            return original(uniq, occurrences, step)

        part._insert_new = failing
    out: list[object] = []
    for step in range(STEPS):
        kjt, coefficients = batch("owner-error", ctx.rank, step)
        try:
            (sharded(kjt).values() * coefficients).sum().backward()
            out.append("ok")
        except (DynamicMapError, MemoryError) as exc:  # the peer's / the owner's own
            said = " | ".join([str(exc), *getattr(exc, "__notes__", [])])
            out.append((type(exc).__name__, said, type(exc.__cause__).__name__, _consistent(part)))
    return out


@pytest.mark.parametrize(
    ("types", "table"),
    [
        (("row_wise", "data_parallel", "table_wise"), "t0"),  # a partitioned map fails
        (("table_wise", "row_wise", "row_wise"), "t1"),  # a row_wise part (rank 1's) fails
        (("row_wise", "data_parallel", "table_wise"), "t1"),  # one replica fails
    ],
    ids=["row_wise", "row_wise-second-table", "replicated"],
)
def test_owner_map_error_raises_on_every_rank(pool_factory, types, table):  # type: ignore[no-untyped-def]
    per_rank = pool_factory(2).run(owner_fails, types, table, timeout_s=300)
    errors = [[s for s in steps if s != "ok"] for steps in per_rank]
    assert [len(e) for e in errors] == [1, 1], per_rank  # the same step failed on both ranks
    assert per_rank[0].index(errors[0][0]) == per_rank[1].index(errors[1][0]), per_rank
    assert per_rank[0][-1] == per_rank[1][-1] == "ok", per_rank  # still in step afterwards
    (owner_type, owner_msg, _, consistent) = errors[1][0]
    assert owner_type == "MemoryError", owner_msg  # its own error, type kept, and a note:
    assert consistent, owner_msg
    for words in ("injected", f"dynamic table {table!r} on rank 1", "every rank stops"):
        assert words in owner_msg, owner_msg
    (peer_type, peer_msg, peer_cause, _) = errors[0][0]
    assert peer_type == "DynamicMapError" and peer_cause == "PeerError", peer_msg
    for words in (f"[{table!r}]", "rank(s) [1]", "rank 0 stops", "MemoryError", "injected"):
        assert words in peer_msg, peer_msg


def bad_input(ctx: RankContext) -> list[object]:
    """A good step (counting the collectives of its remap), then float ids on rank 1 only,
    then a good step again."""
    env = ShardingEnv.from_process_group(ctx.pg)
    sharded = _sharded(env, ("row_wise", "data_parallel", "table_wise"), ctx.world_size)
    calls = {"all_reduce": 0, "all_to_all_single": 0, "all_gather_object": 0}
    originals = {name: getattr(dist, name) for name in calls}

    def counting(name: str):  # type: ignore[no-untyped-def]
        def call(*args: object, **kwargs: object) -> object:
            calls[name] += 1
            return originals[name](*args, **kwargs)

        return call

    kjt, _ = batch("bad-input", ctx.rank, 0)
    for name in calls:
        setattr(dist, name, counting(name))
    try:
        sharded._remap(kjt)
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)
    got: list[object] = [dict(calls)]
    kjt, _ = batch("bad-input", ctx.rank, 1)
    if ctx.rank == 1:
        kjt = KeyedJaggedTensor(kjt.keys(), kjt.values().double(), lengths=kjt.lengths())
    try:
        sharded(kjt)
        got.append("no error")
    except (TypeError, PeerError) as exc:
        got.append(f"{type(exc).__name__}: {exc}")
    kjt, _ = batch("bad-input", ctx.rank, 2)
    got.append(tuple(sharded(kjt).values().shape))
    return got


def test_refused_batch_raises_on_every_rank_without_an_extra_collective(pool_factory):  # type: ignore[no-untyped-def]
    per_rank = pool_factory(2).run(bad_input, timeout_s=300)
    for rank, (calls, message, shape) in enumerate(per_rank):
        # the ids out (sizes, ids) and the slots back: no flag all-reduce, no message gather
        assert calls == {"all_reduce": 0, "all_to_all_single": 3, "all_gather_object": 0}, calls
        if rank == 1:
            assert message.startswith("TypeError") and "torch.float64" in message, message
        else:
            assert message.startswith("PeerError") and "rank 1" in message, message
        assert len(shape) == 2, shape


def _adagrad(env: ShardingEnv, types: tuple[str, ...], world: int) -> torch.nn.Module:
    """`_sharded` with a fused row-wise Adagrad (optimizer state to compare)."""
    small = [
        dataclasses.replace(c, num_embeddings=n, dynamic=DynamicTableConfig(eviction="LRU"))
        for c, n in zip(configs(CASES[0])[:2], (8, 6), strict=True)
    ] + configs(CASES[0])[2:]
    ebc = EmbeddingBagCollection(small)
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": 0.1}
    )
    return sharder.shard(ebc, plan_for(ebc, types, world), env)


def _map_state(sharded: torch.nn.Module) -> dict[str, list[object]]:
    """Every dynamic table's map state on this rank (its part or replica)."""
    dyn = sharded.dynamic_tables
    out = {}
    for name in dyn.tables:
        part = dyn.table(name)
        out[name] = [
            part.slot_ids.tolist(),
            part.occupied.tolist(),
            part.last_seen.tolist(),
            part.counts.tolist(),
            part.free_slots.tolist(),
            part.sketch.tolist(),
            part.get_extra_state(),
            part.in_flight.pending_resets,
            [t.tolist() for t in part.items()],
            part.find(part.slot_ids).tolist(),
        ]
    return out


def _tensors(sharded: torch.nn.Module) -> dict[str, torch.Tensor]:
    """This rank's weights (its shards) and fused optimizer state."""
    out: dict[str, torch.Tensor] = {}
    for key, value in sharded.state_dict().items():
        if isinstance(value, ShardedTensor):
            for i, shard in enumerate(value.local_shards()):
                out[f"{key}/{i}"] = shard.tensor.detach().clone()
        elif isinstance(value, torch.Tensor):
            out[key] = value.detach().clone()
    fused = [m for s in sharded._strategies for m in s.lookup.fused_modules()]
    for i, m in enumerate(fused):
        for k, v in m.optimizer_state().items():
            out[f"fused{i}/{k}"] = v.detach().clone()
    return out


def never_saw_it(ctx: RankContext, types: tuple[str, ...], table: str) -> list[object]:
    """Rank 1's map of `table` raises in its admission at step FAIL_FROM; a twin module trains
    on the same batches except that one. Per step: whether every rank failed it, and whether
    every map state, output, weight and optimizer state equals the twin's bit for bit."""
    env = ShardingEnv.from_process_group(ctx.pg)
    sharded = _adagrad(env, types, ctx.world_size)
    twin = _adagrad(env, types, ctx.world_size)
    part = sharded.dynamic_tables.table(table)
    if ctx.rank == 1:
        original = part._insert_new
        fired = [False]

        def failing(uniq: torch.Tensor, occurrences: torch.Tensor, step: int) -> torch.Tensor:
            if step >= FAIL_FROM and not fired[0]:
                fired[0] = True
                raise MemoryError("injected: no memory for the new ids")
            return original(uniq, occurrences, step)

        part._insert_new = failing
    rows: list[object] = []
    for step in range(3 * STEPS):
        kjt, coefficients = batch("undo", ctx.rank, step)
        try:
            got = sharded(kjt).values()
        except (DynamicMapError, MemoryError):
            rows.append(("failed", _map_state(sharded) == _map_state(twin)))
            continue
        (got * coefficients).sum().backward()
        want = twin(kjt).values()
        (want * coefficients).sum().backward()
        a, b = _tensors(sharded), _tensors(twin)
        same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        rows.append((torch.equal(got, want), same, _map_state(sharded) == _map_state(twin)))
    evictions = sum(s["evictions"] for s in twin.dynamic_tables.stats().values())
    return [rows, evictions]


@pytest.mark.parametrize(
    ("types", "table"),
    [
        (("row_wise", "data_parallel", "table_wise"), "t0"),
        (("table_wise", "row_wise", "row_wise"), "t1"),
        (("row_wise", "data_parallel", "table_wise"), "t1"),
    ],
    ids=["row_wise", "row_wise-second-table", "replicated"],
)
def test_failed_batch_leaves_every_map_as_before_it(pool_factory, types, table):  # type: ignore[no-untyped-def]
    """After an owner's map fails, every rank's maps, and then outputs, weights and optimizer
    state, are those of a twin that never saw the batch (docs/dynamic.md, when an owner fails)."""
    per_rank = pool_factory(2).run(never_saw_it, types, table, timeout_s=300)
    failed = [[s for s, row in enumerate(rows) if row[0] == "failed"] for rows, _ in per_rank]
    assert failed[0] == failed[1] and len(failed[0]) == 1, per_rank  # one step, every rank
    for rank, (rows, evictions) in enumerate(per_rank):
        assert evictions > 0, rank  # the small tables evict: the undo of evictions is exercised
        assert rows[failed[0][0]] == ("failed", True), (rank, rows)
        for step, row in enumerate(rows):
            if step != failed[0][0]:
                assert row == (True, True, True), (rank, step, rows)
