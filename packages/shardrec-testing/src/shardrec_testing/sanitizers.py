"""Skip tests under a sanitizer-instrumented interpreter (TorchRec's `skip_if_asan` pair)."""

from __future__ import annotations

import ctypes
import functools
import unittest
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["sanitizer_active", "skip_if_asan", "skip_if_asan_class"]

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)

_REASON = "skipped: the interpreter runs under AddressSanitizer or ThreadSanitizer"


def sanitizer_active() -> bool:
    """Whether ASAN's or TSAN's runtime is linked into this process (its init symbol exists)."""
    process = ctypes.CDLL(None)
    return hasattr(process, "__asan_init") or hasattr(process, "__tsan_init")


def skip_if_asan(func: Callable[P, R]) -> Callable[P, R]:
    """Decorate a test function: it raises `unittest.SkipTest` when `sanitizer_active()`."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if sanitizer_active():
            raise unittest.SkipTest(_REASON)
        return func(*args, **kwargs)

    return wrapper


def skip_if_asan_class(cls: C) -> C:
    """Decorate a `unittest.TestCase` class: all its tests skip when `sanitizer_active()`."""
    if sanitizer_active():
        setattr(cls, "__unittest_skip__", True)  # noqa: B010  # unittest's class-skip flags
        setattr(cls, "__unittest_skip_why__", _REASON)  # noqa: B010
    return cls
