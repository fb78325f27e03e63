"""Our value types cause no warning: constructing, tracing and exporting them emits nothing on
Python's `warnings` nor on torch's logging (torch's `is_fx_tracing` warning came from the
metaclass asking torch's `is_fx_tracing()`, once per process: issue 26)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.fx._symbolic_trace as fx_trace
from torch import nn

from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor, symbolic_trace


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def no_warnings() -> Iterator[None]:
    """Fails when the block emits a Python warning or a torch log record at WARNING or above.
    torch logs `is_fx_tracing`'s warning once per process (an lru_cache): it is reset first so
    that an earlier test cannot hide it."""
    fx_trace.is_fx_tracing_warning.cache_clear()
    handler = _Records()
    torch_log = logging.getLogger("torch")
    loggers = [torch_log, logging.getLogger(fx_trace.__name__)]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
    logged = [r.getMessage() for r in handler.records if r.levelno >= logging.WARNING]
    assert [str(w.message) for w in caught] == []
    assert logged == []


def _build(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    kjt = KeyedJaggedTensor(keys=["a", "b"], values=values, lengths=lengths)
    jt = JaggedTensor(values=values, lengths=lengths)
    kt = KeyedTensor(keys=["x"], length_per_key=[2], values=values.view(-1, 2).float())
    return kjt.values() + jt.values() + kt.values().sum().long()


class _Builds(nn.Module):
    def forward(self, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return _build(values, lengths)


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.arange(6), torch.tensor([1, 2, 0, 3])


def test_the_is_fx_tracing_check_sees_torchs_warning() -> None:
    """The check works: torch's own call is caught."""
    fx_trace.is_fx_tracing_warning.cache_clear()
    try:
        with no_warnings():
            fx_trace.is_fx_tracing()
    except AssertionError as err:
        assert "is_fx_tracing will return true" in str(err)
    else:
        raise AssertionError("torch's is_fx_tracing warning went unseen")


def _runs() -> dict[str, Callable[[], object]]:
    module = _Builds()
    return {
        "eager": lambda: _build(*_inputs()),
        "fx": lambda: symbolic_trace(module)(*_inputs()),
        "torch.fx": lambda: torch.fx.symbolic_trace(module)(*_inputs()),
        "export": lambda: torch.export.export(module, _inputs(), strict=False).module()(*_inputs()),
    }


def test_constructing_tracing_and_exporting_warn_nothing() -> None:
    expected = _build(*_inputs())
    for name, run in _runs().items():
        with no_warnings():
            got = run()
        assert isinstance(got, torch.Tensor) and torch.equal(got, expected), name
