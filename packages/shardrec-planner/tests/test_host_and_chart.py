"""CPU plans use this host's memory; no rank gets an empty row block; the load chart's data."""

from __future__ import annotations

import os
import pathlib

import pytest
from _planner_models import make_ebc, sharder
from hypothesis import given, settings
from hypothesis import strategies as st

from shardrec_planner import (
    EmbeddingShardingPlanner,
    HostInfo,
    ParameterConstraints,
    PlannerError,
    PlanStats,
    ShardingType,
    Topology,
    detect_host,
    plan_chart_data,
    save_plan_chart,
)
from shardrec_planner import host as host_module
from shardrec_planner.stats import RankStats
from shardrec_planner.topology import DEFAULT_DDR_CAP

GiB = 1024**3


def _meminfo_bytes() -> int | None:
    try:
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def test_detect_host_reads_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_module, "_CGROUP_LIMITS", ())  # no container limit to apply
    host = detect_host()
    assert host.source == "detected"
    total = _meminfo_bytes()
    if total is not None:  # Linux: the kernel's MemTotal
        assert host.memory_bytes == total
    if hasattr(os, "sched_getaffinity"):
        assert host.cores == len(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    ("files", "limit"),
    [
        ((None, None), None),  # no cgroup files: not in a container
        (("max", None), None),  # cgroup v2 without a limit
        (("4096", None), 4096),  # cgroup v2 limit
        ((None, "8192"), 8192),  # cgroup v1 limit
        (("max", "8192"), 8192),  # the first file holding a number wins
    ],
)
def test_a_container_limit_caps_the_memory(
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    files: tuple[str | None, str | None],
    limit: int | None,
) -> None:
    monkeypatch.setattr(host_module, "_CGROUP_LIMITS", ())
    physical = detect_host().memory_bytes
    paths = [tmp_path / f"limit{i}" for i in range(len(files))]
    for path, text in zip(paths, files, strict=True):
        if text is not None:
            path.write_text(text + "\n")
    monkeypatch.setattr(host_module, "_CGROUP_LIMITS", tuple(paths))
    expected = physical if limit is None else min(physical, limit)
    assert detect_host().memory_bytes == expected


@pytest.mark.parametrize("local", [1, 2, 4])
def test_cpu_cap_is_the_host_memory_shared_by_its_ranks(local: int) -> None:
    detected = detect_host()
    topo = Topology(world_size=4, compute_device="cpu", local_world_size=local)
    assert topo.ddr_cap == detected.memory_bytes // local
    assert topo.device_memory == topo.ddr_cap and topo.host == detected
    assert f"/ {local} ranks per host" in topo.memory_text()
    # A host described by the user (planning for another machine) ...
    big = HostInfo(memory_bytes=64 * GiB, cores=32)
    topo = Topology(world_size=4, compute_device="cpu", local_world_size=local, host=big)
    assert topo.ddr_cap == 64 * GiB // local
    assert "64.0 GiB (given; 32 cores)" in topo.memory_text()
    # ... or the cap itself: it wins, and no host is claimed.
    topo = Topology(world_size=4, compute_device="cpu", local_world_size=local, ddr_cap=3 * GiB)
    assert topo.ddr_cap == 3 * GiB and topo.host is None
    assert topo.memory_text() == "memory per rank: 3.0 GiB (ddr_cap)"


def test_gpu_topology_keeps_torchrecs_defaults() -> None:
    topo = Topology(world_size=2, compute_device="cuda")
    assert topo.ddr_cap == DEFAULT_DDR_CAP and topo.host is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"memory_bytes": 0, "cores": 2}, "memory_bytes must be >= 1, got 0"),
        ({"memory_bytes": GiB, "cores": 0}, "cores must be >= 1, got 0"),
    ],
)
def test_bad_host(kwargs: dict[str, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        HostInfo(**kwargs)


def test_report_and_stats_say_where_the_cap_comes_from() -> None:
    host = HostInfo(memory_bytes=24 * GiB, cores=2)
    topo = Topology(world_size=2, compute_device="cpu", host=host)
    plan = EmbeddingShardingPlanner(topo).plan(make_ebc([("a", 1000, 16)]), [sharder()])
    assert plan.stats is not None
    assert plan.stats.memory_source == topo.memory_text()
    assert plan.stats.ranks[0].memory_cap_bytes < 12 * GiB  # not 128 GiB
    assert "host memory 24.0 GiB (given; 2 cores) / 2 ranks per host" in plan.report()
    data = plan.stats.to_dict()
    assert PlanStats.from_dict(data) == plan.stats
    del data["memory_source"]  # plans written before the field still load
    assert PlanStats.from_dict(data).memory_source == ""


@pytest.mark.parametrize(
    ("field", "value"), [("batch_size", "64"), ("max_cost_s", None), ("batch_size", True)]
)
def test_stats_from_dict_names_a_bad_field(field: str, value: object) -> None:
    topo = Topology(world_size=2, compute_device="cpu", ddr_cap=GiB)
    plan = EmbeddingShardingPlanner(topo).plan(make_ebc([("a", 100, 16)]), [sharder()])
    assert plan.stats is not None
    data = {**plan.stats.to_dict(), field: value}
    with pytest.raises(ValueError, match=f"field '{field}' must be"):
        PlanStats.from_dict(data)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 9), world=st.sampled_from([2, 3, 4, 8]), local=st.sampled_from([1, 2]))
def test_no_rank_gets_an_empty_row_block(rows: int, world: int, local: int) -> None:
    """Tiny tables over many ranks: whatever the planner picks, every shard has rows (the
    layouts `shardrec train --sharding-type` refuses are never planned)."""
    if world % local:
        local = 1
    topo = Topology(world_size=world, compute_device="cpu", local_world_size=local, ddr_cap=GiB)
    ebc = make_ebc([("tiny", rows, 8), ("other", 64, 8)])
    plan = EmbeddingShardingPlanner(topo).plan(ebc, [sharder()])
    for ps in plan.plan[""].values():
        if ps.sharding_spec is not None:
            assert all(s.shard_sizes[0] > 0 for s in ps.sharding_spec.shards), ps


def test_only_row_wise_allowed_for_a_one_row_table_is_an_error() -> None:
    topo = Topology(world_size=4, compute_device="cpu", ddr_cap=GiB)
    only_rw = {"tiny": ParameterConstraints(sharding_types=[ShardingType.ROW_WISE.value])}
    planner = EmbeddingShardingPlanner(topo, constraints=only_rw)
    with pytest.raises(PlannerError, match=r"table 'tiny'.*1 row\(s\).*allow table_wise"):
        planner.plan(make_ebc([("tiny", 1, 8)]), [sharder()])
    # Four rows fill four blocks: row_wise is fine.
    plan = planner.plan(make_ebc([("tiny", 4, 8)]), [sharder()])
    assert plan.plan[""]["tiny"].sharding_type is ShardingType.ROW_WISE


def _stats(memory: list[int], cap: int, cost: list[float], bound: float) -> PlanStats:
    return PlanStats(
        ranks=tuple(
            RankStats(rank=r, memory_bytes=m, memory_cap_bytes=cap, cost_s=c)
            for r, (m, c) in enumerate(zip(memory, cost, strict=True))
        ),
        tables=(),
        max_cost_s=max(cost),
        lower_bound_s=bound,
        imbalance=max(cost) / (sum(cost) / len(cost)) if sum(cost) else 1.0,
        batch_size=512,
        compute_device="cpu",
        search_seconds=0.0,
    )


def test_chart_data_scales_units_to_the_bars() -> None:
    """MovieLens on 2 CPU ranks: KiB of tables against a GiB cap, costs in microseconds."""
    stats = _stats([621 * 1024, 837 * 1024], int(108.8 * GiB), [56e-6, 61e-6], 50e-6)
    data = plan_chart_data(stats)
    assert data.ranks == (0, 1)
    assert data.memory_unit == "KiB" and data.memory == pytest.approx((621.0, 837.0))
    assert not data.cap_on_scale  # named in the title, not a line that flattens the bars
    assert data.memory_cap == pytest.approx(108.8 * 1024**2)
    assert data.memory_cap_text == "108.8 GiB"
    cap = int(108.8 * GiB)
    assert data.used_percent == pytest.approx((100 * 621 * 1024 / cap, 100 * 837 * 1024 / cap))
    assert data.cost_unit == "us" and data.cost == pytest.approx((56.0, 61.0))
    assert data.cost_mean == pytest.approx(58.5) and data.cost_lower_bound == pytest.approx(50.0)


def test_chart_data_draws_a_cap_on_the_same_scale() -> None:
    stats = _stats([3 * GiB, 5 * GiB, 4 * GiB], 8 * GiB, [0.02, 0.03, 0.025], 0.02)
    data = plan_chart_data(stats)
    assert data.memory_unit == "GiB" and data.memory == pytest.approx((3.0, 5.0, 4.0))
    assert data.cap_on_scale and data.memory_cap == pytest.approx(8.0)
    assert data.used_percent == pytest.approx((37.5, 62.5, 50.0))
    assert data.cost_unit == "ms" and data.cost == pytest.approx((20.0, 30.0, 25.0))
    empty = plan_chart_data(_stats([0, 0], GiB, [0.0, 0.0], 0.0))
    assert empty.memory_unit == "B" and empty.cost_unit == "us"


def test_chart_png_is_written(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("matplotlib")
    topo = Topology(world_size=4, compute_device="cpu", ddr_cap=GiB)
    plan = EmbeddingShardingPlanner(topo).plan(
        make_ebc([("a", 1000, 16), ("b", 10, 16)]), [sharder()]
    )
    out = save_plan_chart(plan, tmp_path / "plan_load.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
