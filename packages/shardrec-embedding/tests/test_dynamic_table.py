"""The id -> slot map and the dynamic table's policies against a Python dict model
(`_dynamic_model.ModelTable`), on randomized id streams, native and torch backends alike."""

from __future__ import annotations

import random

import pytest
import torch
from _dynamic_model import ModelTable

from shardrec_embedding.dynamic import DynamicTableConfig
from shardrec_embedding.dynamic.id_map import IdSlotMap, idmap_native_available
from shardrec_embedding.dynamic.table import DynamicTable

BACKENDS = [
    pytest.param(
        "native",
        marks=pytest.mark.skipif(not idmap_native_available(), reason="no C compiler"),
    ),
    "torch",
]
EXTREMES = [0, -1, 1, 2**63 - 1, -(2**63), 2**40, -(2**40) + 3]


def _config(capacity: int, **fields: object) -> DynamicTableConfig:
    cfg = DynamicTableConfig(**fields)  # type: ignore[arg-type]  # test parameters
    cfg.validate("t", capacity)
    return cfg


def _stream(seed: int, steps: int, pool: int, batch: int) -> list[list[int]]:
    rng = random.Random(seed)
    ids = EXTREMES + [rng.randrange(-(2**63), 2**63) for _ in range(pool)]
    # skewed: low ranks repeat often (hits), the tail brings new ids (inserts, evictions)
    return [
        [
            ids[min(int(rng.paretovariate(0.8)) - 1, len(ids) - 1)]
            for _ in range(rng.randrange(batch))
        ]
        for _ in range(steps)
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_id_map_matches_dict(backend: str) -> None:
    rng = random.Random(0)
    m = IdSlotMap(64, backend=backend)  # type: ignore[arg-type]
    model: dict[int, int] = {}
    next_slot = 0
    for _ in range(300):
        op = rng.random()
        pool = EXTREMES + [rng.randrange(-50, 50) for _ in range(5)]
        if op < 0.5 and len(model) < 40:
            new = list(dict.fromkeys(i for i in pool if i not in model))[: rng.randrange(1, 6)]
            slots = list(range(next_slot, next_slot + len(new)))
            next_slot += len(new)
            m.insert(torch.tensor(new, dtype=torch.int64), torch.tensor(slots, dtype=torch.int64))
            model.update(zip(new, slots, strict=True))
        elif op < 0.8:
            gone = rng.sample(pool, 3)
            removed = m.erase(torch.tensor(gone, dtype=torch.int64))
            assert removed == sum(model.pop(i, None) is not None for i in set(gone))
        query = pool + list(model)
        got = m.find(torch.tensor(query, dtype=torch.int64)).tolist()
        assert got == [model.get(i, -1) for i in query]
        assert len(m) == len(model)
    ids, slots = m.items()
    assert list(zip(ids.tolist(), slots.tolist(), strict=True)) == sorted(
        model.items(), key=lambda p: p[1]
    )


def test_id_map_refuses_duplicates_and_overfill() -> None:
    for backend in ("torch", *(["native"] if idmap_native_available() else [])):
        m = IdSlotMap(4, backend=backend)  # type: ignore[arg-type]
        m.insert(torch.tensor([7]), torch.tensor([0]))
        with pytest.raises(ValueError, match="already present"):
            m.insert(torch.tensor([7]), torch.tensor([1]))
        with pytest.raises(ValueError, match="more buckets"):
            m.insert(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3]))
        with pytest.raises(TypeError, match="integer"):
            m.find(torch.tensor([1.0]))
    with pytest.raises(ValueError, match="power of two"):
        IdSlotMap(12)


POLICIES = [
    {"eviction": "NONE"},
    {"eviction": "LRU", "scan_per_step": 4},
    {"eviction": "LFU", "scan_per_step": 4},
    {"eviction": "LRU", "scan_per_step": 64},
    {"eviction": "TTL", "ttl_steps": 2, "scan_per_step": 5},
    {"eviction": "TTL", "ttl_steps": 1, "scan_per_step": 64},
    {
        "eviction": "LRU",
        "admission": "THRESHOLD",
        "admission_threshold": 3,
        "sketch_width": 1 << 16,
    },
    {
        "eviction": "LFU",
        "admission": "PROBABILITY",
        "admission_probability": 0.3,
        "admission_seed": 7,
    },
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fields", POLICIES, ids=lambda f: "-".join(map(str, f.values())))
@pytest.mark.parametrize("seed", [0, 1])
def test_table_matches_dict_model(backend: str, fields: dict[str, object], seed: int) -> None:
    capacity = 16
    cfg = _config(capacity, **fields)
    table = DynamicTable("t", cfg, capacity, 4, backend=backend)  # type: ignore[arg-type]
    freed: list[list[int]] = []
    table.add_reset_hook(lambda s: freed.append(s.tolist()))
    model = ModelTable(cfg, capacity)
    for n, batch in enumerate(_stream(seed, 60, 40, 12)):
        ids = torch.tensor(batch, dtype=torch.int64)
        if n % 7 == 6:  # an evaluation batch now and then
            assert table.map_ids(ids, training=False).tolist() == model.lookup(batch)
        else:
            assert table.map_ids(ids, training=True).tolist() == model.train(batch), n
        assert table.stats() == model.stats()
        assert freed == model.freed
    ids, slots = table.items()
    assert list(zip(ids.tolist(), slots.tolist(), strict=True)) == model.items()
    if fields["eviction"] != "NONE" and "admission" not in fields:
        assert table.stats()["evictions"] > 0  # the stream exercised eviction


def test_native_equals_torch_backend() -> None:
    if not idmap_native_available():
        pytest.skip("no C compiler")
    cfg = _config(64, eviction="LRU", scan_per_step=8)
    a = DynamicTable("t", cfg, 64, 4, backend="native")
    b = DynamicTable("t", cfg, 64, 4, backend="torch")
    for batch in _stream(3, 80, 300, 40):
        ids = torch.tensor(batch, dtype=torch.int64)
        assert torch.equal(a.map_ids(ids, training=True), b.map_ids(ids, training=True))
    assert a.stats() == b.stats()
    assert all(torch.equal(x, y) for x, y in zip(a.items(), b.items(), strict=True))


@pytest.mark.parametrize(
    "fields",
    [
        {"eviction": "LRU", "scan_per_step": 8},
        {"eviction": "LRU", "admission": "PROBABILITY", "admission_probability": 0.5},
        {"eviction": "TTL", "ttl_steps": 1, "scan_per_step": 64},
    ],
    ids=lambda f: "-".join(map(str, f.values())),
)
def test_full_table_replacement_keeps_the_state_of_free_then_admit(
    fields: dict[str, object],
) -> None:
    """A full table's evictions and admissions in one native pass (`replace_slots`) leave the
    same slots, counters, freed slots and every buffer (the free stack's included) as the
    torch backend's separate free and admit."""
    if not idmap_native_available():
        pytest.skip("no C compiler")
    cfg = _config(32, **fields)
    a = DynamicTable("t", cfg, 32, 4, backend="native")
    b = DynamicTable("t", cfg, 32, 4, backend="torch")
    freed: tuple[list[list[int]], list[list[int]]] = ([], [])
    a.add_reset_hook(lambda s: freed[0].append(s.tolist()))
    b.add_reset_hook(lambda s: freed[1].append(s.tolist()))
    for batch in _stream(5, 100, 1000, 30):
        ids = torch.tensor(batch, dtype=torch.int64)
        assert torch.equal(a.map_ids(ids, training=True), b.map_ids(ids, training=True))
    assert a.stats() == b.stats() and a.stats()["evictions"] > 20
    assert freed[0] == freed[1]
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert sa[key] == sb[key] if key.endswith("_extra_state") else torch.equal(sa[key], sb[key])


def test_collision_free_while_slots_remain() -> None:
    cfg = _config(1000, eviction="NONE")
    table = DynamicTable("t", cfg, 1000, 4)
    ids = torch.randint(-(2**63), 2**63 - 1, (1000,), generator=torch.Generator().manual_seed(0))
    ids = torch.unique(ids)
    slots = table.map_ids(ids, training=True)
    assert torch.equal(torch.sort(slots).values, torch.arange(ids.numel()))
    again = table.map_ids(ids.flip(0), training=False)
    assert torch.equal(again, slots.flip(0))


def test_threshold_admission_and_zero_batch() -> None:
    cfg = _config(8, admission="THRESHOLD", admission_threshold=3)
    table = DynamicTable("t", cfg, 8, 2)
    assert table.map_ids(torch.tensor([5, 5]), training=True).tolist() == [-1, -1]
    assert table.map_ids(torch.empty(0, dtype=torch.int64), training=True).numel() == 0
    assert table.map_ids(torch.tensor([5, 6]), training=True).tolist() == [0, -1]
    assert table.stats()["rejections"] == 2  # 5 once, then 6 (5 was admitted at its 3rd sight)


def test_state_dict_round_trip_rebuilds_the_map() -> None:
    cfg = _config(16, eviction="LRU", scan_per_step=4)
    a = DynamicTable("t", cfg, 16, 2)
    stream = _stream(5, 30, 30, 10)
    for batch in stream[:15]:
        a.map_ids(torch.tensor(batch, dtype=torch.int64), training=True)
    b = DynamicTable("t", cfg, 16, 2, backend="torch")
    b.load_state_dict(a.state_dict())
    assert b.stats() == a.stats()
    for batch in stream[15:]:
        ids = torch.tensor(batch, dtype=torch.int64)
        assert torch.equal(a.map_ids(ids, training=True), b.map_ids(ids, training=True))


def test_evict_given_slots() -> None:
    table = DynamicTable("t", _config(4), 4, 2)
    table.map_ids(torch.tensor([10, 20, 30]), training=True)
    table.evict(torch.tensor([1, 1, 3]))  # duplicate and unoccupied slots are skipped
    assert table.find(torch.tensor([10, 20, 30])).tolist() == [0, -1, 2]
    assert table.stats()["evictions"] == 1
    with pytest.raises(IndexError, match=r"\[0, 4\)"):
        table.evict(torch.tensor([4]))
    assert table.map_ids(torch.tensor([40]), training=True).tolist() == [1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_distinct_missing_in_first_appearance_order(backend: str) -> None:
    m = IdSlotMap(16, backend=backend)  # type: ignore[arg-type]
    m.insert(torch.tensor([4, -(2**63)]), torch.tensor([0, 1]))
    ids = torch.tensor([9, 4, -3, 9, -(2**63), 2**63 - 1, -3, 9])
    uniq, counts, inverse = m.distinct_missing(ids, m.find(ids))
    assert uniq.tolist() == [9, -3, 2**63 - 1]
    assert counts.tolist() == [3, 2, 1]
    assert inverse.tolist() == [0, -1, 1, 0, -1, 2, 1, 0]
    empty = torch.empty(0, dtype=torch.int64)
    assert [t.numel() for t in m.distinct_missing(empty, empty)] == [0, 0, 0]


def test_load_items_restores_a_table() -> None:
    a = DynamicTable("t", _config(8), 8, 2)
    a.map_ids(torch.tensor([11, 12, 13, 14]), training=True)
    a.evict(torch.tensor([1]))
    ids, slots = a.items()
    b = DynamicTable("t", _config(16), 16, 2, backend="torch")
    b.load_items(ids, slots, last_seen=a.last_seen[slots], counts=a.counts[slots])
    assert b.find(torch.tensor([11, 12, 13, 14])).tolist() == [0, -1, 2, 3]
    assert b.map_ids(torch.tensor([20, 21]), training=True).tolist() == [1, 4]  # hole first
    with pytest.raises(ValueError, match=r"slots must lie in \[0, 16\)"):
        b.load_items(torch.tensor([1]), torch.tensor([16]))
    with pytest.raises(ValueError, match="distinct"):
        b.load_items(torch.tensor([1, 1]), torch.tensor([0, 1]))


native_only = pytest.mark.skipif(not idmap_native_available(), reason="no C compiler")


@native_only
@pytest.mark.parametrize("fields", POLICIES, ids=lambda f: "-".join(map(str, f.values())))
def test_pending_entries_give_the_scratch_set_state(fields: dict[str, object]) -> None:
    """A step's missing ids entered as pending in the map's find pass (no dedup set) leave
    the same slots, counters and buffers as the scratch-set pass, and no pending entry: every
    id ever seen finds its slot or -1, as in the table without pending entries."""
    cfg = _config(48, **fields)
    a = DynamicTable("t", cfg, 48, 4, backend="native")
    b = DynamicTable("t", cfg, 48, 4, backend="native")
    b.map.can_pend = lambda n: False  # type: ignore[method-assign]  # the scratch-set pass
    seen: set[int] = set()
    for batch in _stream(11, 80, 400, 40):
        ids = torch.tensor(batch, dtype=torch.int64)
        assert a.map.can_pend(ids.numel())
        assert torch.equal(a.map_ids(ids, training=True), b.map_ids(ids, training=True))
        seen.update(batch)
        every = torch.tensor(sorted(seen), dtype=torch.int64)
        found = a.find(every)
        assert torch.equal(found, b.find(every))
        assert int(found.max()) < 48
    assert a.stats() == b.stats() and len(a.map) == len(b.map) == a.stats()["occupancy"]
    sa, sb = a.state_dict(), b.state_dict()
    for key in sa:
        assert sa[key] == sb[key] if key.endswith("_extra_state") else torch.equal(sa[key], sb[key])


@native_only
def test_failed_step_leaves_no_pending_entry() -> None:
    """A step that raises after its find pass (here: the victim choice) drops the pending
    entries of its missing ids: they read as absent, the held ids keep their slots, and
    the next step runs as on a table that never saw the failed batch's new ids."""
    cfg = _config(8, eviction="LRU")
    table = DynamicTable("t", cfg, 8, 4, backend="native")
    table.map_ids(torch.arange(8), training=True)  # full
    real = table._evict_for

    def fail(k: int, step: int) -> torch.Tensor:
        raise RuntimeError("victim choice failed")

    table._evict_for = fail  # type: ignore[method-assign]
    new = torch.tensor([100, 101, 100, 3])
    with pytest.raises(RuntimeError, match="victim choice failed"):
        table.map_ids(new, training=True)
    assert table.find(torch.tensor([100, 101])).tolist() == [-1, -1]
    assert table.find(torch.arange(8)).tolist() == list(range(8))
    assert len(table.map) == 8
    table._evict_for = real  # type: ignore[method-assign]
    slots = table.map_ids(new, training=True)
    assert int(slots.min()) >= 0 and int(slots.max()) < 8
    assert slots[0] == slots[2] and slots[3] == 3


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fields",
    [
        {"eviction": "LRU", "scan_per_step": 8},
        {"eviction": "NONE", "admission": "THRESHOLD", "admission_threshold": 2},
    ],
    ids=lambda f: "-".join(map(str, f.values())),
)
def test_map_ids_into_writes_the_slots_and_counts_the_unmapped(
    backend: str, fields: dict[str, object]
) -> None:
    """`map_ids_into` writes the dict model's slots into a span of a larger tensor (nothing
    else of it), and returns how many ids got no slot (-1), training and evaluation alike."""
    capacity = 16
    cfg = _config(capacity, **fields)
    table = DynamicTable("t", cfg, capacity, 4, backend=backend)  # type: ignore[arg-type]
    model = ModelTable(cfg, capacity)
    unmapped_seen = 0
    for n, batch in enumerate(_stream(5, 50, 40, 12)):
        ids = torch.tensor(batch, dtype=torch.int64)
        big = torch.full((len(batch) + 5,), 77, dtype=torch.int64)
        training = n % 5 != 4
        unmapped = table.map_ids_into(ids, big[3 : 3 + len(batch)], training=training)
        want = model.train(batch) if training else model.lookup(batch)
        assert big[3 : 3 + len(batch)].tolist() == want, n
        assert unmapped == sum(s < 0 for s in want)
        assert big[:3].tolist() == [77] * 3 and big[3 + len(batch) :].tolist() == [77] * 2
        assert table.stats() == model.stats()
        unmapped_seen += unmapped
    assert unmapped_seen > 0  # the stream left ids without a slot


def test_map_ids_into_goes_through_an_overriding_map_ids() -> None:
    """A subclass that maps ids its own way (a sharded part) is not bypassed."""

    class Shifted(DynamicTable):
        def map_ids(self, ids: torch.Tensor, *, training: bool) -> torch.Tensor:
            return super().map_ids(ids, training=training) + 100

    table = Shifted("t", _config(8, eviction="LRU"), 8, 4)
    out = torch.empty(3, dtype=torch.int64)
    assert table.map_ids_into(torch.tensor([5, 6, 5]), out, training=True) == 0
    assert out.tolist() == [100, 101, 100]


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_out_tensors_are_refused(backend: str) -> None:
    m = IdSlotMap(16, backend=backend)  # type: ignore[arg-type]
    ids = torch.tensor([1, 2, 3])
    for bad in (torch.empty(3, dtype=torch.int32), torch.empty(4, dtype=torch.int64)):
        with pytest.raises(ValueError, match="out must be a contiguous CPU int64 tensor of 3"):
            m.find(ids, out=bad)
        with pytest.raises(ValueError, match="out must be a contiguous CPU int64 tensor of 3"):
            m.find_touch_missing(ids, None, None, 1, out=bad)
