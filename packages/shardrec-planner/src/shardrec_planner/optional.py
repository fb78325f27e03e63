"""`none_throws`: TorchRec's unwrap of an Optional (`torchrec.distributed.utils.none_throws`)."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def none_throws(optional: T | None, message: str = "Unexpected `None`") -> T:
    """`optional` itself; raises AssertionError with `message` when it is None (TorchRec's)."""
    if optional is None:
        raise AssertionError(message)
    return optional
