"""The find pass's byte-per-slot touch (`dynamic/stamps.py`): a native LRU / LFU table whose
steps stamp bytes instead of writing `last_seen` holds, reads and saves exactly the state of
the torch backend's table (which writes `last_seen` directly), across stamp-base rollovers
(more than 255 steps without a sync), evictions, saves, loads and `evict`."""

from __future__ import annotations

import random

import pytest
import torch

from shardrec_embedding.dynamic import DynamicTableConfig, EvictionPolicy
from shardrec_embedding.dynamic.id_map import idmap_native_available
from shardrec_embedding.dynamic.stamps import RecentStamps
from shardrec_embedding.dynamic.table import DynamicTable

pytestmark = pytest.mark.skipif(not idmap_native_available(), reason="no C compiler")

_STATE = ("slot_ids", "occupied", "last_seen", "counts", "free_slots")


def _pair(policy: EvictionPolicy, capacity: int) -> tuple[DynamicTable, DynamicTable]:
    cfg = DynamicTableConfig(capacity=capacity, eviction=policy)
    cfg.validate("t", capacity)
    native = DynamicTable("t", cfg, capacity, 4, backend="native")
    reference = DynamicTable("t", cfg, capacity, 4, backend="torch")
    assert native._recent is not None and reference._recent is None
    return native, reference


def _same_state(a: DynamicTable, b: DynamicTable) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    for name in _STATE:
        assert torch.equal(sa[name], sb[name]), name
    assert sa["_extra_state"] == sb["_extra_state"]


@pytest.mark.parametrize("policy", [EvictionPolicy.LRU, EvictionPolicy.LFU])
def test_stamped_table_equals_the_direct_touch(policy: EvictionPolicy) -> None:
    capacity = 300
    native, reference = _pair(policy, capacity)
    rng = random.Random(7)
    pool = [rng.randrange(-(2**63), 2**63) for _ in range(2 * capacity)]
    resident = pool[: capacity - 20]
    checks = {100, 400, 700}  # unsynced saves mid-run (the stamps folded in by the save)
    for step in range(800):
        # long resident runs (no read of last_seen: the stamp base rolls over past 255),
        # then bursts of new ids that fill the table and evict
        burst = 300 <= step < 320 or 650 <= step < 700
        ids = rng.choices(pool if burst else resident, k=rng.randrange(0, 120))
        t = torch.tensor(ids, dtype=torch.int64)
        assert torch.equal(native.map_ids(t, training=True), reference.map_ids(t, training=True))
        if step in checks:
            _same_state(native, reference)
        if step == 500:  # a load replaces the table's state, stamps included
            saved = reference.state_dict()
            native.load_state_dict(saved)
            reference.load_state_dict(saved)
        if step == 720:
            victims = torch.tensor([0, 5, 17, 299])
            native.evict(victims)
            reference.evict(victims)
    assert torch.equal(native.last_seen, reference.last_seen)
    assert torch.equal(native.counts, reference.counts)
    _same_state(native, reference)


def test_stamp_base_moves_after_a_sync() -> None:
    recent = RecentStamps(8)
    last_seen = torch.zeros(8, dtype=torch.int64)
    assert recent.stamp_for(1, last_seen) == 1
    recent.stamps[3] = 1
    assert recent.stamp_for(255, last_seen) == 255
    recent.stamps[4] = 255
    # step 256 does not fit a byte above base 0: the stamps are folded in, the base moves
    assert recent.stamp_for(256, last_seen) == 1
    assert last_seen.tolist() == [0, 0, 0, 1, 255, 0, 0, 0]
    assert recent.base == 255 and int(recent.stamps.sum()) == 0
    recent.stamps[0] = 1
    recent.sync(last_seen)
    assert last_seen[0] == 256 and not recent.dirty
    recent.stamp_for(300, last_seen)
    recent.stamps[1] = 300 - recent.base
    recent.discard()
    recent.sync(last_seen)
    assert last_seen[1] == 0  # discarded stamps are never folded in
