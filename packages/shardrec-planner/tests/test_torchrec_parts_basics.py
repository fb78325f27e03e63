"""TorchRec-named planner basics: constants, value types, noop ratings, probe searches, utils.

References: TorchRec's documented formulas worked by hand here, brute-force searches, and
sums computed by a plain loop.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from _planner_models import hand_option, hand_shard
from hypothesis import given, settings
from hypothesis import strategies as st

from shardrec_planner import (
    BinarySearchPredicate,
    BoundsCheckMode,
    CacheAlgorithm,
    CacheParams,
    KeyValueParams,
    LuusJaakolaSearch,
    NoopPerfModel,
    NoopStorageModel,
    ParameterConstraints,
    Perf,
    PlannerError,
    PlannerErrorType,
    ShardingOption,
    Storage,
    Topology,
    imbalance,
)
from shardrec_planner.constants import (
    DDR_MEM_BW,
    HBM_MEM_BW,
    HBM_TO_DDR_MEM_BW,
    kernel_bw_lookup,
)
from shardrec_planner.planner_utils import find_imbalance_tables, reset_shard_rank

GiB = 1024**3


def test_constants_are_bytes_per_ms() -> None:
    assert pytest.approx(897 * GiB / 1000) == HBM_MEM_BW
    assert pytest.approx(51 * GiB / 1000) == DDR_MEM_BW
    assert pytest.approx(32 * GiB / 1000) == HBM_TO_DDR_MEM_BW


@pytest.mark.parametrize("ratio", [0.0, 0.3, 1.0])
def test_uvm_caching_bandwidth_mixes_device_and_pcie(ratio: float) -> None:
    hbm, ddr, pcie = 1000.0, 100.0, 40.0
    got = kernel_bw_lookup("cuda", "fused_uvm_caching", hbm, ddr, pcie, ratio)
    assert got == pytest.approx((ratio * hbm + (1 - ratio) * pcie) / 10)
    # A prefetch pipeline fills the cache ahead: the lookup runs at the device rate.
    piped = kernel_bw_lookup("cuda", "fused_uvm_caching", hbm, ddr, pcie, ratio, True)
    assert piped == hbm


def test_kernel_bandwidths_by_device() -> None:
    hbm, ddr, pcie = 1000.0, 100.0, 40.0
    assert kernel_bw_lookup("cpu", "fused", hbm, ddr, pcie) == ddr
    assert kernel_bw_lookup("cpu", "dense", hbm, ddr, pcie) == ddr / 2
    assert kernel_bw_lookup("cuda", "fused", hbm, ddr, pcie) == hbm
    assert kernel_bw_lookup("cuda", "fused_uvm", hbm, ddr, pcie) == pcie / 10
    # Default caching ratio is TorchRec's 0.2.
    default = kernel_bw_lookup("cuda", "fused_uvm_caching", hbm, ddr, pcie)
    assert default == pytest.approx((0.2 * hbm + 0.8 * pcie) / 10)
    assert kernel_bw_lookup("cpu", "fused_uvm", hbm, ddr, pcie) is None


def test_storage_and_perf_arithmetic() -> None:
    a, b = Storage(hbm=5, ddr=7, ssd=1), Storage(hbm=2, ddr=3)
    assert a + b == Storage(hbm=7, ddr=10, ssd=1)
    assert a - b == Storage(hbm=3, ddr=4, ssd=1)
    assert b.fits_in(a) and not a.fits_in(b)
    p = Perf(fwd_compute=1, fwd_comms=2, bwd_compute=3, bwd_comms=4, prefetch_compute=5)
    assert p.total == 15
    assert (p + p).total == 30
    assert hash(Storage(hbm=1, ddr=2)) == hash(Storage(hbm=1, ddr=2))


def _option(
    name: str, ranks: list[int], perf: list[float], hbm: list[int], st_: str
) -> ShardingOption:
    shards = [
        hand_shard([10, 8], h, p, offset=[0, 8 * i], rank=r)
        for i, (r, p, h) in enumerate(zip(ranks, perf, hbm, strict=True))
    ]
    module = ("sparse.ebc", torch.nn.Module())
    return hand_option(name, st_, shards, (10, 8 * len(ranks)), module=module)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0, 100), st.integers(0, 1000)), min_size=1))
def test_noop_models_rate_the_busiest_rank(shards: list[tuple[int, float, int]]) -> None:
    plan = [_option(f"t{i}", [r], [p], [h], "table_wise") for i, (r, p, h) in enumerate(shards)]
    perf = [0.0] * 4
    hbm = [0] * 4
    for r, p, h in shards:
        perf[r] += p
        hbm[r] += h
    topo = Topology(world_size=4, compute_device="cuda")
    assert NoopPerfModel(topo).rate(plan) == pytest.approx(max(perf))
    assert NoopStorageModel(topo).rate(plan) == max(hbm)


def test_noop_model_refuses_an_unplaced_shard() -> None:
    plan = [_option("t", [0], [1.0], [1], "table_wise")]
    reset_shard_rank(plan)
    assert plan[0].shards[0].rank is None
    with pytest.raises(ValueError, match=r"'t'.*rank None"):
        NoopPerfModel(Topology(world_size=2, compute_device="cuda")).rate(plan)


def test_sharding_option_deepcopy_shares_tensor_and_module() -> None:
    opt = _option("t", [0, 1], [1.0, 2.0], [3, 4], "column_wise")
    dup = copy.deepcopy(opt)
    assert dup.tensor is opt.tensor and dup.module is opt.module
    dup.shards[0].rank = 7
    assert opt.shards[0].rank == 0
    assert opt.fqn == "sparse.ebc.t" and opt.total_storage == Storage(hbm=7, ddr=0)
    assert opt.total_perf == 3.0 and opt.is_pooled


def test_find_imbalance_tables_picks_tables_on_the_peak_rank() -> None:
    plan = [
        _option("light", [0], [1.0], [10], "table_wise"),
        _option("heavy", [1], [5.0], [1], "table_wise"),
        _option("also", [1], [2.0], [1], "table_wise"),
        _option("rw", [0, 1], [9.0, 9.0], [1, 1], "row_wise"),
    ]
    assert [o.name for o in find_imbalance_tables(plan)] == ["heavy", "also"]
    assert [o.name for o in find_imbalance_tables(plan, "hbm")] == ["light"]
    with pytest.raises(ValueError, match=r"'ddr'"):
        find_imbalance_tables(plan, "ddr")


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 60), st.integers(0, 60), st.integers(-5, 70))
def test_binary_search_finds_largest_true(a: int, b: int, threshold: int) -> None:
    search = BinarySearchPredicate(a, b, 0)
    probe = search.next(True)
    best: int | None = None
    while probe is not None:
        assert a <= probe <= b
        ok = probe <= threshold
        if ok:
            best = probe if best is None else max(best, probe)
        probe = search.next(ok)
    truth = [x for x in range(a, b + 1) if x <= threshold]
    assert best == (max(truth) if truth else None)


def test_luus_jaakola_approaches_the_minimum_and_stops() -> None:
    search = LuusJaakolaSearch(0.0, 100.0, 40, seed=3)
    y = search.next(0.0)
    probes = 0
    while y is not None:
        assert 0.0 <= y <= 100.0
        probes += 1
        y = search.next((y - 37.0) ** 2)
    x, fx = search.best()
    assert probes == 40
    assert abs(x - 37.0) < 10 and fx == pytest.approx((x - 37.0) ** 2)
    assert math.isfinite(fx)


def test_planner_error_carries_its_type() -> None:
    err = PlannerError("no room", error_type=PlannerErrorType.INSUFFICIENT_STORAGE)
    assert err.error_type is PlannerErrorType.INSUFFICIENT_STORAGE and str(err) == "no room"
    assert PlannerError("x").error_type is PlannerErrorType.OTHER


def test_cache_params_validate() -> None:
    assert CacheParams(load_factor=0.5) == CacheParams(load_factor=0.5)
    with pytest.raises(ValueError, match=r"load_factor.*1.5"):
        CacheParams(load_factor=1.5)
    with pytest.raises(ValueError, match=r"reserved_memory.*-1"):
        CacheParams(reserved_memory=-1.0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.01, 100), min_size=1, max_size=12))
def test_imbalance_measures_against_their_definitions(loads: list[float]) -> None:
    p = imbalance.normalize(loads)
    k = len(p)
    assert sum(p) == pytest.approx(1.0)
    dev = [abs(x - 1 / k) for x in p]
    assert imbalance.total_variation(p) == pytest.approx(max(dev))
    assert imbalance.total_distance(p) == pytest.approx(sum(dev))
    assert imbalance.chi_sq_divergence(p) == pytest.approx(sum(d * d * k for d in dev))
    assert imbalance.kl_divergence(p) == pytest.approx(sum(x * math.log(x * k) for x in p))
    # The extremes: even load is 0, all load on one rank is the documented maximum.
    assert imbalance.kl_divergence([1 / k] * k) == pytest.approx(0.0, abs=1e-12)
    one = [1.0] + [0.0] * (k - 1)
    assert imbalance.kl_divergence(one) == pytest.approx(imbalance.max_kl_divergence(k))
    assert imbalance.chi_sq_divergence(one) == pytest.approx(imbalance.max_chi_sq_divergence(k))


def test_normalize_refuses_all_zero() -> None:
    with pytest.raises(ValueError, match=r"sum to 0"):
        imbalance.normalize([0, 0])


def test_constraints_carry_torchrec_kernel_options() -> None:
    cache = CacheParams(algorithm=CacheAlgorithm.LFU, load_factor=0.2)
    c = ParameterConstraints(
        cache_params=cache,
        bounds_check_mode=BoundsCheckMode.IGNORE,
        feature_names=["f1", "f2"],
        key_value_params=KeyValueParams(l2_cache_size=8),
    )
    names = ["f1", "f2"]
    assert c.cache_params is cache and c.feature_names == names  # a list, as TorchRec's
    assert hash(c) == hash(
        ParameterConstraints(
            cache_params=CacheParams(algorithm=CacheAlgorithm.LFU, load_factor=0.2),
            bounds_check_mode=BoundsCheckMode.IGNORE,
            feature_names=["f1", "f2"],
            key_value_params=KeyValueParams(l2_cache_size=8),
        )
    )
    with pytest.raises(TypeError, match=r"cache_params must be a CacheParams"):
        ParameterConstraints(cache_params={"load_factor": 0.2})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"feature_names.*'f1'"):
        ParameterConstraints(feature_names="f1")
    with pytest.raises(TypeError, match=r"feature_names must hold non-empty strings.*3"):
        ParameterConstraints(feature_names=["f1", 3])  # type: ignore[list-item]
    c.feature_names = names
    names.append("f3")  # the constraint keeps its own copy
    assert c.feature_names == ["f1", "f2"]
