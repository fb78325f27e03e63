"""lazy_apply and LazyModuleExtensionMixin on torch lazy modules."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.parameter import UninitializedParameter

from shardrec_models.lazy_extension import LazyModuleExtensionMixin, lazy_apply


class _LazyScale(LazyModuleExtensionMixin, nn.Module):
    """A per-column scale whose width comes from the first input; `offset` is a kwarg."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = UninitializedParameter()

    def initialize_parameters(self, x: torch.Tensor, offset: float = 0.0) -> None:
        self.scale.materialize((x.shape[1],))
        with torch.no_grad():
            self.scale.fill_(1.0 + offset)

    def forward(self, x: torch.Tensor, offset: float = 0.0) -> torch.Tensor:
        return x * self.scale + offset


def test_keyword_arguments_reach_initialize_and_apply_waits() -> None:
    module = _LazyScale()
    with pytest.raises(RuntimeError, match="has not been initialized"):
        module.apply(lambda m: None)
    out = module(torch.ones(2, 3), offset=0.5)
    assert module.scale.shape == (3,)
    assert torch.equal(out, torch.full((2, 3), 2.0))
    module.apply(lambda m: None)  # initialized: no error


def test_lazy_apply_runs_once_after_the_first_forward() -> None:
    calls: list[str] = []

    @torch.no_grad()
    def fill(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            m.weight.fill_(1.0)
            calls.append(type(m).__name__)

    seq = nn.Sequential(nn.LazyLinear(2), nn.LazyLinear(1))
    lazy_apply(seq, fill)
    assert calls == []
    seq(torch.randn(4, 5))
    assert calls == ["Linear", "Linear"]
    assert torch.equal(seq[0].weight, torch.ones(2, 5))
    seq(torch.randn(4, 5))
    assert len(calls) == 2
