"""Argument checks shared by the collectives (programming errors: they raise at once)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from shardrec_collectives.env import ShardingEnv


def per_rank(env: ShardingEnv, name: str, xs: Sequence[object]) -> None:
    if len(xs) != env.world_size:
        raise ValueError(
            f"{name} needs one entry per rank ({env.world_size}), got {len(xs)}: {list(xs)}"
        )


def non_negative(name: str, xs: Sequence[int]) -> None:
    if any(x < 0 for x in xs):
        raise ValueError(f"{name} must be >= 0, got {list(xs)}")


def shape(name: str, t: torch.Tensor, expected: tuple[int, ...], meaning: str) -> None:
    if tuple(t.shape) != expected:
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {expected} ({meaning})")


def floating(name: str, t: torch.Tensor) -> None:
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
