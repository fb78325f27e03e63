"""The MCH module's hash index (`mc.sorted_index`) and the selection / dedup that replace sorts:
each against the searched / sorted path it stands in for, on random streams and edge cases."""

from __future__ import annotations

import copy

import pytest
import torch
from _mch_reference import MCHModel, lru

from shardrec_embedding.dynamic.id_map import idmap_native_available
from shardrec_embedding.mc import (
    DistanceLFU_EvictionPolicy,
    LFU_EvictionPolicy,
    LRU_EvictionPolicy,
    MCHManagedCollisionModule,
)
from shardrec_embedding.mc.filters import average_threshold_filter
from shardrec_embedding.mc.mch import _mch_remap
from shardrec_embedding.mc.policies import _select
from shardrec_jagged import JaggedTensor

INT64_MAX = (1 << 63) - 1

pytestmark = pytest.mark.skipif(
    not idmap_native_available(), reason="the index exists with the native id map only"
)

POLICIES = {
    "lfu": LFU_EvictionPolicy,
    "lru": LRU_EvictionPolicy,
    "distance_lfu": DistanceLFU_EvictionPolicy,
    "lfu_filtered": lambda: LFU_EvictionPolicy(threshold_filtering_func=average_threshold_filter),
}


def _pair(policy: str, zch: int, interval: int) -> tuple[MCHManagedCollisionModule, ...]:
    """The same module twice: indexed, and forced onto the searched path."""
    out = []
    for _ in range(2):
        out.append(
            MCHManagedCollisionModule(
                zch_size=zch,
                device=torch.device("cpu"),
                eviction_policy=POLICIES[policy](),
                eviction_interval=interval,
            )
        )
    assert out[0]._index is not None
    out[1]._index = None
    return tuple(out)


def _jt(ids: torch.Tensor) -> dict[str, JaggedTensor]:
    return {"t": JaggedTensor(values=ids, lengths=torch.ones(ids.numel(), dtype=torch.int64))}


def _assert_same(a: MCHManagedCollisionModule, b: MCHManagedCollisionModule) -> None:
    for name, buffer in a.state_dict().items():
        assert torch.equal(buffer, b.state_dict()[name]), name
    ea, eb = a.evict(), b.evict()
    assert (ea is None) == (eb is None)
    if ea is not None and eb is not None:
        assert torch.equal(ea, eb)


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("interval", [1, 2])
@pytest.mark.parametrize("seed", range(3))
def test_indexed_module_equals_searched_module(policy: str, interval: int, seed: int) -> None:
    """Remapped ids, state and evicted rows are those of the searched path after every
    forward, training and evaluation, with int64 max, negatives and repeats in the stream."""
    g = torch.Generator().manual_seed(seed)
    fast, slow = _pair(policy, zch=16, interval=interval)
    pool = torch.cat(
        [torch.randint(-(1 << 62), 1 << 62, (40,), generator=g), torch.tensor([INT64_MAX, 0, -1])]
    )
    for step in range(25):
        n = int(torch.randint(0, 30, (1,), generator=g))
        ids = pool[torch.randint(0, pool.numel(), (n,), generator=g)]
        train = step % 5 != 4
        fast.train(train)
        slow.train(train)
        a, b = fast(_jt(ids))["t"].values(), slow(_jt(ids))["t"].values()
        assert torch.equal(a, b), step
        if step % 3 == 0:  # sometimes the rows are consumed, sometimes they accumulate
            _assert_same(fast, slow)


def test_index_follows_a_loaded_state() -> None:
    """Buffers written by `load_state_dict` (or anyone) are re-indexed before the next remap."""
    a, _ = _pair("lfu", zch=8, interval=1)
    b, _ = _pair("lfu", zch=8, interval=1)
    a(_jt(torch.tensor([5, 6, 7, 5])))
    b(_jt(torch.tensor([100, 200])))
    b.load_state_dict(a.state_dict())
    b.eval()
    a.eval()
    ids = torch.tensor([5, 6, 7, 100, 200, INT64_MAX])
    assert torch.equal(a(_jt(ids))["t"].values(), b(_jt(ids))["t"].values())
    b._mch_sorted_raw_ids[0] = -3  # written in place behind the module's back (still sorted)
    assert int(b(_jt(torch.tensor([-3])))["t"].values()) == int(b._mch_remapped_ids_mapping[0])


def test_unsorted_state_falls_back_to_the_search() -> None:
    a, _ = _pair("lru", zch=6, interval=1)
    a._mch_sorted_raw_ids.copy_(torch.tensor([9, 4, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX]))
    a.eval()
    ids = torch.tensor([9, 4, 3])
    searched = _mch_remap(_jt(ids), a._mch_sorted_raw_ids, a._mch_remapped_ids_mapping, 5)
    assert torch.equal(a(_jt(ids))["t"].values(), searched["t"].values())
    assert a._ready_index() is None


def test_deepcopy_rebuilds_the_index() -> None:
    a, _ = _pair("distance_lfu", zch=8, interval=1)
    a(_jt(torch.tensor([1, 2, 3])))
    b = copy.deepcopy(a)
    a.eval()
    b.eval()
    ids = torch.tensor([1, 2, 3, 4])
    assert torch.equal(a(_jt(ids))["t"].values(), b(_jt(ids))["t"].values())


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.float64])
@pytest.mark.parametrize("seed", range(20))
def test_select_equals_a_stable_sort(dtype: torch.dtype, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    pivot = int(torch.randint(1, 60, (1,), generator=g))
    extra = int(torch.randint(0, 40, (1,), generator=g))
    scores = torch.randint(0, 6, (pivot + extra,), generator=g).to(dtype)  # many ties
    if dtype is torch.float64 and seed % 4 == 0 and scores.numel():
        scores[0] = float("nan")  # the sorted path decides NaN's place
    order = torch.argsort(scores, descending=True, stable=True)
    kept, dropped = order[:pivot], order[pivot:]
    losers, winners = _select(pivot, scores.clone())
    assert torch.equal(losers, dropped[dropped < pivot])
    assert torch.equal(winners, kept[kept >= pivot] - pivot)


@pytest.mark.parametrize("seed", range(3))
def test_rows_of_unconsumed_rounds_accumulate_as_the_reference(seed: int) -> None:
    """Twenty rounds without `evict()`: the rows it then reports are every round's, once,
    ascending (the reference model's set), past the point where pending rounds are merged."""
    g = torch.Generator().manual_seed(seed)
    m, _ = _pair("lru", zch=8, interval=1)
    model = MCHModel(8, 1, lru)
    pool = torch.randint(-(1 << 40), 1 << 40, (30,), generator=g)
    for _ in range(20):
        ids = pool[torch.randint(0, pool.numel(), (6,), generator=g)]
        m(_jt(ids))
        model.train_step(ids.tolist())
    got = m.evict()
    assert got is not None
    assert got.tolist() == model.take_evicted()
    assert m.evict() is None


@pytest.mark.parametrize("zch", [64, 4096])  # pending rounds past zch: a rebuild; else applied
@pytest.mark.parametrize("seed", range(2))
def test_rounds_remap_from_the_window_and_the_index_catches_up(zch: int, seed: int) -> None:
    """Training forwards that run a round take their rows from the round (two features in
    one call, an int32 feature, int64 max and repeats among them) and leave the index behind;
    the first evaluation after several rounds reads it caught up. Every answer is the
    searched path's."""
    g = torch.Generator().manual_seed(seed)
    fast, slow = _pair("distance_lfu", zch=zch, interval=1)
    pool = torch.cat([torch.randint(-(1 << 40), 1 << 40, (3 * zch,), generator=g)])
    pool = torch.cat([pool, torch.tensor([INT64_MAX])])
    for step in range(12):
        train = step % 4 != 3
        fast.train(train)
        slow.train(train)
        picks = [pool[torch.randint(0, pool.numel(), (n,), generator=g)] for n in (zch // 2, 7)]
        feats = {
            "a": JaggedTensor(values=picks[0], lengths=torch.ones_like(picks[0])),
            "b": JaggedTensor(values=picks[1] % (1 << 30), lengths=torch.ones_like(picks[1])),
        }
        feats["b"] = JaggedTensor(
            values=feats["b"].values().to(torch.int32), lengths=feats["b"].lengths()
        )
        used_round = fast.training
        out_fast, out_slow = fast(feats), slow(feats)
        for name in feats:
            assert out_fast[name].values().dtype == feats[name].values().dtype
            assert torch.equal(out_fast[name].values(), out_slow[name].values()), (step, name)
        index = fast._index
        assert index is not None
        if used_round:  # remapped from the round: the index was not read, it lags
            assert fast._round_rows == {}  # consumed by this forward's remap
            assert index._pending or index._rebuild_due
        else:  # read by the lookups: caught up
            assert not index._pending and not index._rebuild_due
        _assert_same(fast, slow)


def test_round_rows_are_not_used_after_the_state_changed() -> None:
    """Rows a round found are this forward's only: a `remap` after the slots were loaded
    anew, or after another `profile`, reads the current state."""
    g = torch.Generator().manual_seed(3)
    fast, slow = _pair("lfu", zch=32, interval=1)
    other = MCHManagedCollisionModule(
        zch_size=32,
        device=torch.device("cpu"),
        eviction_policy=LFU_EvictionPolicy(),
        eviction_interval=1,
    )
    other.train()
    other(_jt(torch.randint(0, 1000, (50,), generator=g)))  # a different state
    ids = torch.randint(0, 1000, (20,), generator=g)
    feats = _jt(ids)
    for module in (fast, slow):
        module.train()
        module.profile(feats)  # a round; its rows wait for remap
        module.load_state_dict(other.state_dict())
    assert torch.equal(fast.remap(feats)["t"].values(), slow.remap(feats)["t"].values())
    assert torch.equal(fast.remap(feats)["t"].values(), other.remap(feats)["t"].values())
    fast.profile(feats)
    fast.eval()
    fast.profile(feats)  # evaluation: no round, and the last round's rows are dropped
    assert fast._round_rows == {}
