"""`DynamicTable.start_undo` / `rollback_step` / `commit_step` (dynamic/undo.py): a table whose
recorded steps are rolled back (some failing part-way, inside eviction or admission) ends every
step in exactly the state of a twin table that never saw those batches: per-slot metadata,
free stack, sketch, counters, id -> slot answers, and the resets it ran (slots, generation);
a committed record changes nothing. Every policy, both backends."""

from __future__ import annotations

import random

import pytest
import torch

from shardrec_embedding.dynamic import DynamicTableConfig, undo
from shardrec_embedding.dynamic.id_map import idmap_native_available
from shardrec_embedding.dynamic.table import COUNTERS, DynamicTable

BACKENDS = [
    pytest.param(
        "native",
        marks=pytest.mark.skipif(not idmap_native_available(), reason="no C compiler"),
    ),
    "torch",
]
POLICIES = [
    {"eviction": "LRU"},
    {"eviction": "LFU"},
    {"eviction": "TTL", "ttl_steps": 3, "scan_per_step": 5},
    {"eviction": "NONE"},
    {"eviction": "LRU", "admission": "THRESHOLD", "admission_threshold": 2, "sketch_width": 64},
    {"eviction": "LRU", "admission": "PROBABILITY", "admission_probability": 0.5},
]
CAPACITY = 24


def _table(backend: str, fields: dict[str, object], defer: bool) -> tuple[DynamicTable, list]:  # type: ignore[type-arg]
    cfg = DynamicTableConfig(**fields)  # type: ignore[arg-type]  # test parameters
    cfg.validate("t", CAPACITY)
    table = DynamicTable("t", cfg, CAPACITY, 4, backend=backend)  # type: ignore[arg-type]
    table.in_flight.defer_resets = defer
    log: list[tuple[list[int], int]] = []
    table.add_reset_hook(lambda s: log.append((s.tolist(), table.generation)))
    return table, log


def _state(table: DynamicTable, probe: torch.Tensor) -> list[object]:
    return [
        table.slot_ids.tolist(),
        table.occupied.tolist(),
        table.last_seen.tolist(),
        table.counts.tolist(),
        table.free_slots.tolist(),
        table.sketch.tolist(),
        [table.get_extra_state()[k] for k in COUNTERS],
        table.find(probe).tolist(),
        len(table.map),
        table.in_flight.pending_resets,
    ]


class _Injected(Exception):
    pass


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fields", POLICIES, ids=lambda f: "-".join(map(str, f.values())))
@pytest.mark.parametrize("defer", [True, False], ids=["deferred", "immediate"])
@pytest.mark.parametrize("whole", [undo.WHOLE, 10**9], ids=["copies", "gathers"])
def test_rolled_back_steps_leave_the_never_saw_it_state(backend, fields, defer, whole, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(undo, "WHOLE", whole)  # freed slots' metadata gathered, or copied whole
    rng = random.Random(f"undo-{backend}-{fields}-{defer}")
    pool = [rng.randrange(-(2**63), 2**63) for _ in range(80)]
    probe = torch.tensor(pool)
    table, log = _table(backend, fields, defer)
    twin, twin_log = _table(backend, fields, defer)
    rolled = committed = 0
    for step in range(80):
        ids = torch.tensor([pool[min(int(rng.paretovariate(0.7)) - 1, 79)] for _ in range(20)])
        kind = rng.choices(
            ["plain", "commit", "rollback", "fail-free", "fail-admit"], weights=[3, 2, 2, 1, 1]
        )[0]
        if kind == "plain":
            assert torch.equal(table.map_ids(ids, training=True), twin.map_ids(ids, training=True))
        elif kind == "commit":
            table.start_undo()
            got = table.map_ids(ids, training=True)
            table.commit_step()
            assert torch.equal(got, twin.map_ids(ids, training=True))
            committed += 1
        else:
            table.start_undo()
            if kind == "rollback":
                table.map_ids(ids, training=True)
            else:  # a failure after part of the step's writes
                name = "_free" if kind == "fail-free" else "_insert_new"
                original = getattr(table, name)

                def failing(*args, _original=original):  # type: ignore[no-untyped-def]
                    _original(*args)
                    raise _Injected

                setattr(table, name, failing)
                try:
                    table.map_ids(ids, training=True)
                except _Injected:
                    pass
                finally:
                    delattr(table, name)
            table.rollback_step()
            rolled += 1
        if step % 7 == 0:  # the deferred resets run (a lookup) on both
            table.in_flight.flush_resets()
            twin.in_flight.flush_resets()
        assert _state(table, probe) == _state(twin, probe), (step, kind)
        assert log == twin_log, (step, kind)
    assert rolled >= 5 and committed >= 5
    assert twin.stats()["evictions"] > 0 or fields["eviction"] == "NONE"
    assert table.in_flight.defer_resets is defer


def test_rollback_without_a_record_or_a_step_changes_nothing() -> None:
    table, _ = _table("torch", {"eviction": "LRU"}, True)
    table.map_ids(torch.arange(30), training=True)
    probe = torch.arange(40)
    before = _state(table, probe)
    table.rollback_step()  # no record
    table.start_undo()
    table.rollback_step()  # a record of no step
    table.start_undo()
    table.commit_step()
    assert _state(table, probe) == before
    table.start_undo()
    table.map_ids(torch.arange(100, 140), training=False)  # unknown reads, rolled back
    assert table.stats()["unknown_reads"] == 40
    table.rollback_step()
    assert _state(table, probe) == before
