"""SemisyncOptimizer + DiLoCo against a hand-written loop of the same schedule on dense
torch.optim (the reference), one process; the 2-rank gloo check is in test_semi_sync_dist.py."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from shardrec_optim import (
    CombinedOptimizer,
    DiLoCo,
    FusedOptimizer,
    KeyedOptimizerWrapper,
    SemisyncOptimizer,
)
from shardrec_optim.semi_sync import (
    SEMISYNC_GLOBAL_STEP_COUNTER_KEY,
    SEMISYNC_LOCAL_STEP_COUNTER_KEY,
)

LocalFactory = Callable[[list[Tensor]], torch.optim.Optimizer]


def _adam(ps: list[Tensor]) -> torch.optim.Optimizer:
    return torch.optim.Adam(ps, lr=0.05)


def _sgd_momentum(ps: list[Tensor]) -> torch.optim.Optimizer:
    return torch.optim.SGD(ps, lr=0.1, momentum=0.5)


def _params(seed: int) -> dict[str, torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return {
        "dense.weight": torch.nn.Parameter(torch.randn(4, 3, generator=g, dtype=torch.float64)),
        "dense.bias": torch.nn.Parameter(torch.randn(3, generator=g, dtype=torch.float64)),
    }


def _grads(seed: int, steps: int, params: dict[str, torch.nn.Parameter]) -> list[list[Tensor]]:
    g = torch.Generator().manual_seed(seed + 1)
    return [
        [torch.randn(p.shape, generator=g, dtype=p.dtype) for p in params.values()]
        for _ in range(steps)
    ]


def _semisync(
    params: dict[str, torch.nn.Parameter],
    local: LocalFactory,
    n: int,
    outer: dict[str, float | bool],
) -> SemisyncOptimizer:
    return SemisyncOptimizer(
        global_params=list(params.values()),
        optimizer=KeyedOptimizerWrapper(params, local),
        global_optimizer=KeyedOptimizerWrapper(
            params,
            lambda ps: DiLoCo(ps, all_reduce_mean=None, **outer),  # type: ignore[arg-type]  # test kwargs
        ),
        num_local_steps=n,
    )


def _run(
    opt: torch.optim.Optimizer, params: dict[str, torch.nn.Parameter], grads: list[list[Tensor]]
) -> None:
    for step in grads:
        for p, g in zip(params.values(), step, strict=True):
            p.grad = g.clone()
        opt.step()
        opt.zero_grad()


def _reference(
    params: dict[str, torch.nn.Parameter],
    local: LocalFactory,
    n: int,
    outer: dict[str, float | bool],
    grads: list[list[Tensor]],
) -> list[Tensor]:
    """The schedule written out: torch's optimizer every step; every n-th step an outer
    torch.optim.SGD step on a kept global copy with grad = global - local, then local = global."""
    ps = [p.detach().clone().requires_grad_(True) for p in params.values()]
    glob = [p.detach().clone().requires_grad_(True) for p in ps]
    inner = local(ps)
    outer_opt = torch.optim.SGD(glob, **outer)  # type: ignore[arg-type]  # lr/momentum/nesterov
    for t, step in enumerate(grads, start=1):
        for p, g in zip(ps, step, strict=True):
            p.grad = g.clone()
        inner.step()
        if t % n == 0:
            with torch.no_grad():
                for p, gp in zip(ps, glob, strict=True):
                    gp.grad = gp - p
                outer_opt.step()
                for p, gp in zip(ps, glob, strict=True):
                    p.copy_(gp)
    return [p.detach() for p in ps]


OUTERS: list[dict[str, float | bool]] = [
    {"lr": 0.7, "momentum": 0.9, "nesterov": True},
    {"lr": 0.5, "momentum": 0.3, "nesterov": False},
    {"lr": 1.0, "momentum": 0.0, "nesterov": False},
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n", [1, 3, 4])
@pytest.mark.parametrize("outer", OUTERS)
@pytest.mark.parametrize("local", [_adam, _sgd_momentum])
def test_matches_reference_loop(
    seed: int, n: int, outer: dict[str, float | bool], local: LocalFactory
) -> None:
    params = _params(seed)
    grads = _grads(seed, 11, params)  # 11: ends mid-period for n = 3 and n = 4
    expected = _reference(params, local, n, outer, grads)
    opt = _semisync(params, local, n, outer)
    _run(opt, params, grads)
    for got, want in zip(params.values(), expected, strict=True):
        torch.testing.assert_close(got.detach(), want)
    assert int(opt.params[SEMISYNC_LOCAL_STEP_COUNTER_KEY]) == 11
    assert int(opt.params[SEMISYNC_GLOBAL_STEP_COUNTER_KEY]) == 11 // n


@pytest.mark.parametrize("local", [_adam, _sgd_momentum])
def test_n1_plain_averaging_is_the_plain_optimizer(local: LocalFactory) -> None:
    """N = 1 with lr 1, no momentum: global = global - (global - local) = local, every step."""
    params, plain = _params(5), _params(5)
    grads = _grads(5, 7, params)
    opt = _semisync(params, local, 1, {"lr": 1.0, "momentum": 0.0, "nesterov": False})
    _run(opt, params, grads)
    _run(KeyedOptimizerWrapper(plain, local), plain, grads)
    for got, want in zip(params.values(), plain.values(), strict=True):
        torch.testing.assert_close(got.detach(), want.detach())


def test_schedule_calls_global_step_every_n() -> None:
    params = _params(3)
    opt = _semisync(params, _sgd_momentum, 3, OUTERS[0])
    calls: list[int] = []
    diloco = opt._global_optimizer._optimizer  # type: ignore[attr-defined]  # the DiLoCo inside
    original = diloco.global_step

    def spy(counter: Tensor, closure: object) -> None:
        calls.append(int(counter))
        original(counter, closure)

    diloco.global_step = spy
    _run(opt, params, _grads(3, 10, params))
    assert calls == [3, 6, 9]


@pytest.mark.parametrize("stop", [2, 4, 6])
def test_state_dict_round_trip_mid_schedule(stop: int) -> None:
    """Save after `stop` of 11 steps (n = 4), load into a fresh optimizer on copied params,
    finish both: identical parameters and counters."""
    params = _params(7)
    grads = _grads(7, 11, params)
    opt = _semisync(params, _adam, 4, OUTERS[0])
    opt.save_param_groups(True)
    _run(opt, params, grads[:stop])
    saved = copy.deepcopy(opt.state_dict())
    resumed_params = {k: torch.nn.Parameter(p.detach().clone()) for k, p in params.items()}
    resumed = _semisync(resumed_params, _adam, 4, {"lr": 0.1, "momentum": 0.2, "nesterov": False})
    resumed.save_param_groups(True)
    resumed.load_state_dict(saved)
    assert resumed.param_groups[1]["lr"] == 0.7 and resumed.param_groups[1]["momentum"] == 0.9
    _run(opt, params, grads[stop:])
    _run(resumed, resumed_params, grads[stop:])
    for k in params:
        torch.testing.assert_close(resumed_params[k].detach(), params[k].detach())
    for key in (SEMISYNC_LOCAL_STEP_COUNTER_KEY, SEMISYNC_GLOBAL_STEP_COUNTER_KEY):
        assert int(resumed.params[key]) == int(opt.params[key])


def test_state_dict_layout_is_torchrecs() -> None:
    params = _params(8)
    opt = _semisync(params, _sgd_momentum, 2, OUTERS[0])
    _run(opt, params, _grads(8, 3, params))
    state = opt.state_dict()["state"]
    assert isinstance(state, dict) and set(state) == set(params)
    entry = state["dense.weight"]
    assert set(entry) == {
        "semi_sync_local_momentum_buffer",
        "semi_sync_global_global_param",
        "semi_sync_global_momentum_buffer",
        SEMISYNC_GLOBAL_STEP_COUNTER_KEY,
        SEMISYNC_LOCAL_STEP_COUNTER_KEY,
    }
    assert (
        int(entry[SEMISYNC_LOCAL_STEP_COUNTER_KEY]),
        int(entry[SEMISYNC_GLOBAL_STEP_COUNTER_KEY]),
    ) == (3, 1)
    assert set(opt.params) == {
        *params,
        SEMISYNC_GLOBAL_STEP_COUNTER_KEY,
        SEMISYNC_LOCAL_STEP_COUNTER_KEY,
    }
    assert len(opt.param_groups) == 2
    assert "semi_sync_local_optim" in repr(opt) and "semi_sync_global_optim" in repr(opt)
    prefixed = SemisyncOptimizer._extract_prefixed_state(entry, "semi_sync_global_")
    assert set(prefixed) == {"global_param", "momentum_buffer"}


def test_inside_combined_optimizer_with_combined_local() -> None:
    """A CombinedOptimizer as the local optimizer (two parts, two torch optimizers), and the
    SemisyncOptimizer itself as a part of a CombinedOptimizer: same numbers as the reference
    over the same parameters, and a state_dict round trip through the outer CombinedOptimizer."""
    params = _params(9)
    grads = _grads(9, 8, params)
    expected = _reference(params, _sgd_momentum, 3, OUTERS[1], grads)
    w, b = params["dense.weight"], params["dense.bias"]
    local = CombinedOptimizer(
        [
            ("w", KeyedOptimizerWrapper({"weight": w}, _sgd_momentum)),
            ("b", KeyedOptimizerWrapper({"bias": b}, _sgd_momentum)),
        ]
    )
    glob = KeyedOptimizerWrapper(
        {"w.weight": w, "b.bias": b},
        lambda ps: DiLoCo(ps, all_reduce_mean=None, **OUTERS[1]),  # type: ignore[arg-type]  # test kwargs
    )
    semi = SemisyncOptimizer([w, b], local, glob, num_local_steps=3)
    outer = CombinedOptimizer([("semi", semi)])
    _run(outer, params, grads[:5])
    saved = copy.deepcopy(outer.state_dict())
    assert "semi.w.weight" in saved["state"]  # type: ignore[operator]  # a dict
    _run(outer, params, grads[5:])
    for got, want in zip(params.values(), expected, strict=True):
        torch.testing.assert_close(got.detach(), want)
    outer.load_state_dict(saved)
    assert int(semi.params[SEMISYNC_LOCAL_STEP_COUNTER_KEY]) == 5


def test_zero_grad_reaches_both() -> None:
    params = _params(4)
    opt = _semisync(params, _sgd_momentum, 2, OUTERS[0])
    for p in params.values():
        p.grad = torch.ones_like(p)
    opt.zero_grad()
    assert all(p.grad is None for p in params.values())


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "4"])
def test_bad_num_local_steps(bad: object) -> None:
    params = _params(0)
    with pytest.raises(ValueError, match=rf"num_local_steps={bad!r}"):
        _semisync(params, _adam, bad, OUTERS[0])  # type: ignore[arg-type]  # the bad value


def test_empty_global_params() -> None:
    params = _params(0)
    with pytest.raises(ValueError, match="global_params is empty") as info:
        SemisyncOptimizer(
            [],
            KeyedOptimizerWrapper(params, _adam),
            KeyedOptimizerWrapper(params, lambda ps: DiLoCo(ps, all_reduce_mean=None)),
        )
    assert isinstance(info.value, IndexError)  # what TorchRec's raises


def test_global_optimizer_without_global_step() -> None:
    params = _params(0)
    with pytest.raises(
        ValueError, match=r"KeyedOptimizerWrapper has no _optimizer.global_step.*DiLoCo"
    ):
        SemisyncOptimizer(
            list(params.values()),
            KeyedOptimizerWrapper(params, _adam),
            KeyedOptimizerWrapper(params, _sgd_momentum),
        )


def test_mismatched_param_names() -> None:
    params, other = _params(0), _params(1)
    with pytest.raises(ValueError, match=r"'dense\.weight' names different tensors"):
        SemisyncOptimizer(
            list(params.values()),
            KeyedOptimizerWrapper(params, _adam),
            KeyedOptimizerWrapper(other, lambda ps: DiLoCo(ps, all_reduce_mean=None)),
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": 0.0}, r"lr=0.0.*> 0"),
        ({"lr": -1.0}, r"lr=-1.0"),
        ({"momentum": 1.0}, r"momentum=1.0.*\[0, 1\)"),
        ({"momentum": 0.0}, r"nesterov=True needs momentum > 0"),
    ],
)
def test_bad_diloco_arguments(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DiLoCo([torch.nn.Parameter(torch.zeros(2))], all_reduce_mean=None, **kwargs)


def test_bad_state_dicts() -> None:
    params = _params(2)
    opt = _semisync(params, _sgd_momentum, 2, OUTERS[0])
    _run(opt, params, _grads(2, 2, params))
    good = copy.deepcopy(opt.state_dict())
    state = good["state"]
    assert isinstance(state, dict)
    no_counter = copy.deepcopy(good)
    for entry in no_counter["state"].values():  # type: ignore[attr-defined]  # a dict
        del entry[SEMISYNC_LOCAL_STEP_COUNTER_KEY]
    with pytest.raises(ValueError, match="lacks the step counter"):
        opt.load_state_dict(no_counter)
    stray = copy.deepcopy(good)
    stray["state"]["dense.bias"]["momentum_buffer"] = torch.zeros(3)  # type: ignore[index]  # a dict
    with pytest.raises(ValueError, match="'momentum_buffer' has neither prefix"):
        opt.load_state_dict(stray)
    unknown = {"state": {**state, "nope": {}}}
    with pytest.raises(ValueError, match=r"unknown parameters \['nope'\]"):
        opt.load_state_dict(unknown)


def test_local_with_a_fused_part() -> None:
    """A fused table's optimizer (updates in backward, `step()` a no-op) as part of the local
    CombinedOptimizer: its weight still takes part in the global step. The "backward" update is
    an SGD step written here; the reference applies the same SGD with torch.optim."""
    params = _params(12)
    grads = _grads(12, 9, params)
    expected = _reference(params, lambda ps: torch.optim.SGD(ps, lr=0.1), 3, OUTERS[0], grads)
    w, b = params["dense.weight"], params["dense.bias"]
    local = CombinedOptimizer(
        [
            ("fused", FusedOptimizer({"t.weight": w}, {}, [{"params": [w], "lr": 0.1}])),
            ("dense", KeyedOptimizerWrapper({"bias": b}, lambda ps: torch.optim.SGD(ps, lr=0.1))),
        ]
    )
    glob = KeyedOptimizerWrapper(
        {"fused.t.weight": w, "dense.bias": b},
        lambda ps: DiLoCo(ps, all_reduce_mean=None),
    )
    opt = SemisyncOptimizer([w, b], local, glob, num_local_steps=3)
    for gw, gb in grads:
        with torch.no_grad():
            w.sub_(0.1 * gw)  # what a fused backward does to the rows
        b.grad = gb.clone()
        opt.step()
        opt.zero_grad()
    for got, want in zip((w, b), expected, strict=True):
        torch.testing.assert_close(got.detach(), want)


def test_merged_views_refuse_assignment_and_say_what_to_do() -> None:
    params = _params(0)
    semi = _semisync(params, _sgd_momentum, 2, OUTERS[0])
    combined = CombinedOptimizer([("semi", semi)])
    cases: list[tuple[torch.optim.Optimizer, str]] = [
        (semi, "SemisyncOptimizer.state is a merged view; use load_state_dict"),
        (combined, "CombinedOptimizer.state is a merged view; set it on the parts"),
    ]
    for opt, message in cases:
        with pytest.raises(AttributeError, match=message):
            opt.state = {}  # type: ignore[assignment]  # the assignment under test
        name = type(opt).__name__
        with pytest.raises(AttributeError, match=rf"{name}.param_groups is a merged view"):
            opt.param_groups = []
    _run(combined, params, _grads(0, 2, params))
    assert len(combined.state) == len(semi.state) == len(params)
    assert combined.param_groups == semi.param_groups
