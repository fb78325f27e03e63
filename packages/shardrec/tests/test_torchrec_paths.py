"""TorchRec paths that are component modules themselves, not re-exports."""

from __future__ import annotations

import importlib
from unittest import mock


def test_datasets_utils_is_the_datapipes_module() -> None:
    import shardrec_data.datapipes as component

    umbrella = importlib.import_module("shardrec.datasets.utils")
    assert umbrella is component
    import shardrec.datasets

    assert shardrec.datasets.utils is component
    with mock.patch("shardrec.datasets.utils.get_worker_info") as info:
        info.return_value = mock.Mock(id=1, num_workers=2)
        assert list(umbrella.ParallelReadConcat([1, 2], [3], [4])) == [4]


METRIC_MODULES = [
    "accuracy",
    "auc",
    "auprc",
    "calibration",
    "ctr",
    "mae",
    "metric_module",
    "metrics_config",
    "metrics_namespace",
    "model_utils",
    "mse",
    "ne",
    "precision",
    "rec_metric",
    "recall",
    "throughput",
    "weighted_avg",
    "sum_weights",
    "num_positive_samples",
    "num_missing_labels",
    "weighted_sum_predictions",
    "unweighted_ne",
    "nmse",
    "average",
    "ne_positive",
    "tensor_weighted_avg",
    "cali_free_ne",
    "multiclass_recall",
    "serving_ne",
    "serving_calibration",
    "rauc",
    "ne_with_recalibration",
    "calibration_with_recalibration",
    "scalar",
    "output",
    "tower_qps",
    "gauc",
    "xauc",
    "ndcg",
    "segmented_ne",
    "hindsight_target_pr",
    "multi_label_precision",
    "precision_session",
    "recall_session",
]


def test_metrics_paths_are_the_rec_modules() -> None:
    for name in METRIC_MODULES:
        umbrella = importlib.import_module(f"shardrec.metrics.{name}")
        assert umbrella is importlib.import_module(f"shardrec_metrics.rec.{name}"), name
    import shardrec.metrics.throughput as throughput

    with mock.patch("shardrec.metrics.throughput.time.monotonic", return_value=5.0):
        assert throughput.time.monotonic() == 5.0
