"""Learning-rate warmup and decay schedules as an optimizer wrapper (TorchRec's WarmupOptimizer).

The schedule is a list of stages; stage `i` runs until iteration `stages[i].max_iters` and then
the next stage starts (after the last stage the multiplier is 1). At iteration `it` of a stage,
the learning rate is `lr * multiplier(it) * lr_scale`, where `it` counts from 0 at the *start of
training* (not of the stage), as in TorchRec:

| policy   | multiplier(it)                                              |
|----------|-------------------------------------------------------------|
| LINEAR   | `value + (1 - value) * it / max_iters`                      |
| CONSTANT | `value`                                                     |
| POLY     | `(1 - it / decay_iters) ** value`                           |
| STEP     | `value ** (it // decay_iters)`                              |
| COSINE   | `value + (1 - value) * 0.5 * (1 + cos(pi * (it % sgdr_period) / sgdr_period))` |
| INVSQRT  | `1 / sqrt(it)` (`it >= 1`)                                  |
| INTERPOLATE | `value + (end_value - value) * (it - s) / (max_iters - s)` (see below) |

s is `start_interpolating_iters`. `decay_iters` defaults to `max_iters` (POLY) or 1 (STEP).
The iteration count is saved in the optimizer state under the pseudo-parameter `"__warmup"`
and restored by `load_state_dict`.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

import torch

from shardrec_optim.keyed import KeyedOptimizer, OptimizerWrapper


class WarmupPolicy(enum.StrEnum):
    NONE = "none"
    LINEAR = "linear"
    CONSTANT = "constant"
    POLY = "poly"
    STEP = "step"
    INVSQRT = "inv_sqrt"
    COSINE = "cosine_annealing_warm_restarts"
    COSINE_ANNEALING_WARM_RESTARTS = "cosine_annealing_warm_restarts"  # TorchRec's name
    INTERPOLATE = "interpolate"

    @classmethod
    def _missing_(cls, value: object) -> WarmupPolicy | None:
        if isinstance(value, str):
            key = value.strip().upper()
            if key in cls.__members__:
                return cls.__members__[key]
            if key in ("COSINE_ANNEALING_WARM_RESTARTS", "COSINE_ANNEALING"):
                return cls.COSINE
        raise ValueError(
            f"unknown warmup policy {value!r}; valid: {', '.join(m.name for m in cls)}"
        )


# Positional fields, unlike our other configs: TorchRec's WarmupStage is a plain dataclass and
# ported code writes `WarmupStage(WarmupPolicy.LINEAR, max_iters=100)`.
@dataclasses.dataclass(frozen=True)
class WarmupStage:
    """One stage of a warmup schedule (see the module table). INTERPOLATE needs
    `start_interpolating_iters` (< `max_iters`) and `end_value`."""

    policy: WarmupPolicy = WarmupPolicy.LINEAR
    max_iters: int = 1
    value: float = 1.0
    lr_scale: float = 1.0
    decay_iters: int = -1
    sgdr_period: int = 1
    start_interpolating_iters: int | None = None
    end_value: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", WarmupPolicy(self.policy))
        if self.policy is WarmupPolicy.INTERPOLATE:
            start = self.start_interpolating_iters
            if start is None or self.end_value is None:
                raise ValueError(
                    "WarmupPolicy.INTERPOLATE needs start_interpolating_iters and end_value, got "
                    f"start_interpolating_iters={start!r}, end_value={self.end_value!r}"
                )
            if not 0 <= start < self.max_iters:
                raise ValueError(
                    f"start_interpolating_iters must be in [0, max_iters={self.max_iters}), "
                    f"got {start}"
                )
        if self.max_iters < 1:
            raise ValueError(f"max_iters must be >= 1, got {self.max_iters}")
        if self.sgdr_period < 1:
            raise ValueError(f"sgdr_period must be >= 1, got {self.sgdr_period}")
        if self.lr_scale < 0:
            raise ValueError(f"lr_scale must be >= 0, got {self.lr_scale}")
        if self.decay_iters <= 0:
            default = 1 if self.policy is WarmupPolicy.STEP else self.max_iters
            object.__setattr__(self, "decay_iters", default)

    def multiplier(self, it: int) -> float:
        """The learning-rate multiplier at global iteration `it`."""
        p = self.policy
        if p is WarmupPolicy.LINEAR:
            m = self.value + (1.0 - self.value) * it / self.max_iters
        elif p is WarmupPolicy.CONSTANT:
            m = self.value
        elif p is WarmupPolicy.POLY:
            m = math.pow(max(0.0, 1.0 - it / self.decay_iters), self.value)
        elif p is WarmupPolicy.STEP:
            m = math.pow(self.value, it // self.decay_iters)
        elif p is WarmupPolicy.INVSQRT:
            m = 1.0 / math.sqrt(max(it, 1))
        elif p is WarmupPolicy.COSINE:
            t = (it % self.sgdr_period) / self.sgdr_period
            m = self.value + (1.0 - self.value) * 0.5 * (1.0 + math.cos(math.pi * t))
        elif p is WarmupPolicy.INTERPOLATE:
            start, end = self.start_interpolating_iters, self.end_value
            assert start is not None and end is not None  # checked in __post_init__
            m = self.value + (end - self.value) * (it - start) / (self.max_iters - start)
        else:
            m = 1.0
        return m * self.lr_scale


class WarmupOptimizer(OptimizerWrapper):
    """Sets `param_group[lr_param]` from the schedule before each step.

    Args:
        optimizer: the KeyedOptimizer to drive.
        stages: consecutive stages with strictly increasing `max_iters`.
        lr: base learning rate the multipliers scale.
        lr_param: the param_group key to set.
        param_name: name of the pseudo-parameter holding the iteration count in state_dict.
    """

    def __init__(
        self,
        optimizer: KeyedOptimizer,
        stages: Sequence[WarmupStage],
        lr: float = 0.1,
        lr_param: str = "lr",
        param_name: str = "__warmup",
    ) -> None:
        super().__init__(optimizer)
        if lr < 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        previous = 0
        for s in stages:
            if s.max_iters <= previous:
                raise ValueError(f"stage max_iters must increase: {s.max_iters} follows {previous}")
            previous = s.max_iters
        self._stages = [*stages, WarmupStage(policy=WarmupPolicy.NONE, max_iters=1 << 62)]
        self._lr = lr
        self._lr_param = lr_param
        self._param_name = param_name
        self._warmup_param = torch.nn.Parameter(torch.empty(0), requires_grad=False)
        self._iter = 0
        self._stage = 0
        self._set_lr()

    @property
    def params(self) -> dict[str, torch.Tensor]:
        return {**self._optimizer.params, self._param_name: self._warmup_param}

    @property  # type: ignore[override]  # a view: the wrapped state plus the schedule's entry
    def state(self) -> MutableMapping[torch.Tensor, Any]:
        """The wrapped optimizer's state plus `{warmup_param: {"warmup": tensor([it, stage])}}`
        (where TorchRec keeps the schedule's position)."""
        return {**self._optimizer.state, self._warmup_param: self._warmup_state()}

    @state.setter
    def state(self, value: MutableMapping[torch.Tensor, Any]) -> None:
        self._optimizer.state = value

    def _warmup_state(self) -> dict[str, torch.Tensor]:
        return {"warmup": torch.tensor([self._iter, self._stage], dtype=torch.long)}

    @property
    def iteration(self) -> int:
        """Steps taken so far."""
        return self._iter

    def current_lr(self) -> float:
        """The learning rate the next step uses."""
        return self._lr * self._stages[self._stage].multiplier(self._iter)

    def _set_lr(self) -> None:
        lr = self.current_lr()
        for group in self.param_groups:
            group[self._lr_param] = lr

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]  # torch overloads on closure; one signature here
        loss = super().step(closure)
        self._iter += 1
        if self._iter > self._stages[self._stage].max_iters and self._stage + 1 < len(self._stages):
            self._stage += 1
        self._set_lr()
        return loss

    def state_dict(self) -> dict[str, object]:
        sd = self._optimizer.state_dict()
        state = dict(sd["state"])  # type: ignore[call-overload]  # "state" is a mapping
        state[self._param_name] = self._warmup_state()
        return {**sd, "state": state}

    def load_state_dict(self, state_dict: Mapping[str, object]) -> None:
        state = dict(state_dict["state"])  # type: ignore[call-overload]  # "state" is a mapping
        mine = state.pop(self._param_name, None)
        if mine is not None:
            self._iter, self._stage = (int(x) for x in mine["warmup"].tolist())
        self._optimizer.load_state_dict({**state_dict, "state": state})
        self._set_lr()

    def post_load_state_dict(self) -> None:
        self._set_lr()
