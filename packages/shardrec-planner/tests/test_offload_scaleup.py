"""EmbeddingOffloadScaleupProposer: the affine cache model, the budget sharing and promotion.

References: the affine formula evaluated by hand, a naive proportional split, and a storage
estimator written here (cached tables cost rows x load factor + a fixed IO penalty on the
device, plain tables the whole table).
"""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from shardrec_planner import CacheParams, Perf, Shard, ShardingOption, Storage
from shardrec_planner.offload_scaleup import EmbeddingOffloadScaleupProposer as Scaleup


class _Stats:
    def __init__(self, lookups: float, cacheability: float) -> None:
        self.expected_lookups = lookups
        self.cacheability = cacheability


def _option(name: str, rows: int, clf: float | None, stats: _Stats | None = None) -> ShardingOption:
    return ShardingOption(
        name=name,
        tensor=torch.zeros(1),
        module=("m", nn.Module()),
        input_lengths=[],
        batch_size=8,
        sharding_type="table_wise",
        partition_by="device",
        compute_kernel="fused" if clf is None else "fused_uvm_caching",
        shards=[Shard(size=[rows, 1], offset=[0, 0], perf=Perf(0, 0, 0, 0))],
        cache_params=None if clf is None else CacheParams(load_factor=clf, stats=stats),
    )


class _Estimator:
    """Cached: rows * clf + `penalty` on the device, the rows in DDR; plain: rows on the device."""

    def __init__(self, penalty: int) -> None:
        self.penalty = penalty

    def populate_estimates(self, options: list[ShardingOption]) -> None:
        for o in options:
            rows = o.shards[0].size[0]
            if o.compute_kernel == "fused_uvm_caching":
                clf = o.cache_params.load_factor  # type: ignore[union-attr]
                o.shards[0].storage = Storage(hbm=int(rows * clf) + self.penalty, ddr=rows)
            else:
                o.shards[0].storage = Storage(hbm=rows, ddr=0)


def test_clf_to_bytes_is_the_affine_formula() -> None:
    model = torch.tensor([[10.0, 3.0], [4.0, 0.0]])
    got = Scaleup.clf_to_bytes(model, torch.tensor([0.5, 0.25]))
    torch.testing.assert_close(got, torch.tensor([10 * 0.5 + 3, 4 * 0.25], dtype=torch.float64))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0.0, 0.5), min_size=2, max_size=5),
    st.lists(st.integers(1, 5), min_size=5, max_size=5),
    st.integers(1_000, 50_000),
)
def test_budget_is_shared_by_priority_when_no_table_fills(
    mins: list[float], priority: list[int], budget: int
) -> None:
    n = len(mins)
    model = torch.tensor([[1_000_000.0, 100.0]] * n)
    ceiling = Scaleup.clf_to_bytes(model, 1.0)
    clfs = torch.tensor(mins, dtype=torch.float64)
    prio = torch.tensor(priority[:n], dtype=torch.float64)
    got = Scaleup.allocate_budget(model, ceiling, clfs, budget, prio)
    # naive reference: each table's share of the bytes is its priority fraction
    want = clfs + budget * prio / prio.sum() / 1_000_000.0
    torch.testing.assert_close(got, want)


def test_budget_beyond_every_table_fills_them_all() -> None:
    model = torch.tensor([[1000.0, 10.0], [2000.0, 10.0]])
    got = Scaleup.allocate_budget(
        model, Scaleup.clf_to_bytes(model, 1.0), torch.tensor([0.1, 0.2]), 10**9, torch.ones(2)
    )
    torch.testing.assert_close(got, torch.ones(2))


def test_tables_whose_cache_costs_more_than_the_table_are_promoted() -> None:
    estimator = _Estimator(penalty=50)
    proposal = [_option("small", 90, 0.8), _option("big", 1000, 0.1)]
    estimator.populate_estimates(proposal)
    Scaleup.promote_high_prefetch_overheaad_table_to_hbm(estimator, proposal)
    # small: 90 * 0.8 + 50 = 122 > 90 plain -> promoted; big: 100 + 50 < 1000 -> kept cached
    assert [o.compute_kernel for o in proposal] == ["fused", "fused_uvm_caching"]
    assert proposal[0].cache_params is not None and proposal[0].cache_params.load_factor is None
    assert [o.total_storage.hbm for o in proposal] == [90, 150]


def test_next_plan_spends_the_budget_on_scalable_caches_only() -> None:
    estimator = _Estimator(penalty=0)
    start = [
        _option("a", 1000, 0.1, _Stats(10, 0.5)),
        _option("b", 1000, 0.1, _Stats(10, 0.5)),
        _option("no_stats", 1000, 0.1),
        _option("plain", 10, None),
    ]
    estimator.populate_estimates(start)
    assert [o.name for o in Scaleup.get_scalable_sharding_options(start)] == ["a", "b"]
    before = copy.deepcopy(start)
    plan = Scaleup.next_plan(start, 400, estimator)
    assert plan is not None
    clfs = [o.cache_load_factor for o in plan]
    assert clfs[0] == pytest.approx(0.3) and clfs[1] == pytest.approx(0.3)
    assert clfs[2] == pytest.approx(0.1) and plan[3].compute_kernel == "fused"
    assert [o.cache_load_factor for o in start] == [o.cache_load_factor for o in before]
    assert Scaleup.next_plan(start, None, estimator) is None


def test_cache_params_assignment_is_checked_and_hash_follows_value() -> None:
    c = CacheParams(load_factor=0.2)
    c.stats = _Stats(1, 0.5)
    assert hash(c) == hash(CacheParams(load_factor=0.2))
    with pytest.raises(ValueError, match=r"load_factor must be in \[0, 1\]"):
        c.load_factor = 1.5
    assert c.load_factor == 0.2
    with pytest.raises(ValueError, match="reserved_memory must be >= 0"):
        CacheParams(reserved_memory=-1.0)
