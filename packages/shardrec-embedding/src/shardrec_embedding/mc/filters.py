"""Admission filters for `MCHManagedCollisionModule` (TorchRec's `*_threshold_filter` functions).

An eviction policy may take a `threshold_filtering_func`: at each eviction round it receives the
counts of the distinct ids seen since the last round, `id_counts: (U,)`, and returns
`(mask: (U,) bool, threshold)`; only ids whose mask is true compete for a slot (and only their
counts are added to the ids already held).
"""

from __future__ import annotations

import torch

__all__ = [
    "average_threshold_filter",
    "dynamic_threshold_filter",
    "probabilistic_threshold_filter",
]


@torch.no_grad()
def dynamic_threshold_filter(
    id_counts: torch.Tensor,
    threshold_skew_multiplier: float = 10.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Admit ids seen more than `threshold_skew_multiplier` times the mean count.

    threshold = sum(id_counts) / U * threshold_skew_multiplier; admitted: count > threshold.
    """
    threshold = id_counts.sum() * (threshold_skew_multiplier / max(id_counts.numel(), 1))
    return id_counts > threshold, threshold


@torch.no_grad()
def average_threshold_filter(id_counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Admit ids seen more often than the mean count (strictly greater)."""
    threshold = id_counts.float().mean()
    return id_counts > threshold, threshold


@torch.no_grad()
def probabilistic_threshold_filter(
    id_counts: torch.Tensor,
    per_id_probability: float = 0.01,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Admit each id with probability 1 - (1 - per_id_probability) ** count.

    Each occurrence of an id is an independent chance `per_id_probability` of admission; the
    draws use torch's global generator (`torch.manual_seed` makes them repeatable).
    """
    scores = 1.0 - torch.pow(
        torch.full_like(id_counts, 1.0 - per_id_probability, dtype=torch.float), id_counts
    )
    threshold = torch.rand(id_counts.size(), device=id_counts.device)
    return scores > threshold, threshold
