"""The native eviction round of `MCHManagedCollisionModule` against the torch round.

Two modules see the same random streams (negative ids, int64 extremes, repeats, empty batches,
train and eval): one with every native pass (the round's kernels, the id index, the selection
kernels), one forced onto the torch path everywhere (`torch.unique`, `searchsorted`, stable
`argsort`s). Outputs, every buffer, `evict()` results and the stats must be identical.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from shardrec_embedding.mc import (
    DistanceLFU_EvictionPolicy,
    LFU_EvictionPolicy,
    LRU_EvictionPolicy,
    MCHEvictionPolicy,
    MCHManagedCollisionModule,
    average_threshold_filter,
    dynamic_threshold_filter,
    probabilistic_threshold_filter,
    round_native,
)
from shardrec_embedding.mc import policies as policies_mod
from shardrec_jagged import JaggedTensor

I64 = torch.iinfo(torch.int64)

pytestmark = pytest.mark.skipif(
    round_native._lib() is None, reason="native kernels unavailable: nothing to compare"
)

POLICIES: dict[str, Callable[[], MCHEvictionPolicy]] = {
    "lfu": LFU_EvictionPolicy,
    "lru": LRU_EvictionPolicy,
    "lru_decay": lambda: LRU_EvictionPolicy(decay_exponent=1.5),
    "dlfu": DistanceLFU_EvictionPolicy,
    "dlfu_decay": lambda: DistanceLFU_EvictionPolicy(decay_exponent=0.5),
    "lfu_average": lambda: LFU_EvictionPolicy(threshold_filtering_func=average_threshold_filter),
    "dlfu_dynamic": lambda: DistanceLFU_EvictionPolicy(
        threshold_filtering_func=lambda c: dynamic_threshold_filter(c, 1.5)
    ),
    "lru_probabilistic": lambda: LRU_EvictionPolicy(
        threshold_filtering_func=lambda c: probabilistic_threshold_filter(c, 0.3)
    ),
}


def _stream(g: torch.Generator, step: int) -> torch.Tensor:
    n = [0, 1, 7, 60, 200][int(torch.randint(0, 5, (1,), generator=g))] if step else 150
    kind = int(torch.randint(0, 3, (1,), generator=g))
    if kind == 0:  # few distinct small ids, negatives included: many repeats and ties
        return torch.randint(-40, 40, (n,), generator=g)
    if kind == 1:  # anywhere in int64
        return torch.randint(I64.min, I64.max, (n,), generator=g)
    edges = torch.tensor([I64.min, I64.min + 1, -1, 0, 1, I64.max - 1, I64.max, 12345])
    mixed = torch.cat([edges, torch.randint(-(2**62), 2**62, (8,), generator=g)])
    return mixed[torch.randint(0, mixed.numel(), (n,), generator=g)]


def _torch_only(monkeypatch: pytest.MonkeyPatch, module: MCHManagedCollisionModule) -> None:
    module._index = None  # searchsorted instead of the id index
    monkeypatch.setattr(module, "_base_coalesce", lambda: False)  # torch.unique + scatter


@pytest.mark.parametrize("interval", [1, 3])
@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("seed", [0, 1])
def test_native_round_equals_torch_round(
    monkeypatch: pytest.MonkeyPatch, policy: str, interval: int, seed: int
) -> None:
    native = MCHManagedCollisionModule(
        zch_size=37,
        device=torch.device("cpu"),
        eviction_policy=POLICIES[policy](),
        eviction_interval=interval,
    )
    reference = MCHManagedCollisionModule(
        zch_size=37,
        device=torch.device("cpu"),
        eviction_policy=POLICIES[policy](),
        eviction_interval=interval,
    )
    _torch_only(monkeypatch, reference)
    g = torch.Generator().manual_seed(seed)
    for step in range(40):
        ids = _stream(g, step)
        train = step % 9 != 8
        outs = []
        for module, torch_path in ((native, False), (reference, True)):
            module.train(train)
            with monkeypatch.context() as m:
                if torch_path:  # every kernel off: the torch paths of the round
                    m.setattr(round_native, "_lib", lambda: None)
                    m.setattr(policies_mod, "_library", lambda: None)
                torch.manual_seed(1000 + step)  # the probabilistic filter draws
                out = module({"f": JaggedTensor(values=ids, lengths=torch.ones_like(ids))})
                evicted = module.evict() if step % 4 == 3 else None
            outs.append((out["f"].values(), evicted))
        assert torch.equal(outs[0][0], outs[1][0]), f"step {step}: remapped ids differ"
        assert (outs[0][1] is None) == (outs[1][1] is None)
        if outs[0][1] is not None:
            assert torch.equal(outs[0][1], outs[1][1]), f"step {step}: evicted rows differ"
        ours, theirs = native.state_dict(), reference.state_dict()
        assert ours.keys() == theirs.keys()
        for key in ours:
            assert torch.equal(ours[key], theirs[key]), f"step {step}: buffer {key} differs"
        assert native.stats == reference.stats
    assert native.stats.rounds > 0


@pytest.mark.parametrize("seed", range(6))
def test_kernels_equal_their_torch_ops(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for n in (0, 1, 2, 17, 1000, 3000, 30000):
        window = torch.cat([_stream(g, 1), _stream(g, 1)])[:n]
        if window.numel() < n:
            window = torch.randint(I64.min, I64.max, (n,), generator=g)
        meta = torch.randint(-3, 9, (window.numel(),), generator=g)
        uniq, inverse, counts = torch.unique(window, return_inverse=True, return_counts=True)
        top = torch.zeros_like(counts).scatter_reduce_(
            0, inverse, meta, reduce="amax", include_self=False
        )
        got = round_native.coalesce_window(window, meta)
        assert torch.equal(got[0], uniq) and torch.equal(got[1], counts)
        assert got[2] is not None and torch.equal(got[2], top)
        for with_meta in (meta, None):
            full = round_native.coalesce_window_inverse(window, with_meta)
            assert torch.equal(full[0], uniq) and torch.equal(full[1], counts)
            assert torch.equal(full[3], inverse)
            assert (full[2] is None) == (with_meta is None)
        assert torch.equal(
            round_native.order_by_count(counts), torch.argsort(counts, descending=True, stable=True)
        )
        idx = torch.randperm(window.numel(), generator=g)[: window.numel() // 2]
        floats = (meta.float() / 4).index_fill_(0, torch.arange(0, meta.numel(), 5), -0.0)
        for values in (window, meta, floats, -floats):
            for descending in (True, False):
                want = idx[torch.argsort(values[idx], descending=descending, stable=True)]
                assert torch.equal(round_native.argsort_subset(values, idx, descending), want)


@pytest.mark.parametrize("shape", ["one_bucket", "few_buckets", "hot_ids", "sequential", "wide"])
def test_window_coalesce_on_skewed_ids(shape: str) -> None:
    """The window pass buckets ids by their highest differing bits: ids crowding one bucket
    (sorted by the fallback), a few large buckets, hot repeated ids, small sequential ids and
    the whole int64 range all give `torch.unique`'s answer."""
    g = torch.Generator().manual_seed(7)
    n = 6000
    if shape == "one_bucket":  # one far outlier: every other id lands in bucket 0
        window = torch.cat([torch.randint(0, 1000, (n,), generator=g), torch.tensor([I64.max])])
    elif shape == "few_buckets":
        window = torch.randint(0, 4, (n,), generator=g) * (1 << 40) + torch.randint(
            0, 50, (n,), generator=g
        )
    elif shape == "hot_ids":
        window = torch.tensor([-5, 3, 1 << 50])[torch.randint(0, 3, (n,), generator=g)]
        window[::97] = torch.randint(I64.min, I64.max, (window[::97].numel(),), generator=g)
    elif shape == "sequential":
        window = torch.arange(n).flip(0)
    else:
        window = torch.randint(I64.min, I64.max, (n,), generator=g)
    meta = torch.randint(-3, 9, (window.numel(),), generator=g)
    uniq, inverse, counts = torch.unique(window, return_inverse=True, return_counts=True)
    top = torch.zeros_like(counts).scatter_reduce_(
        0, inverse, meta, reduce="amax", include_self=False
    )
    got = round_native.coalesce_window_inverse(window, meta)
    assert torch.equal(got[0], uniq) and torch.equal(got[1], counts)
    assert got[2] is not None and torch.equal(got[2], top)
    assert torch.equal(got[3], inverse)


def test_nan_scores_take_the_torch_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    """DistanceLFU's 0 / 0 (an empty slot whose loaded `last_access_iter` is one past the
    round's iteration) is a NaN score: the native round says so and selects as the torch
    round does."""
    modules = [
        MCHManagedCollisionModule(
            zch_size=16,
            device=torch.device("cpu"),
            eviction_policy=DistanceLFU_EvictionPolicy(),
            eviction_interval=1,
        )
        for _ in range(2)
    ]
    _torch_only(monkeypatch, modules[1])
    seen = []
    fused = round_native.update_and_score

    def spy(*args: object, **kwargs: object) -> object:
        out = fused(*args, **kwargs)  # type: ignore[arg-type]
        seen.append(out is not None and out[2])
        return out

    monkeypatch.setattr(policies_mod, "update_and_score", spy)
    ids = torch.tensor([5, 6, 7, 5, 9, -3])
    outs = []
    for module, torch_path in ((modules[0], False), (modules[1], True)):
        module.train()
        # the first round runs at the saved iteration + 1: distance 0 for every empty slot
        module._mch_last_access_iter.fill_(int(module._current_iter_tensor) + 2)
        with monkeypatch.context() as m:
            if torch_path:
                m.setattr(round_native, "_lib", lambda: None)
                m.setattr(policies_mod, "_library", lambda: None)
            outs.append(module({"f": JaggedTensor(values=ids, lengths=torch.ones_like(ids))}))
    assert seen and seen[0] is True
    assert torch.equal(outs[0]["f"].values(), outs[1]["f"].values())
    ours, theirs = modules[0].state_dict(), modules[1].state_dict()
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key
