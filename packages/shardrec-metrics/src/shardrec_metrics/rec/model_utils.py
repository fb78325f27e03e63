"""Reading a task's labels, predictions and weights out of a model-output dict."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import Tensor

from shardrec_metrics.rec.metrics_config import RecTaskInfo

__all__ = [
    "is_empty_signals",
    "parse_model_outputs",
    "parse_required_inputs",
    "parse_task_model_outputs",
]


def is_empty_signals(labels: Tensor, predictions: Tensor, weights: Tensor | None) -> bool:
    """True when the batch holds no sample."""
    return (
        labels.numel() == 0
        and predictions.numel() == 0
        and (weights is None or weights.numel() == 0)
    )


def _get(model_out: Mapping[str, Tensor], key: str, task: str, what: str) -> Tensor:
    if key not in model_out:
        raise KeyError(
            f"task {task!r}: the model output has no {what} {key!r}; keys are {sorted(model_out)}"
        )
    return model_out[key]


def parse_model_outputs(
    label_name: str,
    prediction_name: str,
    weight_name: str,
    model_out: Mapping[str, Tensor],
    weighted: bool = True,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """(labels, predictions, weights) of one task, each flattened to (B,) where 2-d with one
    column. Weights are ones when `weighted` is False."""
    labels = _get(model_out, label_name, prediction_name, "label").squeeze()
    predictions = _get(model_out, prediction_name, prediction_name, "prediction").squeeze()
    if not weighted:
        return labels, predictions, torch.ones_like(labels, dtype=predictions.dtype)
    weights = _get(model_out, weight_name, prediction_name, "weight").squeeze()
    if predictions.dim() == 0:  # a batch of one squeezes to a scalar
        labels, predictions, weights = labels.reshape(1), predictions.reshape(1), weights.reshape(1)
    return labels, predictions, weights


def parse_required_inputs(
    model_out: Mapping[str, Tensor], required_inputs_name: Iterable[str] | None
) -> dict[str, Tensor]:
    """The extra model outputs some metrics need (e.g. grouping keys), flattened."""
    return {
        name: model_out[name].squeeze() for name in required_inputs_name or () if name in model_out
    }


def parse_task_model_outputs(
    tasks: list[RecTaskInfo],
    model_out: Mapping[str, Tensor],
    required_inputs_name: Iterable[str] | None = None,
) -> tuple[dict[str, Tensor], dict[str, Tensor], dict[str, Tensor], dict[str, Tensor]]:
    """`({task: labels}, {task: predictions}, {task: weights}, required inputs)`; tasks whose
    batch is empty are left out."""
    labels: dict[str, Tensor] = {}
    predictions: dict[str, Tensor] = {}
    weights: dict[str, Tensor] = {}
    for task in tasks:
        lab, pred, w = parse_model_outputs(
            task.label_name, task.prediction_name, task.weight_name, model_out, task.weighted
        )
        if pred.numel() == 0:
            continue
        labels[task.name], predictions[task.name] = lab, pred
        if w is not None:
            weights[task.name] = w
    return labels, predictions, weights, parse_required_inputs(model_out, required_inputs_name)
