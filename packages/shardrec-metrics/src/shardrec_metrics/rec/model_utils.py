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


def is_empty_signals(labels: Tensor, predictions: Tensor, weights: Tensor) -> bool:
    """True when the batch holds no sample."""
    return labels.numel() == 0 and predictions.numel() == 0 and weights.numel() == 0


def _get(model_out: Mapping[str, Tensor], key: str, what: str) -> Tensor:
    if key not in model_out:
        raise ValueError(
            f"{what} name {key} not found in model output; its keys are {sorted(model_out)}"
        )
    return model_out[key].squeeze()


def parse_model_outputs(
    label_name: str,
    prediction_name: str,
    weight_name: str,
    model_out: Mapping[str, Tensor],
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """(labels, predictions, weights) of one task, squeezed to (B,) (a batch of one stays (1,)).

    An empty `prediction_name` (a label-only task) gives `(labels, None, None)`. Labels,
    predictions and weights must hold the same number of samples.
    """
    labels = _get(model_out, label_name, "Label")
    if not prediction_name:
        if weight_name:
            raise ValueError(f"weight name {weight_name!r} given without a prediction name")
        return labels, None, None
    predictions = _get(model_out, prediction_name, "Prediction")
    weights = _get(model_out, weight_name, "Weight")
    if not is_empty_signals(labels, predictions, weights):
        per_sample = predictions.numel() // (
            predictions.shape[-1] if predictions.dim() > labels.dim() else 1
        )
        if not labels.numel() == per_sample == weights.numel() and labels.dim() != 2:
            raise ValueError(
                f"Expect the same number of elements in labels, predictions, and weights. "
                f"Instead got {labels.numel()}, {predictions.numel()}, {weights.numel()}"
            )
        if labels.dim() == 0:
            labels, predictions, weights = (
                labels.reshape(1),
                predictions.reshape(1),
                weights.reshape(1),
            )
    return labels, predictions, weights


def parse_required_inputs(
    model_out: Mapping[str, Tensor],
    required_inputs_name: Iterable[str] | None,
    ndcg_transform_input: bool = False,
    device: torch.device | None = None,
) -> dict[str, Tensor]:
    """The extra model outputs some metrics need (e.g. a task's `tensor_name`), squeezed."""
    out: dict[str, Tensor] = {}
    for name in required_inputs_name or ():
        if name in model_out:
            value = model_out[name].squeeze()
            out[name] = value if device is None else value.to(device)
    return out


def parse_task_model_outputs(
    tasks: list[RecTaskInfo],
    model_out: Mapping[str, Tensor],
    required_inputs_list: Iterable[str] | None = None,
) -> tuple[dict[str, Tensor], dict[str, Tensor], dict[str, Tensor], dict[str, Tensor]]:
    """`({task: labels}, {task: predictions}, {task: weights}, required inputs)`; a task whose
    batch is empty is left out."""
    labels: dict[str, Tensor] = {}
    predictions: dict[str, Tensor] = {}
    weights: dict[str, Tensor] = {}
    for task in tasks:
        lab, pred, w = parse_model_outputs(
            task.label_name, task.prediction_name, task.weight_name, model_out
        )
        if pred is None or w is None:
            if lab.numel():
                labels[task.name] = lab
            continue
        if not is_empty_signals(lab, pred, w):
            labels[task.name], predictions[task.name], weights[task.name] = lab, pred, w
    return labels, predictions, weights, parse_required_inputs(model_out, required_inputs_list)
