"""Checks on what `update` receives, with one host sync per batch.

A metric fed logits instead of probabilities, or labels of another batch, still produces a
number; the checks here turn those silent wrong answers into errors that name the values.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _shape(t: Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _require_tensor(name: str, value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return value


def check_int_at_least(name: str, value: object, least: int, meaning: str) -> int:
    """`value` if it is an int >= `least`, else ValueError naming it and what to pass."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an int >= {least}, got {value!r}; pass {meaning}")
    return value


def check_window_size(window_size: int) -> int:
    if isinstance(window_size, bool) or not isinstance(window_size, int) or window_size <= 0:
        raise ValueError(
            f"window_size must be a positive int (number of most recent samples per rank), "
            f"got {window_size!r}"
        )
    return window_size


def validated_inputs(
    predictions: object, labels: object, weights: object | None
) -> tuple[Tensor, Tensor, Tensor]:
    """`(predictions, labels, weights)` as float32 tensors of shape (B,) on the predictions' device.

    predictions: (B,) probabilities in [0, 1]; labels: (B,) of 0/1 (any dtype);
    weights: (B,) >= 0, or None for ones. Raises TypeError / ValueError naming the bad value.
    """
    p = _require_tensor("predictions", predictions)
    lab = _require_tensor("labels", labels)
    if p.dim() != 1:
        hint = "; use predictions.squeeze(-1)" if p.dim() == 2 and p.shape[-1] == 1 else ""
        raise ValueError(f"predictions must have shape (B,), got {_shape(p)}{hint}")
    if _shape(lab) != _shape(p):
        raise ValueError(
            f"predictions shape {_shape(p)} and labels shape {_shape(lab)} differ; "
            "both must be (B,)"
        )
    if p.is_complex() or not (p.is_floating_point()):
        raise TypeError(f"predictions must be a floating tensor, got dtype {p.dtype}")
    p = p.detach().to(torch.float32)
    lab = lab.detach().to(device=p.device, dtype=torch.float32)
    if weights is None:
        w = torch.ones_like(p)
    else:
        w = _require_tensor("weights", weights)
        if _shape(w) != _shape(p):
            raise ValueError(
                f"predictions shape {_shape(p)} and weights shape {_shape(w)} differ; "
                "both must be (B,)"
            )
        w = w.detach().to(device=p.device, dtype=torch.float32)
    if p.numel() == 0:
        return p, lab, w

    # One host sync for every check: the flags and extremes travel together.
    bad_p = ~((p >= 0) & (p <= 1))
    bad_l = (lab != 0) & (lab != 1)
    bad_w = ~(torch.isfinite(w) & (w >= 0))
    summary = torch.stack(
        [
            bad_p.any().float(),
            bad_l.any().float(),
            bad_w.any().float(),
        ]
    ).tolist()
    if summary[0]:
        if torch.isnan(p).any():
            raise ValueError("predictions contain NaN; check the model's output")
        raise ValueError(
            f"predictions must be probabilities in [0, 1], got min {p.min().item():.6g} and "
            f"max {p.max().item():.6g}: apply sigmoid to logits (torch.sigmoid(logits))"
        )
    if summary[1]:
        first = lab[bad_l][0].item()
        raise ValueError(f"labels must be 0 or 1, got {first!r}; binarize labels first")
    if summary[2]:
        first = w[bad_w][0].item()
        raise ValueError(f"weights must be finite and >= 0, got {first!r}")
    return p, lab, w
