"""The TorchRec-API metrics give TorchRec 1.8's keys and values, fed the same batches, where
torchrec imports (skipped otherwise; TorchRec is never a dependency of the packages).

Inputs avoid what is documented to differ: tied predictions (TorchRec orders them
arbitrarily), `include_logloss` on recalibrated NE (TorchRec ignores it), hindsight target PR
(TorchRec 1.8's compute() raises), scalar windows shorter than the data (TorchRec counts a
batch as n_tasks samples), multi-label precision over several tasks (TorchRec pools them).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
import torch

pytest.importorskip("torchrec.metrics.ne", reason="torchrec is not installed here")

Update = Callable[[Any, int], None]
N_TASKS, BATCH = 2, 8


def _batches(seed: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(4):
        p = torch.rand(N_TASKS, BATCH, generator=g)
        out.append(
            (
                p,
                (torch.rand(N_TASKS, BATCH, generator=g) < p).float(),
                torch.rand(N_TASKS, BATCH, generator=g),
            )
        )
    return out


def _values(
    root: str, module: str, cls: str, extra: Callable[[int, int], dict[str, Any]], **kw: Any
) -> dict[str, float]:
    config = importlib.import_module(f"{root}.metrics.metrics_config")
    n_tasks, window = kw.pop("_tasks", N_TASKS), kw.pop("_window", 12)
    metric = getattr(importlib.import_module(f"{root}.metrics.{module}"), cls)(
        world_size=1,
        my_rank=0,
        batch_size=BATCH,
        tasks=[config.RecTaskInfo(name=f"t{i}") for i in range(n_tasks)],
        compute_mode=config.RecComputeMode.FUSED_TASKS_COMPUTATION,
        window_size=window,
        **kw,
    )
    clock = iter(float(t) for t in range(10, 100, 3))
    with mock.patch("time.monotonic", lambda: next(clock)):
        for i, (p, y, w) in enumerate(_batches(len(module))):
            p, y, w = p[:n_tasks], y[:n_tasks], w[:n_tasks]
            if module == "multi_label_precision":
                p, y = (p * 8).floor(), (w * 8).floor()
            metric.update(predictions=p, labels=y, weights=w, **extra(i, BATCH))
        return {k: float(v) for k, v in metric.compute().items()}


def _ids(i: int, b: int) -> dict[str, Any]:
    return {"required_inputs": {"session_id": torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2]] * N_TASKS)}}


def _keys(i: int, b: int) -> dict[str, Any]:
    return {"required_inputs": {"k1": torch.arange(b) % 3, "k2": (torch.arange(b) % 2).double()}}


def _output(i: int, b: int) -> dict[str, Any]:
    x = torch.full((N_TASKS, b), float(i))
    return {"required_inputs": {"latest_imp": x, "total_latest_imp": 2 * x}}


NOTHING: Callable[[int, int], dict[str, Any]] = lambda i, b: {}  # noqa: E731
CASES: dict[str, tuple[str, str, Callable[[int, int], dict[str, Any]], dict[str, Any]]] = {
    "recalibrated_ne": (
        "ne_with_recalibration",
        "RecalibratedNEMetric",
        NOTHING,
        {"recalibration_coefficient": 0.3},
    ),
    "recalibrated_calibration": (
        "calibration_with_recalibration",
        "RecalibratedCalibrationMetric",
        NOTHING,
        {"recalibration_coefficient": 0.3},
    ),
    "scalar": ("scalar", "ScalarMetric", NOTHING, {"_window": 1000}),
    "output": ("output", "OutputMetric", _output, {}),
    "tower_qps": ("tower_qps", "TowerQPSMetric", NOTHING, {"warmup_steps": 1}),
    "xauc": ("xauc", "XAUCMetric", NOTHING, {}),
    "gauc": ("gauc", "GAUCMetric", lambda i, b: {"num_candidates": torch.tensor([3, 5])}, {}),
    "ndcg": ("ndcg", "NDCGMetric", _ids, {"session_key": "session_id", "exponential_gain": True}),
    "segmented_ne": (
        "segmented_ne",
        "SegmentedNEMetric",
        _keys,
        {
            "num_groups": 3,
            "include_logloss": True,
            "grouping_keys": ["k1", {"name": "k2", "num_groups": 2, "cast_keys_to_int": True}],
        },
    ),
    "multi_label_precision": (
        "multi_label_precision",
        "MultiLabelPrecisionMetric",
        NOTHING,
        {"num_labels": 3, "_tasks": 1},
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_keys_and_values_as_torchrec(name: str) -> None:
    module, cls, extra, kw = CASES[name]
    ours = _values("shardrec", module, cls, extra, **dict(kw))
    theirs = _values("torchrec", module, cls, extra, **dict(kw))
    assert sorted(ours) == sorted(theirs)
    for k, v in theirs.items():
        assert ours[k] == pytest.approx(v, rel=1e-6, abs=1e-9, nan_ok=True), k


def test_the_metric_mapping_is_torchrecs() -> None:
    from torchrec.metrics.metric_module import REC_METRICS_MAPPING as THEIRS

    from shardrec_metrics.rec.metric_module import REC_METRICS_MAPPING as OURS

    assert {k.value: c.__name__ for k, c in OURS.items()} == {
        k.value: c.__name__ for k, c in THEIRS.items()
    }


def _session_values(root: str, module: str, cls: str) -> dict[str, float]:
    config = importlib.import_module(f"{root}.metrics.metrics_config")
    definition = config.SessionMetricDef(session_var_name="sid", top_threshold=2)
    task = config.RecTaskInfo(name="t", session_metric_def=definition)
    metric = getattr(importlib.import_module(f"{root}.metrics.{module}"), cls)(
        world_size=1, my_rank=0, batch_size=BATCH, tasks=[task], window_size=12
    )
    sessions = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2])
    for p, y, w in _batches(3):
        one = lambda x: {"t": x[0]}  # noqa: E731
        metric.update(
            predictions=one(p), labels=one(y), weights=one(w), required_inputs={"sid": sessions}
        )
    return {k: float(v) for k, v in metric.compute().items()}


@pytest.mark.parametrize(
    "module, cls",
    [("precision_session", "PrecisionSessionMetric"), ("recall_session", "RecallSessionMetric")],
)
def test_session_metrics_as_torchrec(module: str, cls: str) -> None:
    ours, theirs = (
        _session_values("shardrec", module, cls),
        _session_values("torchrec", module, cls),
    )
    assert sorted(ours) == sorted(theirs)
    for k, v in theirs.items():
        assert ours[k] == pytest.approx(v, rel=1e-6), k
