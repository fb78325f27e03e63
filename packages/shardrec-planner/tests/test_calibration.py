"""Calibration: measured bandwidths are positive, saved as JSON, and loaded into a Topology."""

from __future__ import annotations

import json
import pathlib

import pytest

from shardrec_planner import Calibration, Topology
from shardrec_planner.calibration import measure_lookup_bandwidth
from shardrec_planner.cli import main


def test_cli_calibrate_writes_a_file_topology_loads(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--quick", "--out", str(out)]) == 0
    assert "saved to" in capsys.readouterr().out
    cal = Calibration.load(out)
    # sane: more than 10 MB/s and less than 10 TB/s on any machine this runs on
    for bw in (cal.lookup_bw, cal.intra_host_bw, cal.inter_host_bw):
        assert 1e7 < bw < 1e13
    assert cal.compute_device == "cpu"
    topo = Topology.from_calibration(out, world_size=4)
    assert topo.compute_device == "cpu"
    assert topo.lookup_bandwidth == cal.lookup_bw
    assert topo.intra_host_bytes_per_s == pytest.approx(cal.intra_host_bw)
    assert topo.intra_host_bw == pytest.approx(cal.intra_host_bw / 1000)  # TorchRec: bytes/ms
    assert (
        Topology.from_calibration(cal, world_size=2, compute_device="cuda").lookup_bw
        == cal.lookup_bw
    )


def test_lookup_bandwidth_is_positive() -> None:
    assert measure_lookup_bandwidth(rows=1000, dim=16, batch=64, pooling=4, repeats=2) > 0


def test_bad_calibration_files(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a shardrec calibration file"):
        Calibration.load(bad)
    bad.write_text(json.dumps({"format": "shardrec-calibration/1", "lookup_bw": 1.0}))
    with pytest.raises(ValueError, match=r"lacks.*intra_host_bw"):
        Calibration.load(bad)
    with pytest.raises(ValueError, match=r"lookup_bw must be a positive number, got -1\.0"):
        Calibration(
            compute_device="cpu",
            lookup_bw=-1.0,
            intra_host_bw=1.0,
            inter_host_bw=1.0,
            machine="m",
            torch_version="t",
            measured_at="now",
        )
