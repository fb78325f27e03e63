"""GradientClippingOptimizer against torch.nn.utils' clipping and the p-norm formula."""

from __future__ import annotations

import math

import pytest
import torch

from shardrec_optim import (
    GradientClipping,
    GradientClippingOptimizer,
    KeyedOptimizer,
    KeyedOptimizerWrapper,
)
from shardrec_optim.clipping import _batch_cal_norm, _compute_total_norm, _get_grads


class _NoStep(KeyedOptimizer):
    """Leaves the parameters alone, so the test reads the clipped gradients."""

    def step(self, closure: object = None) -> None:  # type: ignore[override]  # test double
        return None


def _params(grads: list[list[float]]) -> list[torch.nn.Parameter]:
    out = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros(len(g)))
        p.grad = torch.tensor(g)
        out.append(p)
    return out


def _clipper(params: list[torch.nn.Parameter], **kw: object) -> GradientClippingOptimizer:
    inner = _NoStep({f"p{i}": p for i, p in enumerate(params)}, {}, [{"params": params}])
    return GradientClippingOptimizer(inner, **kw)  # type: ignore[arg-type]  # kwargs under test


@pytest.mark.parametrize("norm_type", [1.0, 2.0, 3.0, math.inf])
def test_norm_clipping_matches_torch(norm_type: float) -> None:
    gen = torch.Generator().manual_seed(int(norm_type) if math.isfinite(norm_type) else 9)
    grads = [torch.randn(5, generator=gen).tolist(), torch.randn(3, generator=gen).tolist()]
    ours, ref = _params(grads), _params(grads)
    opt = _clipper(ours, clipping=GradientClipping.NORM, max_gradient=0.3, norm_type=norm_type)
    opt.step()
    want = torch.nn.utils.clip_grad_norm_(ref, 0.3, norm_type=norm_type)
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a.grad, b.grad)
    assert opt.last_total_grad_norm is not None
    torch.testing.assert_close(opt.last_total_grad_norm, want)


def test_zero_bound_zeroes_gradients_and_empty_grads_are_skipped() -> None:
    params = _params([[1.0, -2.0], []])
    _clipper(params, clipping="norm", max_gradient=0.0).step()
    assert torch.equal(params[0].grad, torch.zeros(2))  # type: ignore[arg-type]  # set above
    params = _params([[3.0, 4.0], []])
    opt = _clipper(params, clipping="norm", max_gradient=1.0, norm_type="inf")
    opt.step()
    torch.testing.assert_close(params[0].grad, torch.tensor([0.75, 1.0]), atol=1e-6, rtol=0)
    only_empty = _params([[]])
    opt = _clipper(only_empty, clipping="norm", max_gradient=1.0, norm_type=math.inf)
    opt.step()
    assert opt.last_total_grad_norm is None


@pytest.mark.parametrize("clipping", [GradientClipping.VALUE, GradientClipping.NONE])
def test_track_grad_norm_without_norm_clipping(clipping: GradientClipping) -> None:
    params = _params([[3.0, -4.0], [12.0]])
    opt = _clipper(params, clipping=clipping, max_gradient=2.0, track_grad_norm=True)
    opt.step()
    assert opt.last_total_grad_norm is not None
    assert opt.last_total_grad_norm.item() == pytest.approx(13.0)
    want = [[2.0, -2.0], [2.0]] if clipping is GradientClipping.VALUE else [[3.0, -4.0], [12.0]]
    assert [p.grad.tolist() for p in params] == want  # type: ignore[union-attr]  # set above


def test_meta_parameters_skip_clipping() -> None:
    p = torch.nn.Parameter(torch.zeros(2, device="meta"))
    opt = _clipper([p], clipping="norm", max_gradient=0.0)
    opt.step()
    assert opt.last_total_grad_norm is None


def test_clip_grad_norm_scales_by_the_documented_coefficient() -> None:
    params = _params([[6.0, 8.0]])
    opt = _clipper(params, clipping="norm", max_gradient=5.0)
    total = opt.clip_grad_norm_()
    assert total.item() == pytest.approx(10.0)
    coef = 5.0 / (10.0 + 1e-6)
    torch.testing.assert_close(params[0].grad, torch.tensor([6.0, 8.0]) * coef)


def test_norm_helpers_follow_the_formula() -> None:
    grads = [torch.tensor([1.0, -2.0]), torch.tensor([]), torch.tensor([3.0])]
    assert _batch_cal_norm(grads, 1.0, 2.0).item() == pytest.approx(14.0)  # sum of squares
    assert _batch_cal_norm(grads, 1.0, 1.0).item() == pytest.approx(6.0)
    assert _batch_cal_norm(grads, 1.0, math.inf).item() == pytest.approx(3.0)
    assert _batch_cal_norm([torch.tensor([])], 1.0, math.inf).item() == -math.inf
    total = _compute_total_norm(grads[:1], {(): grads[2:]}, 2.0)
    assert total.item() == pytest.approx(math.sqrt(14.0))
    assert _compute_total_norm([], {}, 2.0).item() == 0.0
    params = _params([[1.0], []])
    params.append(torch.nn.Parameter(torch.zeros(1)))
    assert [g.tolist() for g in _get_grads(params)] == [[1.0]]


@pytest.mark.parametrize("clipping", [GradientClipping.NORM, GradientClipping.VALUE])
def test_clipped_sgd_step_matches_torch_clipping_then_sgd(clipping: GradientClipping) -> None:
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(
            torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
        )
    m, ref = models
    sgd = KeyedOptimizerWrapper(dict(m.named_parameters()), lambda p: torch.optim.SGD(p, lr=0.1))
    opt = GradientClippingOptimizer(sgd, clipping=clipping, max_gradient=0.05)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    for model in (m, ref):
        model(x).pow(2).sum().backward()
    if clipping is GradientClipping.NORM:
        torch.nn.utils.clip_grad_norm_(list(ref.parameters()), 0.05)
    else:
        torch.nn.utils.clip_grad_value_(list(ref.parameters()), 0.05)
    opt.step()
    ref_opt.step()
    for a, b in zip(m.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    clipped = torch.cat([p.grad.flatten() for p in m.parameters() if p.grad is not None])
    if clipping is GradientClipping.VALUE:
        assert float(clipped.abs().max()) <= 0.05 + 1e-6
    else:
        assert float(clipped.norm()) <= 0.05 + 1e-6
        assert opt.last_total_grad_norm is not None


def test_bad_bounds() -> None:
    with pytest.raises(ValueError, match=r"max_gradient.*-0.5"):
        _clipper(_params([[1.0]]), clipping="norm", max_gradient=-0.5)
    with pytest.raises(ValueError, match=r"'sideways'"):
        _clipper(_params([[1.0]]), clipping="sideways")
    with pytest.raises(ValueError, match=r"norm_type.*0"):
        _clipper(_params([[1.0]]), clipping="norm", norm_type=0.0)
