"""Seeded randomness for tests: the same inputs on every run and, where wanted, on every rank."""

from __future__ import annotations

import functools
import hashlib
import random
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import torch

P = ParamSpec("P")
R = TypeVar("R")


def seed_from(*parts: object) -> int:
    """A 63-bit seed derived from `parts` (stable across processes, unlike `hash`)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def seeded_generator(*parts: object) -> torch.Generator:
    """A CPU `torch.Generator` seeded from `parts`, e.g. `seeded_generator("kjt", rank, case)`."""
    gen = torch.Generator()
    gen.manual_seed(seed_from(*parts))
    return gen


def seed_everything(seed: int) -> None:
    """Seed Python's `random` and torch's default generators (CPU and, if present, CUDA)."""
    random.seed(seed)
    torch.manual_seed(seed)


def seed_and_log(func: Callable[P, R]) -> Callable[P, R]:
    """TorchRec's test decorator: seed from the clock, print the seed, then call `func` (a
    failing run is reproduced with `seed_everything(<printed seed>)`)."""

    @functools.wraps(func)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        seed = int(time.time() * 1000) % (1 << 31)
        print(f"Using random seed: {seed}")
        seed_everything(seed)
        return func(*args, **kwargs)

    return wrapped


def random_lengths(
    count: int, max_length: int, gen: torch.Generator, *, empty_fraction: float = 0.2
) -> torch.Tensor:
    """`count` bag lengths in `[0, max_length]`, about `empty_fraction` of them forced to 0.

    Returns: (count,) int64.
    """
    lengths = torch.randint(0, max_length + 1, (count,), generator=gen)
    empty = torch.rand(count, generator=gen) < empty_fraction
    return lengths.masked_fill(empty, 0)
