"""The tiered lookup's fast paths give the values of its reference paths: the native admission
of all tables in one call (table_batch.py) against the per-table native one, that against the
torch one, a mapped store against positioned
I/O, and a forward that reuses its prefetch's slots against one that admits its rows itself;
each trains exactly as the same tables in memory, with a cache of two batches that evicts on
every step."""

from __future__ import annotations

import ctypes
import pathlib
import threading

import numpy as np
import pytest
import torch

import shardrec_tiered.cache as cache_module
import shardrec_tiered.native_cache as native_cache_module
import shardrec_tiered.store as store_module
import shardrec_tiered.table_batch as table_batch_module
from shardrec_embedding.fused import BatchedFusedEmbeddingBag, FusedTableSpec
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_testing import seeded_generator
from shardrec_tiered import CacheFullError, CachePolicy, TieredFusedEmbeddingBag, TieredOptions
from shardrec_tiered.cache import RowCache
from shardrec_tiered.layout import StoreLayout
from shardrec_tiered.store import FlatFileStore

ROWS = {"a": 300, "b": 120}
DIM = 8
STEPS = 8
SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)


def specs() -> list[FusedTableSpec]:
    g = seeded_generator("tiered-fast-init")
    return [
        FusedTableSpec(name=n, num_rows=r, dim=DIM, weight=torch.randn(r, DIM, generator=g))
        for n, r in ROWS.items()
    ]


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Bags of 1-3 ids from a window moving by 37 rows a step (few rows shared by neighbours),
    duplicates included."""
    total = sum(ROWS.values())
    out = []
    for step in range(STEPS):
        g = seeded_generator("tiered-fast-batch", step)
        lengths = torch.randint(1, 4, (12,), generator=g)
        ids = (torch.randint(0, 40, (int(lengths.sum()),), generator=g) + 37 * step) % total
        out.append((ids, torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])))
    return out


def cache_rows() -> int:
    """Two batches' distinct rows of the fullest table: a prefetch and a forward in flight."""
    most = 0
    for ids, _ in batches():
        u = ids.unique()
        most = max(most, int((u < ROWS["a"]).sum()), int((u >= ROWS["a"]).sum()))
    return 2 * most


def train(module: torch.nn.Module, prefetch: bool) -> None:
    data = batches()
    for i, (ids, offsets) in enumerate(data):
        if prefetch and i == 0:
            module.prefetch(ids, background=True)  # type: ignore[operator]
        out = module(ids, offsets)
        if prefetch and i + 1 < len(data):
            module.prefetch(data[i + 1][0], background=True)  # type: ignore[operator]
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()


def assert_equals_reference(tiered: TieredFusedEmbeddingBag) -> None:
    reference = BatchedFusedEmbeddingBag(specs(), SPEC)
    train(reference, prefetch=False)
    state = reference.optimizer_state()
    for name, weight, start in zip(
        ROWS, reference.split_embedding_weights(), reference.row_offsets, strict=True
    ):
        got_weight, got_state = tiered.read_table(name)
        assert torch.equal(got_weight, weight.detach()), name
        for k, v in state.items():
            assert torch.equal(got_state[k], v[start : start + ROWS[name]]), (name, k)


def assert_bookkeeping(cache: RowCache) -> None:
    """Every held slot is its id's slot in the map, and nothing else is mapped."""
    held = torch.nonzero(cache.held).flatten()
    assert torch.equal(cache.map.find(cache.id_of_slot[held]), held)
    assert int((cache.map.find(torch.arange(cache.store.layout.num_rows)) >= 0).sum()) == len(held)
    assert int(cache.pins.sum()) == 0


@pytest.mark.parametrize("native", [True, False], ids=["native", "torch"])
@pytest.mark.parametrize("mapped", [True, False], ids=["mapped", "positioned"])
@pytest.mark.parametrize("policy", [CachePolicy.LRU, CachePolicy.LFU])
def test_fast_and_reference_paths_train_as_in_memory(
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    native: bool,
    mapped: bool,
    policy: CachePolicy,
) -> None:
    if not native:
        monkeypatch.setattr(cache_module, "native_cache", lambda: None)
    options = TieredOptions(
        store_dir=str(tmp_path), cache_rows=cache_rows(), policy=policy, mapped=mapped
    )
    tiered = TieredFusedEmbeddingBag(specs(), SPEC, options)
    if native:
        assert all(c._native_ready() for c in tiered.caches)
    assert (tiered._batch._table() is not None) == (native and mapped), "all tables in one call"
    assert [c.store.mapped for c in tiered.caches] == [mapped] * 2  # type: ignore[attr-defined]
    train(tiered, prefetch=True)
    stats = tiered.stats()
    assert all(s["bytes_written"] > 0 for s in stats.values()), "the cache never evicted"
    assert tiered.load_seconds == 0.0, "a forward admitted rows its prefetch had loaded"
    for cache in tiered.caches:
        assert_bookkeeping(cache)
    assert_equals_reference(tiered)


@pytest.mark.parametrize("policy", [CachePolicy.LRU, CachePolicy.LFU])
def test_per_table_native_admission_trains_as_in_memory(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, policy: CachePolicy
) -> None:
    """The per-table native path (three calls a table), which the one-call path replaces
    where every table qualifies, still trains exactly (a lookup with an unmapped store)."""
    monkeypatch.setattr(table_batch_module.TableBatch, "admit", lambda *a, **k: None)
    options = TieredOptions(store_dir=str(tmp_path), cache_rows=cache_rows(), policy=policy)
    tiered = TieredFusedEmbeddingBag(specs(), SPEC, options)
    train(tiered, prefetch=True)
    assert all(s["bytes_written"] > 0 for s in tiered.stats().values()), "never evicted"
    for cache in tiered.caches:
        assert_bookkeeping(cache)
    assert_equals_reference(tiered)


def test_one_call_admission_counts_as_per_table(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hits, misses, bytes read and written, and every cache's bookkeeping tensors (scores,
    pins, dirty marks, slots) match the per-table native path's after the same training (no
    background prefetch: its pins, released by a concurrent backward, may steer victims)."""
    options = TieredOptions(store_dir=str(tmp_path / "one"), cache_rows=cache_rows())
    one = TieredFusedEmbeddingBag(specs(), SPEC, options)
    train(one, prefetch=False)
    with monkeypatch.context() as m:
        m.setattr(table_batch_module.TableBatch, "admit", lambda *a, **k: None)
        options = TieredOptions(store_dir=str(tmp_path / "per"), cache_rows=cache_rows())
        per = TieredFusedEmbeddingBag(specs(), SPEC, options)
        train(per, prefetch=False)
    assert one.stats().keys() == per.stats().keys()
    for a, b in zip(one.caches, per.caches, strict=True):
        assert (a.hits, a.misses, a._tick) == (b.hits, b.misses, b._tick)
        assert (a.store.bytes_read, a.store.bytes_written) == (
            b.store.bytes_read,
            b.store.bytes_written,
        )
        held = torch.nonzero(a.held).flatten()
        assert torch.equal(
            torch.sort(a.id_of_slot[held]).values, torch.sort(b.id_of_slot[b.held]).values
        )
        assert int(a.pins.sum()) == int(b.pins.sum()) == 0
        assert int(a.dirty.sum()) == int(b.dirty.sum())


def test_one_call_refusal_changes_no_table(tmp_path: pathlib.Path) -> None:
    """A batch that a later table refuses loads nothing into an earlier one (every plan stands
    before anything changes) and raises that table's error."""
    tiered = TieredFusedEmbeddingBag(
        specs(), SPEC, TieredOptions(store_dir=str(tmp_path), cache_rows=4)
    )
    assert tiered._batch._table() is not None
    b0 = ROWS["a"]
    tiered.prefetch(torch.tensor([b0, b0 + 1, b0 + 2]))
    a = tiered.caches[0]
    before = (a.held.clone(), a.score.clone(), a.hits, a.misses, a.store.bytes_read)
    with pytest.raises(CacheFullError, match=r"'b': 2 rows to load but only 1 of 4 .*\(3 pinned"):
        tiered.prefetch(torch.tensor([5, b0 + 5, b0 + 6]))
    assert torch.equal(a.held, before[0]) and torch.equal(a.score, before[1])
    assert (a.hits, a.misses, a.store.bytes_read) == before[2:]
    assert int(a.pins.sum()) == 0 and int(tiered.caches[1].pins.sum()) == 3
    with pytest.raises(ValueError, match=r"'a': a batch touches 5 distinct rows but the cache"):
        tiered.prefetch(torch.arange(5))
    assert int(a.held.sum()) == 0


def test_a_replaced_native_copy_sends_rows_through_the_store(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store whose native copy is replaced (a test injecting a disk failure on the Python
    path) is read and written through `read` / `write`: the one-call path steps aside."""
    calls: list[bool] = []
    real = store_module.native_rows_io

    def recording(*args: object, **kwargs: object) -> bool:
        calls.append(bool(kwargs["write"]))
        return real(*args, **kwargs)  # type: ignore[arg-type]  # passed through as given

    tiered = TieredFusedEmbeddingBag(
        specs(), SPEC, TieredOptions(store_dir=str(tmp_path), cache_rows=cache_rows())
    )
    assert tiered._batch._table() is not None
    monkeypatch.setattr(store_module, "native_rows_io", recording)
    assert tiered._batch._table() is None
    train(tiered, prefetch=True)
    assert True in calls and False in calls, "write-backs and reads went through the store"
    assert_equals_reference(tiered)


def test_forward_of_other_ids_than_prefetched_admits_its_own(tmp_path: pathlib.Path) -> None:
    tiered = TieredFusedEmbeddingBag(
        specs(), SPEC, TieredOptions(store_dir=str(tmp_path), cache_rows=cache_rows())
    )
    data = batches()
    for i, (ids, offsets) in enumerate(data):
        tiered.prefetch(ids.flip(0) if i % 2 else ids)  # odd steps: other ids (same rows)
        out = tiered(ids, offsets)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    assert tiered.load_seconds > 0.0
    for cache in tiered.caches:
        assert_bookkeeping(cache)
    assert_equals_reference(tiered)


def test_a_prefetched_forward_does_not_wait_for_the_next_prefetch(tmp_path: pathlib.Path) -> None:
    """While the next batch's prefetch holds the admission lock, the forward of a prefetched
    batch runs (it needs no admission)."""
    tiered = TieredFusedEmbeddingBag(
        specs(), SPEC, TieredOptions(store_dir=str(tmp_path), cache_rows=cache_rows())
    )
    ids, offsets = batches()[0]
    tiered.prefetch(ids)
    done = threading.Event()

    def forward() -> None:
        tiered(ids, offsets).sum().backward()
        done.set()

    with tiered._lock:  # a background prefetch of the next batch, admitting
        worker = threading.Thread(target=forward)
        worker.start()
        assert done.wait(timeout=60), "the forward waited for the admission lock"
    worker.join()
    assert int(sum(int(c.pins.sum()) for c in tiered.caches)) == 0


def test_native_admission_refuses_a_full_cache(tmp_path: pathlib.Path) -> None:
    tiered = TieredFusedEmbeddingBag(
        specs(), SPEC, TieredOptions(store_dir=str(tmp_path), cache_rows=4)
    )
    assert tiered.caches[0]._native_ready()
    tiered.prefetch(torch.tensor([0, 1, 2]))
    with pytest.raises(CacheFullError, match=r"'a': 2 rows to load but only 1 of 4 .*\(3 pinned"):
        tiered.prefetch(torch.tensor([5, 6]))
    assert int(tiered.caches[0].pins.sum()) == 3  # the refused batch holds nothing


LAYOUT = StoreLayout(table="t", num_rows=2000, dim=8, state=(("momentum1", 1),))


def test_mapped_and_positioned_stores_hold_the_same_bytes(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(0)
    stores = [
        FlatFileStore(str(tmp_path / "m"), LAYOUT, mapped=True),
        FlatFileStore(str(tmp_path / "p"), LAYOUT, mapped=False),
    ]
    assert [s.mapped for s in stores] == [True, False]
    ids = np.unique(np.concatenate([rng.integers(0, LAYOUT.num_rows, 300), np.arange(40, 90)]))
    rows = rng.standard_normal((ids.size, LAYOUT.stride)).astype(np.float32)
    for s in stores:
        s.write(ids, rows)
        s.flush()
        assert np.array_equal(s.read(ids), rows)
    a, b = (pathlib.Path(s.path).read_bytes() for s in stores)
    assert a == b
    for s in stores:
        s.close()


def test_stores_beyond_the_map_budget_use_positioned_io(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "MAP_BUDGET_FRACTION", 0.0)
    assert not FlatFileStore(str(tmp_path), LAYOUT).mapped
    assert FlatFileStore(str(tmp_path / "forced"), LAYOUT, mapped=True).mapped


def test_mapped_option_is_checked() -> None:
    with pytest.raises(ValueError, match=r"TieredOptions\.mapped must be True, False or None"):
        TieredOptions(mapped="yes")  # type: ignore[arg-type]  # the refusal under test


@pytest.mark.parametrize("spread", [3, 5000, 2**62], ids=["narrow", "bucketed", "wide"])
def test_native_victims_are_the_lowest_scores(spread: int) -> None:
    """The native victim choice (key buckets, then a selection in one bucket) takes the k
    evictable slots of lowest (score, slot), empty slots first, as a full sort would."""
    lib = native_cache_module.native_cache()
    if lib is None:
        pytest.skip("native code unavailable")
    g = seeded_generator("tiered-victims", spread)
    nslots, n = 3000, 700
    score = torch.randint(0, spread, (nslots,), generator=g, dtype=torch.int64)
    held = (torch.rand(nslots, generator=g) > 0.02).to(torch.uint8)
    pins = (torch.rand(nslots, generator=g) > 0.9).to(torch.int32)
    slot_map = torch.full((5000,), -1, dtype=torch.int32)
    hit_ids = torch.randperm(5000, generator=g)[:200]
    hit_slots = torch.randperm(nslots, generator=g)[:200].to(torch.int32)
    slot_map[hit_ids] = hit_slots
    held[hit_slots.long()] = 1
    ids = torch.cat([hit_ids, torch.randperm(5000, generator=g)[: n - 200]]).unique()
    slots = torch.empty(ids.numel(), dtype=torch.int64)
    victims = torch.empty(ids.numel(), dtype=torch.int64)
    evictable = ctypes.c_int64(0)
    k = lib.sr_cache_plan(
        ids.data_ptr(), ids.numel(), slot_map.data_ptr(), score.data_ptr(), pins.data_ptr(),
        held.data_ptr(), nslots, slots.data_ptr(), victims.data_ptr(), ctypes.byref(evictable),
    )  # fmt: skip
    assert k == int((slot_map[ids] < 0).sum()) > 0
    free = (pins == 0).clone()
    free[slot_map[ids][slot_map[ids] >= 0].long()] = False
    candidates = torch.nonzero(free).flatten()
    key = torch.where(held[candidates].bool(), score[candidates], torch.iinfo(torch.int64).min)
    order = sorted(zip(key.tolist(), candidates.tolist(), strict=True))
    assert sorted(victims[:k].tolist()) == sorted(s for _, s in order[:k])
    assert evictable.value == candidates.numel()
