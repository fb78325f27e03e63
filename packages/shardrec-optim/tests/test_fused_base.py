"""TorchRec's `torchrec.optim.fused` names: FusedOptimizer, EmptyFusedOptimizer,
FusedOptimizerModule."""

from __future__ import annotations

import torch
from torch import nn

from shardrec_optim import (
    EmptyFusedOptimizer,
    FusedOptimizer,
    FusedOptimizerModule,
    KeyedOptimizer,
)


def test_empty_fused_optimizer() -> None:
    opt = EmptyFusedOptimizer()
    assert isinstance(opt, FusedOptimizer) and isinstance(opt, KeyedOptimizer)
    assert opt.params == {} and opt.param_groups == []
    sd = opt.state_dict()
    assert sd["state"] == {}
    opt.load_state_dict(sd)
    assert opt.step(lambda: 2.5) == 2.5
    assert opt.step() is None
    opt.zero_grad()


def test_fused_optimizer_steps_nothing_and_keeps_state() -> None:
    torch.manual_seed(0)
    weight = nn.Parameter(torch.randn(3, 2))
    weight.grad = torch.ones(3, 2)
    momentum = torch.rand(3)
    opt = FusedOptimizer(
        {"t.weight": weight}, {weight: {"t.momentum1": momentum}}, [{"params": [weight], "lr": 0.1}]
    )
    before, grad = weight.detach().clone(), weight.grad.clone()
    calls: list[int] = []
    assert opt.step(lambda: float(calls.append(1) or 7.0)) == 7.0 and calls == [1]
    opt.zero_grad()
    assert torch.equal(weight.detach(), before)  # the update belongs to backward
    assert torch.equal(weight.grad, grad)
    sd = opt.state_dict()
    assert torch.equal(sd["state"]["t.weight"]["t.momentum1"], momentum)
    saved = momentum.clone()
    momentum.zero_()
    opt.load_state_dict({"state": {"t.weight": {"t.momentum1": saved}}, "param_groups": []})
    assert torch.equal(momentum, saved)  # loaded in place into the live state
    opt.param_groups[0]["lr"] = 0.5
    assert opt.param_groups[0]["lr"] == 0.5


class _WithFused(nn.Module):
    @property
    def fused_optimizer(self) -> KeyedOptimizer:
        return EmptyFusedOptimizer()


def test_fused_optimizer_module_protocol() -> None:
    assert isinstance(_WithFused(), FusedOptimizerModule)
    assert not isinstance(nn.Linear(2, 2), FusedOptimizerModule)
