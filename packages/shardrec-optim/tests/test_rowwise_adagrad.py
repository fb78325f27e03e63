"""RowWiseAdagrad against a naive per-row loop of its documented update."""

from __future__ import annotations

import pytest
import torch

from shardrec_optim import RowWiseAdagrad


def _reference(w: torch.Tensor, grads: list[torch.Tensor], **hp: float) -> torch.Tensor:
    w = w.clone()
    acc = [hp.get("initial_accumulator_value", 0.0)] * w.shape[0]
    for t, g in enumerate(grads, start=1):
        g = g + hp.get("weight_decay", 0.0) * w
        clr = hp.get("lr", 1e-2) / (1 + (t - 1) * hp.get("lr_decay", 0.0))
        for r in range(w.shape[0]):
            acc[r] += float((g[r] ** 2).mean())
            w[r] -= clr * g[r] / (acc[r] ** 0.5 + hp.get("eps", 1e-10))
    return w


@pytest.mark.parametrize(
    "hp",
    [{}, {"lr": 0.3, "weight_decay": 0.1}, {"lr_decay": 0.5, "initial_accumulator_value": 0.2}],
)
def test_matches_the_per_row_formula(hp: dict[str, float]) -> None:
    gen = torch.Generator().manual_seed(len(hp))
    w0 = torch.randn(5, 3, generator=gen)
    grads = [torch.randn(5, 3, generator=gen) for _ in range(4)]
    p = torch.nn.Parameter(w0.clone())
    opt = RowWiseAdagrad([p], **hp)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    torch.testing.assert_close(p.detach(), _reference(w0, grads, **hp))
    assert opt.state[p]["sum"].shape == (5, 1)


def test_equals_adagrad_when_rows_are_uniform() -> None:
    a = torch.nn.Parameter(torch.arange(4.0).repeat_interleave(3).view(4, 3))
    b = torch.nn.Parameter(a.detach().clone())
    ours, ref = RowWiseAdagrad([a], lr=0.1), torch.optim.Adagrad([b], lr=0.1)
    for step in range(3):
        grad = torch.full((4, 3), float(step + 1)) * torch.tensor([[1.0], [2.0], [0.0], [-1.0]])
        a.grad, b.grad = grad.clone(), grad.clone()
        ours.step()
        ref.step()
        torch.testing.assert_close(a, b)


def test_maximize_and_rows_without_gradients() -> None:
    p = torch.nn.Parameter(torch.zeros(2, 2))
    q = torch.nn.Parameter(torch.ones(3))
    opt = RowWiseAdagrad([p, q], lr=1.0, maximize=True)
    p.grad = torch.ones(2, 2)
    opt.step()
    assert torch.all(p > 0)
    assert torch.equal(q.detach(), torch.ones(3))


def test_bad_input() -> None:
    with pytest.raises(ValueError, match=r"lr must be >= 0, got -1"):
        RowWiseAdagrad([torch.nn.Parameter(torch.zeros(2, 2))], lr=-1)
    with pytest.raises(ValueError, match=r"0-d"):
        RowWiseAdagrad([torch.nn.Parameter(torch.tensor(1.0))])
    p = torch.nn.Parameter(torch.zeros(3, 2))
    opt = RowWiseAdagrad([p])
    p.grad = torch.zeros(3, 2).to_sparse()
    with pytest.raises(TypeError, match=r"dense gradients"):
        opt.step()


def test_applied_in_backward_matches_stepping_it_and_maps_to_the_fused_spec() -> None:
    from shardrec_optim import EmbOptimType, apply_optimizer_in_backward, fused_spec_of_param

    w0 = torch.randn(4, 3, generator=torch.Generator().manual_seed(5))
    a, b = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    apply_optimizer_in_backward(RowWiseAdagrad, [a], {"lr": 0.2, "eps": 1e-8})
    ref = RowWiseAdagrad([b], lr=0.2, eps=1e-8)
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(6))
    for _ in range(3):
        (x @ a).pow(2).sum().backward()  # the update runs inside backward
        (x @ b).pow(2).sum().backward()
        ref.step()
        ref.zero_grad()
        torch.testing.assert_close(a.detach(), b.detach())
    spec = fused_spec_of_param(a)
    assert spec is not None and spec.optimizer is EmbOptimType.EXACT_ROWWISE_ADAGRAD
