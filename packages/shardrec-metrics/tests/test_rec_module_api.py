"""RecMetricModule and RecMetric around the metrics: event hook calls, checkpoint keys,
shutdown/async_compute, custom states with reduction functions (TorchRec 1.8's documented
behaviour of each)."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
import torch

from shardrec_metrics.rec import RecComputeMode, RecTaskInfo
from shardrec_metrics.rec.computation import RecMetricComputation, RecMetricException
from shardrec_metrics.rec.events import EventLoggingHandler, EventType
from shardrec_metrics.rec.metric_module import (
    REC_METRICS_MAPPING,
    RecMetricModule,
    generate_metric_module,
)
from shardrec_metrics.rec.metrics_config import (
    BatchSizeStage,
    MetricsConfig,
    RecMetricDef,
    RecMetricEnum,
)
from shardrec_metrics.rec.mse import MSEMetric
from shardrec_metrics.rec.multi_label_precision import MultiLabelPrecisionMetric
from shardrec_metrics.rec.ne import NEMetric
from shardrec_metrics.rec.rec_metric import RecMetric, RecMetricList
from shardrec_metrics.rec.scalar import ScalarMetric
from shardrec_metrics.rec.tower_qps import TowerQPSMetric

TASK = RecTaskInfo(name="t")


def _batch(n: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "prediction": torch.rand(n, generator=g),
        "label": (torch.rand(n, generator=g) > 0.5).double(),
        "weight": torch.rand(n, generator=g),
    }


def _module(metrics: dict[RecMetricEnum, RecMetricDef] | None = None, **kw: Any) -> RecMetricModule:
    config = MetricsConfig(
        rec_tasks=[TASK],
        rec_metrics=metrics or {RecMetricEnum.NE: RecMetricDef(rec_task_indices=[0])},
    )
    return generate_metric_module(
        RecMetricModule, config, 8, 1, 0, state_metrics_mapping={}, device="cpu", **kw
    )


def _metric(cls: type[RecMetric], mode: RecComputeMode, **kw: Any) -> RecMetric:
    return cls(world_size=1, my_rank=0, batch_size=8, tasks=[TASK], compute_mode=mode, **kw)


@pytest.mark.parametrize(
    "mode", [RecComputeMode.UNFUSED_TASKS_COMPUTATION, RecComputeMode.FUSED_TASKS_COMPUTATION]
)
def test_a_batch_reports_its_sizes_once_per_metric_list(mode: RecComputeMode) -> None:
    b = _batch(8, 0)
    p, y, w = ({TASK.name: b[k]} for k in ("prediction", "label", "weight"))
    metrics = RecMetricList([_metric(NEMetric, mode), _metric(MSEMetric, mode)])
    with mock.patch.object(EventLoggingHandler, "n_batch_log_event") as sink:
        metrics.update(predictions=p, labels=y, weights=w)
        metrics.update(predictions=p, labels=y, weights=None)
    assert sink.call_count == 2
    first, second = (c.kwargs for c in sink.call_args_list)
    assert first["component"] == "rec_metrics" and first["event_name"] == "update"
    assert first["event_type"] == EventType.INFO
    if mode == RecComputeMode.UNFUSED_TASKS_COMPUTATION:  # the dicts as given
        assert first["metadata"] == {
            "predictions_numel": "{'t': 8}",
            "labels_numel": "{'t': 8}",
            "weights_numel": "{'t': 8}",
        }
    else:  # the stacked (n_tasks, B) tensors
        assert first["metadata"]["predictions_shape"] == "[1, 8]"
        assert first["metadata"]["labels_numel"] == "8"
    assert "weights_numel" not in second["metadata"]


def test_fused_updates_report_one_batch_per_flush() -> None:
    b = _batch(8, 1)
    p, y, w = ({TASK.name: b[k]} for k in ("prediction", "label", "weight"))
    mode = RecComputeMode.UNFUSED_TASKS_COMPUTATION
    metrics = RecMetricList(
        [
            _metric(NEMetric, mode, fused_update_limit=3),
            _metric(MSEMetric, mode, fused_update_limit=3),
        ]
    )
    with mock.patch.object(EventLoggingHandler, "n_batch_log_event") as sink:
        for _ in range(3):
            metrics.update(predictions=p, labels=y, weights=w)
    assert sink.call_count == 1
    assert sink.call_args.kwargs["metadata"]["predictions_numel"] == "{'t': 24}"


def test_module_update_and_compute_are_events() -> None:
    module = _module()
    events: list[tuple[str, EventType]] = []

    def record(cls: Any, component: str, name: str, kind: EventType, *a: Any, **k: Any) -> None:
        events.append((name, kind))

    with mock.patch.object(EventLoggingHandler, "log_event", classmethod(record)):
        module.update(_batch(8, 2))
        module.compute()
    assert events == [
        ("RecMetricModule.update", EventType.START),
        ("RecMetricModule.update", EventType.SUCCESS),
        ("RecMetricModule.compute", EventType.START),
        ("RecMetricModule.compute", EventType.SUCCESS),
    ]


def test_shutdown_and_async_compute() -> None:
    module = _module()
    module.shutdown()  # nothing runs in the background: returns
    with pytest.raises(RecMetricException, match="async_compute is not supported"):
        module.async_compute()


def test_an_old_checkpoints_trained_batches_is_dropped() -> None:
    module = _module()
    module.update(_batch(8, 3))
    state = module.state_dict()
    assert "_trained_batches" not in state
    fresh = _module()
    fresh.load_state_dict({**state, "_trained_batches": torch.tensor(42)})
    got, want = fresh.compute(), module.compute()
    assert got.keys() == want.keys()
    for key, value in want.items():
        if "lifetime" in key:  # windows are not checkpointed (TorchRec's neither)
            assert torch.equal(got[key], value), key


def test_checkpoint_keys_hold_only_what_the_values_read() -> None:
    mode = RecComputeMode.UNFUSED_TASKS_COMPUTATION
    plain = {k.rsplit(".", 1)[-1] for k in _metric(MSEMetric, mode).state_dict()}
    assert plain == {"error_sum", "weighted_num_samples"}
    r2 = {
        k.rsplit(".", 1)[-1] for k in _metric(MSEMetric, mode, include_r_squared=True).state_dict()
    }
    assert r2 == plain | {"label_sum", "label_squared_sum"}
    assert not _metric(ScalarMetric, mode).state_dict()


def test_multi_label_precision_checkpoint_round_trip_per_label() -> None:
    mode = RecComputeMode.UNFUSED_TASKS_COMPUTATION
    kw = {"num_labels": 3, "label_names": ["cat", "dog", "fox"]}
    metric = _metric(MultiLabelPrecisionMetric, mode, **kw)
    preds, labels = (
        torch.tensor([5.0, 1, 2, 7, 4, 0, 3, 6]),
        torch.tensor([5.0, 3, 2, 1, 4, 4, 3, 0]),
    )
    metric.update(predictions={"t": preds}, labels={"t": labels}, weights=None)
    state = metric.state_dict()
    names = {k.rsplit(".", 1)[-1] for k in state}
    assert names == {
        f"{s}_{n}" for s in ("true_pos_sum", "false_pos_sum") for n in kw["label_names"]
    }
    # "dog" is bit 1: predicted by 2, 7, 3, 6, whose labels 2, 1, 3, 0 have it twice
    assert state["_metrics_computations.0.true_pos_sum_dog"].tolist() == [2.0]
    assert state["_metrics_computations.0.false_pos_sum_dog"].tolist() == [2.0]
    loaded = _metric(MultiLabelPrecisionMetric, mode, **kw)
    loaded.load_state_dict(state)
    got, want = loaded.compute(), metric.compute()
    for key, value in want.items():
        if "lifetime" in key:  # windows are not checkpointed
            assert torch.equal(got[key], value), key


def test_mapping_in_torchrec_order() -> None:
    names = [e.name for e in REC_METRICS_MAPPING if isinstance(e, RecMetricEnum)]
    assert names[:8] == [
        "NE", "NE_POSITIVE", "SEGMENTED_NE", "RECALIBRATED_NE", "RECALIBRATED_CALIBRATION",
        "CTR", "CALIBRATION", "AUC",
    ]  # fmt: skip
    assert names[-1] == "SUM_WEIGHTS" and len(names) == len(set(names)) == 37


def test_tower_qps_keeps_the_batch_size_stages() -> None:
    stages = [BatchSizeStage(256, 100), BatchSizeStage(512, None)]
    module = _module(
        {
            RecMetricEnum.NE: RecMetricDef(rec_task_indices=[0]),
            RecMetricEnum.TOWER_QPS: RecMetricDef(rec_task_indices=[0]),
        },
        batch_size_stages=stages,
    )
    qps = [m for m in module.rec_metrics.rec_metrics if isinstance(m, TowerQPSMetric)]
    assert len(qps) == 1 and qps[0]._batch_size_stages == stages
    assert qps[0]._batch_size_stages is not stages  # a copy, as TorchRec's


def test_indices_without_tasks_name_the_metric() -> None:
    with pytest.raises(ValueError, match=r"rec_task_indices \[0\] is specified.*rec_tasks is None"):
        MetricsConfig(
            rec_tasks=None, rec_metrics={RecMetricEnum.AUC: RecMetricDef(rec_task_indices=[0])}
        )  # type: ignore[arg-type]


def test_a_rank_past_world_size_reports_nothing() -> None:
    b = _batch(8, 4)
    p, y, w = ({TASK.name: b[k]} for k in ("prediction", "label", "weight"))
    ne = NEMetric(world_size=1, my_rank=1, batch_size=8, tasks=[TASK])
    ne.update(predictions=p, labels=y, weights=w)
    assert ne.compute() == {}
    assert ne.local_compute()  # its own values are there


class _Samples(RecMetricComputation):
    """A custom computation as TorchRec's users write them: `add_state` with a function."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_state("seen", [], dist_reduce_fx=lambda xs: [torch.cat(xs, dim=-1)])
        self.add_state("count", torch.zeros(1), dist_reduce_fx="sum", persistent=True)

    def update(self, *, predictions: Any, labels: torch.Tensor, weights: Any, **kw: Any) -> None:
        self.seen.append(labels)  # type: ignore[operator]
        self.count += labels.numel()

    def _compute(self) -> list[Any]:
        return []


def test_add_state_takes_functions_and_checks_names() -> None:
    comp = _Samples(my_rank=0, batch_size=2, n_tasks=1, window_size=10)
    assert callable(comp._reductions["seen"]) and comp._reductions["count"] == "sum"
    assert list(comp.state_dict()) == ["count"]
    comp.update(predictions=None, labels=torch.ones(1, 2), weights=None)
    comp.sync()  # one process: nothing to gather, the states stay
    assert comp.count.item() == 2
    with pytest.raises(ValueError, match="dist_reduce_fx"):
        comp.add_state("bad", torch.zeros(1), dist_reduce_fx="median")
