"""TorchRec's RecMetric API (shardrec_metrics.rec) against naive per-sample references."""

from __future__ import annotations

import math
from collections.abc import Sequence
from unittest import mock

import _rec_reference as ref
import pytest
import torch

from shardrec_metrics.rec import (
    BatchSizeStage,
    RecComputeMode,
    RecMetricDef,
    RecMetricEnum,
    RecMetricModule,
    RecTaskInfo,
    ThroughputDef,
    ThroughputMetric,
    generate_metric_module,
)
from shardrec_metrics.rec.accuracy import AccuracyMetric
from shardrec_metrics.rec.auc import AUCMetric
from shardrec_metrics.rec.auprc import AUPRCMetric
from shardrec_metrics.rec.average import AverageMetric
from shardrec_metrics.rec.calibration import CalibrationMetric
from shardrec_metrics.rec.ctr import CTRMetric
from shardrec_metrics.rec.mae import MAEMetric
from shardrec_metrics.rec.metrics_config import MetricsConfig
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricNamespace, compose_metric_key
from shardrec_metrics.rec.mse import MSEMetric
from shardrec_metrics.rec.ne import NEMetric
from shardrec_metrics.rec.ne_positive import NEPositiveMetric
from shardrec_metrics.rec.nmse import NMSEMetric
from shardrec_metrics.rec.num_missing_labels import NumMissingLabelsMetric
from shardrec_metrics.rec.num_positive_samples import NumPositiveSamplesMetric
from shardrec_metrics.rec.precision import PrecisionMetric
from shardrec_metrics.rec.rec_metric import RecMetric
from shardrec_metrics.rec.recall import RecallMetric
from shardrec_metrics.rec.sum_weights import SumWeightsMetric
from shardrec_metrics.rec.unweighted_ne import UnweightedNEMetric
from shardrec_metrics.rec.weighted_avg import WeightedAvgMetric
from shardrec_metrics.rec.weighted_sum_predictions import WeightedSumPredictionsMetric

TASKS = ["t1", "t2"]
CLASSES: dict[str, type[RecMetric]] = {
    "ne": NEMetric,
    "calibration": CalibrationMetric,
    "ctr": CTRMetric,
    "mse": MSEMetric,
    "mae": MAEMetric,
    "accuracy": AccuracyMetric,
    "precision": PrecisionMetric,
    "recall": RecallMetric,
    "weighted_avg": WeightedAvgMetric,
    "sum_weights": SumWeightsMetric,
    "num_positive_samples": NumPositiveSamplesMetric,
    "weighted_sum_predictions": WeightedSumPredictionsMetric,
}
Batches = dict[str, list[ref.Batch]]


def _batches(seed: int, sizes: Sequence[int], ties: bool = False) -> Batches:
    g = torch.Generator().manual_seed(seed)
    out: Batches = {t: [] for t in TASKS}
    for b in sizes:
        for t in TASKS:
            p = torch.rand(b, generator=g, dtype=torch.double)
            if ties:
                p = (p * 4).floor() / 4
            y = torch.randint(0, 2, (b,), generator=g).double()
            w = torch.rand(b, generator=g, dtype=torch.double)
            out[t].append(list(zip(p.tolist(), y.tolist(), w.tolist(), strict=True)))
    return out


def _feed(metric: RecMetric, data: Batches, fused: bool) -> None:
    for i in range(len(data[TASKS[0]])):
        cols = {t: torch.tensor(data[t][i], dtype=torch.double).T for t in TASKS}
        p = {t: c[0] for t, c in cols.items()}
        y = {t: c[1] for t, c in cols.items()}
        w = {t: c[2] for t, c in cols.items()}
        if fused:
            stack = lambda d: torch.stack([d[t] for t in TASKS])  # noqa: E731
            metric.update(predictions=stack(p), labels=stack(y), weights=stack(w))
        else:
            metric.update(predictions=p, labels=y, weights=w)


def _make(
    cls: type[RecMetric], mode: RecComputeMode, window: int, batch: int = 4, **kw: object
) -> RecMetric:
    tasks = [RecTaskInfo(name=t) for t in TASKS]
    return cls(
        world_size=1,
        my_rank=0,
        batch_size=batch,
        tasks=tasks,
        compute_mode=mode,
        window_size=window,
        **kw,
    )


def _computed(
    cls: type[RecMetric], data: Batches, window: int, fused: bool
) -> dict[str, torch.Tensor]:
    """`cls` fed `data` (all tasks at once when `fused`), computed."""
    mode = (
        RecComputeMode.FUSED_TASKS_COMPUTATION
        if fused
        else RecComputeMode.UNFUSED_TASKS_COMPUTATION
    )
    metric = _make(cls, mode, window)
    _feed(metric, data, fused=fused)
    return metric.compute()


def _fused_and_unfused(
    fused_cls: type[RecMetric], unfused_cls: type[RecMetric], data: Batches, window: int
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """`fused_cls` fed all tasks at once and `unfused_cls` task by task, both computed."""
    fused = _make(fused_cls, RecComputeMode.FUSED_TASKS_COMPUTATION, window)
    unfused = _make(unfused_cls, RecComputeMode.UNFUSED_TASKS_COMPUTATION, window)
    _feed(fused, data, fused=True)
    _feed(unfused, data, fused=False)
    return fused.compute(), unfused.compute()


@pytest.mark.parametrize("name", sorted(CLASSES))
@pytest.mark.parametrize("mode", list(RecComputeMode))
def test_sum_metrics_lifetime_and_window_match_naive_loops(name: str, mode: RecComputeMode) -> None:
    data = _batches(sum(map(ord, name)), [4, 3, 4, 2, 4])  # stable across processes
    metric = _make(CLASSES[name], mode, window=9)
    _feed(metric, data, fused=mode != RecComputeMode.UNFUSED_TASKS_COMPUTATION)
    out = metric.compute()
    local = metric.local_compute()
    formula = ref.SUM_METRICS[name]
    for t in TASKS:
        lifetime = formula([s for b in data[t] for s in b])
        window = formula([s for b in ref.window_batches(data[t], 9) for s in b])
        assert float(out[f"{name}-{t}|lifetime_{name}"]) == pytest.approx(lifetime, rel=1e-9)
        assert float(out[f"{name}-{t}|window_{name}"]) == pytest.approx(window, rel=1e-9)
        assert float(local[f"{name}-{t}|local_window_{name}"]) == pytest.approx(window, rel=1e-9)


def test_ne_logloss_and_mse_extras() -> None:
    data = _batches(5, [4, 4])
    ne = _make(NEMetric, RecComputeMode.UNFUSED_TASKS_COMPUTATION, 100, include_logloss=True)
    mse = _make(MSEMetric, RecComputeMode.FUSED_TASKS_COMPUTATION, 100, include_r_squared=True)
    _feed(ne, data, fused=False)
    _feed(mse, data, fused=True)
    a, b = ne.compute(), mse.compute()
    for t in TASKS:
        samples = [s for batch in data[t] for s in batch]
        assert float(a[f"ne-{t}|lifetime_logloss"]) == pytest.approx(ref.logloss(samples), rel=1e-9)
        assert float(b[f"mse-{t}|window_rmse"]) == pytest.approx(ref.rmse(samples), rel=1e-9)
        mean = sum(w * y for _, y, w in samples) / sum(w for _, _, w in samples)
        sst = sum(w * (y - mean) ** 2 for _, y, w in samples)
        sse = sum(w * (y - p) ** 2 for p, y, w in samples)
        assert float(b[f"mse-{t}|lifetime_r_squared"]) == pytest.approx(1 - sse / sst, rel=1e-9)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize(
    "mode", [RecComputeMode.UNFUSED_TASKS_COMPUTATION, RecComputeMode.FUSED_TASKS_COMPUTATION]
)
def test_auc_and_auprc_over_the_sample_window(ties: bool, mode: RecComputeMode) -> None:
    data = _batches(11, [5, 5, 5, 3], ties=ties)
    auc = _make(AUCMetric, mode, window=12, batch=5)
    auprc = _make(AUPRCMetric, mode, window=12, batch=5)
    fused = mode != RecComputeMode.UNFUSED_TASKS_COMPUTATION
    _feed(auc, data, fused)
    _feed(auprc, data, fused)
    a, b = auc.compute(), auprc.compute()
    assert not any("lifetime" in k for k in [*a, *b])  # TorchRec reports window values only
    for t in TASKS:
        window = ref.window_samples(data[t], 12)
        assert float(a[f"auc-{t}|window_auc"]) == pytest.approx(ref.auc(window), rel=1e-6)
        assert float(b[f"auprc-{t}|window_auprc"]) == pytest.approx(ref.auprc(window), rel=1e-6)


def test_auc_no_signal_is_half() -> None:
    metric = _make(AUCMetric, RecComputeMode.UNFUSED_TASKS_COMPUTATION, 8)
    assert float(metric.compute()["auc-t1|window_auc"]) == 0.5
    one_class = {t: torch.ones(4, dtype=torch.double) for t in TASKS}
    metric.update(
        predictions={t: torch.rand(4) for t in TASKS}, labels=one_class, weights=one_class
    )
    assert float(metric.compute()["auc-t2|window_auc"]) == 0.5


def test_fused_update_limit_buffers_but_gives_the_same_values() -> None:
    data = _batches(3, [4, 4, 4, 4, 4])
    plain = _make(NEMetric, RecComputeMode.UNFUSED_TASKS_COMPUTATION, 1000)
    buffered = _make(NEMetric, RecComputeMode.UNFUSED_TASKS_COMPUTATION, 1000, fused_update_limit=3)
    _feed(plain, data, fused=False)
    _feed(buffered, data, fused=False)
    assert {k: float(v) for k, v in plain.compute().items()} == pytest.approx(
        {k: float(v) for k, v in buffered.compute().items()}
    )


def test_validate_update_masks_a_task_without_weight() -> None:
    metric = _make(
        CTRMetric, RecComputeMode.FUSED_TASKS_COMPUTATION, 100, should_validate_update=True
    )
    w = torch.stack([torch.ones(4), torch.zeros(4)])
    metric.update(predictions=torch.rand(2, 4), labels=torch.ones(2, 4), weights=w)
    out = metric.compute()
    assert float(out["ctr-t1|lifetime_ctr"]) == 1.0 and float(out["ctr-t2|lifetime_ctr"]) == 0.0


def test_reset_forgets_everything_and_keys_follow_torchrec() -> None:
    metric = _make(NEMetric, RecComputeMode.UNFUSED_TASKS_COMPUTATION, 100)
    _feed(metric, _batches(1, [4]), fused=False)
    metric.reset()
    assert all(math.isnan(float(v)) for v in metric.compute().values())
    assert compose_metric_key(MetricNamespace.NE, "DefaultTask", MetricName.NE, "lifetime_") == (
        "ne-DefaultTask|lifetime_ne"
    )
    assert f"{MetricNamespace.AUC}" == "auc" and str(MetricName.LOG_LOSS) == "logloss"


def test_bad_arguments_name_the_problem() -> None:
    tasks = [RecTaskInfo()]

    def one_rank_ne(**kw: object) -> NEMetric:
        return NEMetric(world_size=1, my_rank=0, batch_size=4, tasks=tasks, window_size=100, **kw)

    with pytest.raises(ValueError, match="Local window size"):
        NEMetric(world_size=2, my_rank=0, batch_size=64, tasks=tasks, window_size=100)
    with pytest.raises(ValueError, match="fused update"):
        one_rank_ne(compute_mode=RecComputeMode.FUSED_TASKS_COMPUTATION, fused_update_limit=2)
    with pytest.raises(TypeError, match="unexpected"):
        one_rank_ne(bogus=1)
    with pytest.raises(ValueError, match="my_rank"):
        NEMetric(world_size=2, my_rank=-1, batch_size=4, tasks=tasks, window_size=100)
    with pytest.raises(ValueError, match="world_size"):
        NEMetric(world_size=0, my_rank=0, batch_size=4, tasks=tasks, window_size=100)
    with pytest.raises(ValueError, match="threshold"):
        AccuracyMetric(
            world_size=1, my_rank=0, batch_size=4, tasks=tasks, window_size=100, threshold=2.0
        )
    metric = one_rank_ne()
    with pytest.raises(ValueError, match="same samples"):
        metric.update(
            predictions={"DefaultTask": torch.rand(4)},
            labels={"DefaultTask": torch.ones(3)},
            weights=None,
        )
    fused = one_rank_ne(compute_mode=RecComputeMode.FUSED_TASKS_COMPUTATION)
    with pytest.raises(ValueError, match="DefaultTask"):
        fused.update(
            predictions={"other": torch.rand(4)}, labels={"other": torch.ones(4)}, weights=None
        )


def test_throughput_against_hand_computed_rates() -> None:
    times = iter([0.0, 1.0, 2.0, 4.0, 5.0, 9.0])
    with mock.patch(
        "shardrec_metrics.rec.throughput.time.monotonic", side_effect=lambda: next(times)
    ):
        tp = ThroughputMetric(batch_size=8, world_size=2, window_seconds=5, warmup_steps=2)
        for _ in range(6):
            tp.update()
    out = tp.compute()
    assert int(out["throughput-throughput|total_examples"]) == 96
    # after warmup (ends at t=1): 4 steps of 16 examples in 8 s; window: lapses 1+4 = 5 s
    assert float(out["throughput-throughput|lifetime_throughput"]) == pytest.approx(64 / 8)
    assert float(out["throughput-throughput|window_throughput"]) == pytest.approx(2 * 16 / 5)
    with pytest.raises(ValueError, match="window_seconds"):
        ThroughputMetric(batch_size=1, world_size=1, window_seconds=0)


def test_generate_metric_module_from_a_config() -> None:
    tasks = [
        RecTaskInfo(name="click"),
        RecTaskInfo(name="like", label_name="l2", prediction_name="p2", weight_name="w2"),
    ]
    config = MetricsConfig(
        rec_tasks=tasks,
        rec_metrics={
            RecMetricEnum.NE: RecMetricDef(rec_task_indices=[0, 1], window_size=40),
            RecMetricEnum.AUC: RecMetricDef(rec_tasks=[tasks[1]], window_size=40),
        },
        throughput_metric=ThroughputDef(window_size=10, warmup_steps=1),
        compute_interval_steps=2,
    )
    module = generate_metric_module(
        RecMetricModule,
        config,
        batch_size=4,
        world_size=1,
        my_rank=0,
        state_metrics_mapping={},
        device="cpu",
    )
    data = _batches(9, [4, 4])
    for i in range(2):
        cols = {t: torch.tensor(data[t][i], dtype=torch.double).T for t in TASKS}
        module.update(
            {
                "label": cols["t1"][1],
                "prediction": cols["t1"][0],
                "weight": cols["t1"][2],
                "l2": cols["t2"][1],
                "p2": cols["t2"][0],
                "w2": cols["t2"][2],
            }
        )
    assert module.should_compute()
    out = module.compute()
    click = [s for b in data["t1"] for s in b]
    like = [s for b in data["t2"] for s in b]
    assert float(out["ne-click|lifetime_ne"]) == pytest.approx(ref.ne(click), rel=1e-9)
    assert float(out["auc-like|window_auc"]) == pytest.approx(ref.auc(like), rel=1e-6)
    assert int(out["throughput-throughput|total_examples"]) == 8
    with pytest.raises(ValueError, match="out of range"):
        MetricsConfig(
            rec_tasks=tasks, rec_metrics={RecMetricEnum.NE: RecMetricDef(rec_task_indices=[2])}
        )
    bad = MetricsConfig(
        rec_tasks=tasks, rec_metrics={RecMetricEnum.SERVING_AE_LOSS: RecMetricDef(rec_tasks=tasks)}
    )
    with pytest.raises(ValueError, match="not implemented"):
        generate_metric_module(RecMetricModule, bad, 4, 1, 0, {}, "cpu")


def test_missing_labels_counts_nan_label_weight() -> None:
    metric = _make(NumMissingLabelsMetric, RecComputeMode.FUSED_TASKS_COMPUTATION, 100)
    labels = torch.tensor([[1.0, math.nan, 0.0, math.nan], [math.nan, 1.0, 1.0, 0.0]])
    weights = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.5, 1.0, 1.0, 1.0]])
    metric.update(predictions=torch.rand(2, 4), labels=labels, weights=weights)
    out = metric.compute()
    assert float(out["num_missing_labels-t1|lifetime_num_missing_labels"]) == 6.0
    assert float(out["num_missing_labels-t2|window_num_missing_labels"]) == 0.5


def test_throughput_batch_size_stages_and_their_checkpoint() -> None:
    stages = [BatchSizeStage(256, 1), BatchSizeStage(512, None)]
    tp = ThroughputMetric(batch_size=32, world_size=2, window_seconds=100, batch_size_stages=stages)
    tp.update()
    assert int(tp.compute()["throughput-throughput|batch_size"]) == 256
    tp.update()
    out = tp.compute()
    assert int(out["throughput-throughput|batch_size"]) == 512
    assert int(out["throughput-throughput|total_examples"]) == (256 + 512) * 2
    state = tp.state_dict()
    assert int(state["num_batch"]) == 2
    fresh = ThroughputMetric(
        batch_size=32, world_size=2, window_seconds=100, batch_size_stages=stages
    )
    fresh.load_state_dict(state)
    assert fresh._num_batch == 2
    plain = ThroughputMetric(batch_size=32, world_size=2, window_seconds=100)
    plain.load_state_dict(state)  # a checkpoint with stages loads into a metric without them
    assert not hasattr(plain, "_num_batch") and "num_batch" not in plain.state_dict()
    with pytest.raises(ValueError, match="max_iters"):
        generate_metric_module(
            RecMetricModule,
            MetricsConfig(),
            4,
            1,
            0,
            {},
            "cpu",
            batch_size_stages=[BatchSizeStage(4, 1), BatchSizeStage(8, 2)],
        )


def test_unweighted_ne_ignores_weights() -> None:
    data = _batches(21, [4, 4, 4])
    out = _computed(UnweightedNEMetric, data, 8, fused=False)
    for t in TASKS:
        unit = [[(p, y, 1.0) for p, y, _ in b] for b in data[t]]
        window = [s for b in ref.window_batches(unit, 8) for s in b]
        assert float(out[f"unweighted_ne-{t}|lifetime_unweighted_ne"]) == pytest.approx(
            ref.ne([s for b in unit for s in b]), rel=1e-9
        )
        assert float(out[f"unweighted_ne-{t}|window_unweighted_ne"]) == pytest.approx(
            ref.ne(window), rel=1e-9
        )


def test_nmse_and_averages_match_naive_loops() -> None:
    data = _batches(33, [4, 4, 4])
    a, b = _fused_and_unfused(NMSEMetric, AverageMetric, data, 8)
    for t in TASKS:
        window = [s for batch in ref.window_batches(data[t], 8) for s in batch]
        baseline = ref.mse([(1.0, y, w) for _, y, w in window])
        assert float(a[f"nmse-{t}|window_nmse"]) == pytest.approx(ref.mse(window) / baseline)
        assert float(a[f"nmse-{t}|window_nrmse"]) == pytest.approx(
            math.sqrt(ref.mse(window)) / math.sqrt(baseline)
        )
        everything = [s for batch in data[t] for s in batch]
        total = sum(w for _, _, w in everything)
        assert float(b[f"average-{t}|lifetime_label_average"]) == pytest.approx(
            sum(w * y for _, y, w in everything) / total
        )
        assert float(b[f"average-{t}|window_prediction_average"]) == pytest.approx(
            ref.weighted_avg(window)
        )


def test_ne_positive_matches_a_naive_loop() -> None:
    data = _batches(44, [4, 4])
    out = _computed(NEPositiveMetric, data, 100, fused=True)
    for t in TASKS:
        s = [x for b in data[t] for x in b]
        ce_pos = sum(-w * y * math.log2(min(max(p, 1e-12), 1 - 1e-12)) for p, y, w in s)
        full_ce = sum(-w * (y * math.log2(p) + (1 - y) * math.log2(1 - p)) for p, y, w in s)
        # NE+ / NE = positive cross entropy / full cross entropy (same normalizer)
        expected = ref.ne(s) * ce_pos / full_ce
        assert float(out[f"ne_positive-{t}|lifetime_ne_positive"]) == pytest.approx(expected)


def test_parse_task_model_outputs() -> None:
    from shardrec_metrics.rec.model_utils import parse_task_model_outputs

    tasks = [
        RecTaskInfo(name="a"),
        RecTaskInfo(name="b", label_name="lb", prediction_name="", weight_name=""),
    ]
    out = {
        "label": torch.ones(3, 1),
        "prediction": torch.rand(3, 1),
        "weight": torch.ones(3),
        "lb": torch.zeros(3),
    }
    labels, preds, weights, required = parse_task_model_outputs(tasks, out, ["extra"])
    assert (
        labels["a"].shape == (3,)
        and preds["a"].shape == (3,)
        and "b" in labels
        and "b" not in preds
        and weights["a"].shape == (3,)
    )
    assert required == {}
    with pytest.raises(ValueError, match="Prediction name prediction not found"):
        parse_task_model_outputs(tasks[:1], {"label": torch.ones(3)})
    with pytest.raises(ValueError, match="same number of elements"):
        parse_task_model_outputs(tasks[:1], {**out, "weight": torch.ones(4)})


@pytest.mark.parametrize(
    "mode", [RecComputeMode.UNFUSED_TASKS_COMPUTATION, RecComputeMode.FUSED_TASKS_COMPUTATION]
)
def test_tensor_weighted_avg_of_a_named_output(mode: RecComputeMode) -> None:
    from shardrec_metrics.rec.tensor_weighted_avg import TensorWeightedAvgMetric

    tasks = [
        RecTaskInfo(name="a", tensor_name="ta"),
        RecTaskInfo(name="b", tensor_name="tb", weighted=False),
    ]
    metric = TensorWeightedAvgMetric(
        world_size=1, my_rank=0, batch_size=4, tasks=tasks, compute_mode=mode, window_size=8
    )
    assert metric.get_required_inputs() == {"ta", "tb"}
    g = torch.Generator().manual_seed(7)
    seen: dict[str, list[list[tuple[float, float]]]] = {"a": [], "b": []}
    for _ in range(3):
        w = {t: torch.rand(4, generator=g, dtype=torch.double) for t in "ab"}
        x = {t: torch.rand(4, generator=g, dtype=torch.double) for t in "ab"}
        y = {t: torch.ones(4, dtype=torch.double) for t in "ab"}
        args: dict[str, object] = {"predictions": x, "labels": y, "weights": w}
        if mode == RecComputeMode.FUSED_TASKS_COMPUTATION:
            args = {k: torch.stack([v["a"], v["b"]]) for k, v in args.items()}  # type: ignore[attr-defined]
        metric.update(**args, required_inputs={"ta": x["a"], "tb": x["b"]})  # type: ignore[arg-type]
        seen["a"].append(list(zip(x["a"].tolist(), w["a"].tolist(), strict=True)))
        seen["b"].append([(v, 1.0) for v in x["b"].tolist()])  # unweighted task: plain mean
    out = metric.compute()
    for t in "ab":
        everything = [s for b in seen[t] for s in b]
        window = [s for b in seen[t][-2:] for s in b]  # 8 samples: the last two batches
        for key, samples in (("lifetime", everything), ("window", window)):
            expected = sum(v * w for v, w in samples) / sum(w for _, w in samples)
            assert float(out[f"weighted_avg-{t}|{key}_weighted_avg"]) == pytest.approx(expected)


def test_cali_free_ne_matches_a_naive_loop() -> None:
    from shardrec_metrics.rec.cali_free_ne import CaliFreeNEMetric

    data = _batches(55, [4, 4, 4])
    out = _computed(CaliFreeNEMetric, data, 8, fused=False)
    for t in TASKS:
        window = [s for b in ref.window_batches(data[t], 8) for s in b]
        total = sum(w for _, _, w in window)
        pos = sum(w * y for _, y, w in window)
        q = sum(w * p for p, _, w in window) / total
        expected = ref.ne(window) / (-pos * math.log2(q) - (total - pos) * math.log2(1 - q))
        assert float(out[f"cali_free_ne-{t}|window_cali_free_ne"]) == pytest.approx(expected)


@pytest.mark.parametrize(
    "mode", [RecComputeMode.UNFUSED_TASKS_COMPUTATION, RecComputeMode.FUSED_TASKS_COMPUTATION]
)
def test_multiclass_recall_at_k_matches_a_naive_loop(mode: RecComputeMode) -> None:
    from shardrec_metrics.rec.multiclass_recall import MulticlassRecallMetric

    classes = 4
    metric = _make(MulticlassRecallMetric, mode, 100, number_of_classes=classes)
    g = torch.Generator().manual_seed(3)
    scores = torch.rand(2, 8, classes, generator=g, dtype=torch.double)
    labels = torch.randint(0, classes, (2, 8), generator=g)
    weights = torch.rand(2, 8, generator=g, dtype=torch.double)
    if mode == RecComputeMode.FUSED_TASKS_COMPUTATION:
        metric.update(predictions=scores, labels=labels, weights=weights)
    else:
        split = lambda x: {t: x[i] for i, t in enumerate(TASKS)}  # noqa: E731
        metric.update(predictions=split(scores), labels=split(labels), weights=split(weights))
    out = metric.compute()
    for i, t in enumerate(TASKS):
        got = out[f"multiclass_recall-{t}|lifetime_multiclass_recall"].reshape(-1).tolist()
        total = float(weights[i].sum())
        for k in range(classes):
            hits = 0.0
            for b in range(8):
                order = sorted(range(classes), key=lambda c: -float(scores[i, b, c]))
                if int(labels[i, b]) in order[: k + 1]:
                    hits += float(weights[i, b])
            assert got[k] == pytest.approx(hits / total)


def test_serving_metrics_add_total_examples() -> None:
    from shardrec_metrics.rec.serving_calibration import ServingCalibrationMetric
    from shardrec_metrics.rec.serving_ne import ServingNEMetric

    data = _batches(66, [4, 4, 4])
    for t in TASKS:  # one zero weight per task
        p, y, _ = data[t][0][0]
        data[t][0][0] = (p, y, 0.0)
    a, b = _fused_and_unfused(ServingNEMetric, ServingCalibrationMetric, data, 8)
    for t in TASKS:
        window = [s for batch in ref.window_batches(data[t], 8) for s in batch]
        assert float(a[f"serving_ne-{t}|window_ne"]) == pytest.approx(ref.ne(window), rel=1e-9)
        assert float(b[f"serving_calibration-{t}|window_calibration"]) == pytest.approx(
            ref.calibration(window), rel=1e-9
        )
        assert int(a[f"serving_ne-{t}|total_examples"]) == 11
        assert int(b[f"serving_calibration-{t}|total_examples"]) == 11


def test_window_sums_that_should_be_zero_are_zero() -> None:
    # Seed 110: task t2's window predicts no positive, while earlier batches did. A running
    # add/subtract window leaves 1e-17 residues and reported precision 0.75 (a ratio of them).
    data = _batches(110, [4, 3, 4, 2, 4])
    window = [s for b in ref.window_batches(data["t2"], 9) for s in b]
    assert ref.precision(window) == 0.0 and all(p < 0.5 for p, _, _ in window)
    metric = _make(PrecisionMetric, RecComputeMode.UNFUSED_TASKS_COMPUTATION, 9)
    _feed(metric, data, fused=False)
    out = {**metric.compute(), **metric.local_compute()}
    assert float(out["precision-t2|window_precision"]) == 0.0
    assert float(out["precision-t2|local_window_precision"]) == 0.0


def test_rauc_counts_label_pairs_ordered_like_predictions() -> None:
    from shardrec_metrics.rec.rauc import RAUCMetric

    g = torch.Generator().manual_seed(5)
    metric = _make(RAUCMetric, RecComputeMode.FUSED_TASKS_COMPUTATION, 12, batch=5)
    preds, labels = [], []
    for _ in range(4):
        p = (torch.rand(2, 5, generator=g, dtype=torch.double) * 4).floor()  # ties on purpose
        y = (torch.rand(2, 5, generator=g, dtype=torch.double) * 3).floor()
        metric.update(predictions=p, labels=y, weights=torch.ones(2, 5, dtype=torch.double))
        preds.append(p)
        labels.append(y)
    out = metric.compute()
    p_all, y_all = torch.cat(preds, dim=1)[:, -12:], torch.cat(labels, dim=1)[:, -12:]
    for i, t in enumerate(TASKS):
        order = sorted(zip(p_all[i].tolist(), y_all[i].tolist(), strict=True))
        ys = [y for _, y in order]
        inversions = sum(ys[a] > ys[b] for a in range(12) for b in range(a + 1, 12))
        assert float(out[f"rauc-{t}|window_rauc"]) == pytest.approx(1 - inversions / 66)
