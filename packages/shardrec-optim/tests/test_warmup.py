"""Warmup schedules against hand-computed learning rates."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from shardrec_optim import KeyedOptimizerWrapper, WarmupOptimizer, WarmupPolicy, WarmupStage


def _opt() -> KeyedOptimizerWrapper:
    p = torch.nn.Parameter(torch.zeros(3))
    return KeyedOptimizerWrapper({"p": p}, lambda ps: torch.optim.SGD(ps, lr=123.0))


def _lrs(stages: list[WarmupStage], steps: int, lr: float = 0.5) -> list[float]:
    opt = WarmupOptimizer(_opt(), stages, lr=lr)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
    return out


def test_linear_then_constant_then_default() -> None:
    stages = [
        WarmupStage(policy=WarmupPolicy.LINEAR, max_iters=4, value=0.2),
        WarmupStage(policy="constant", max_iters=6, value=0.3),  # type: ignore[arg-type]  # string accepted
    ]
    expected = [0.5 * (0.2 + 0.8 * i / 4) for i in range(5)] + [0.5 * 0.3] * 2 + [0.5] * 2
    assert _lrs(stages, 9) == pytest.approx(expected)


def test_poly_step_cosine() -> None:
    poly = [WarmupStage(policy=WarmupPolicy.POLY, max_iters=10, value=2.0)]
    assert _lrs(poly, 4, lr=1.0) == pytest.approx([(1 - i / 10) ** 2 for i in range(4)])
    step = [WarmupStage(policy=WarmupPolicy.STEP, max_iters=10, value=0.5, decay_iters=3)]
    assert _lrs(step, 7, lr=1.0) == pytest.approx([1, 1, 1, 0.5, 0.5, 0.5, 0.25])
    cos = [WarmupStage(policy=WarmupPolicy.COSINE, max_iters=10, value=0.1, sgdr_period=4)]
    want = [0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (i % 4) / 4)) for i in range(6)]
    assert _lrs(cos, 6, lr=1.0) == pytest.approx(want)
    assert WarmupPolicy("COSINE_ANNEALING_WARM_RESTARTS") is WarmupPolicy.COSINE


def test_lr_scale() -> None:
    stages = [WarmupStage(policy=WarmupPolicy.CONSTANT, max_iters=3, value=0.5, lr_scale=2.0)]
    assert _lrs(stages, 2, lr=0.1) == pytest.approx([0.1, 0.1])


def test_state_dict_restores_iteration() -> None:
    stages = [WarmupStage(policy=WarmupPolicy.LINEAR, max_iters=10, value=0.0)]
    opt = WarmupOptimizer(_opt(), stages, lr=1.0)
    for _ in range(4):
        opt.step()
    sd = copy.deepcopy(opt.state_dict())
    assert "__warmup" in sd["state"]  # type: ignore[operator]  # nested dict
    fresh = WarmupOptimizer(_opt(), stages, lr=1.0)
    fresh.load_state_dict(sd)
    assert fresh.iteration == 4
    assert fresh.param_groups[0]["lr"] == pytest.approx(0.4)


def test_bad_stages() -> None:
    with pytest.raises(ValueError, match=r"3 follows 5"):
        WarmupOptimizer(_opt(), [WarmupStage(max_iters=5), WarmupStage(max_iters=3)])
    with pytest.raises(ValueError, match=r"max_iters.*0"):
        WarmupStage(max_iters=0)
    with pytest.raises(ValueError, match=r"'exp'"):
        WarmupStage(policy="exp")  # type: ignore[arg-type]  # bad input under test
    with pytest.raises(ValueError, match=r"-1"):
        WarmupOptimizer(_opt(), [], lr=-1)


def test_interpolate_follows_the_formula_and_positional_policy() -> None:
    stage = WarmupStage(
        WarmupPolicy.INTERPOLATE,
        max_iters=20,
        value=0.2,
        start_interpolating_iters=8,
        end_value=0.6,
    )
    got = _lrs([stage], 21, lr=2.0)
    want = [2.0 * (0.2 + 0.4 * (i - 8) / 12) for i in range(21)]
    assert got == pytest.approx(want)
    assert WarmupPolicy.COSINE_ANNEALING_WARM_RESTARTS is WarmupPolicy.COSINE


def test_interpolate_needs_its_fields() -> None:
    with pytest.raises(ValueError, match=r"end_value=None"):
        WarmupStage(WarmupPolicy.INTERPOLATE, max_iters=5, start_interpolating_iters=1)
    with pytest.raises(ValueError, match=r"start_interpolating_iters.*got 5"):
        WarmupStage(WarmupPolicy.INTERPOLATE, 5, start_interpolating_iters=5, end_value=1.0)


def test_state_view_holds_the_schedule_position() -> None:
    opt = WarmupOptimizer(_opt(), [WarmupStage(max_iters=3)], lr=1.0)
    for _ in range(5):
        opt.step()
    entries = [s["warmup"] for s in opt.state.values() if "warmup" in s]
    assert [e.tolist() for e in entries] == [[5, 1]]
