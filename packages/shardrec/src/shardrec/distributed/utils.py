"""Distributed helpers (TorchRec path `torchrec.distributed.utils`): `none_throws`."""

from typing import TypeVar

T = TypeVar("T")


def none_throws(optional: T | None, message: str = "Unexpected `None`") -> T:
    """`optional` itself; raises AssertionError with `message` when it is None (TorchRec's)."""
    if optional is None:
        raise AssertionError(message)
    return optional


__all__ = ["none_throws"]
