"""`FusedOptimSpec`: which optimizer a fused embedding lookup applies in backward, with its options.

Built directly, or from a TorchRec-style `fused_params` dict::

    FusedOptimSpec.from_fused_params(
        {"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": 0.02, "eps": 0.002}
    )

Each optimizer reads a fixed set of options (table below); setting any other option to a
non-default value is an error instead of being silently ignored, as fbgemm's TBE would do.

| optimizer                          | options it reads                        |
|------------------------------------|-----------------------------------------|
| SGD, EXACT_SGD                     | learning_rate                           |
| EXACT_ADAGRAD                      | learning_rate, eps                      |
| (EXACT_)ROWWISE_ADAGRAD            | learning_rate, eps, weight_decay(_mode) |
| ADAM, PARTIAL_ROWWISE_ADAM, LAMB,  | learning_rate, eps, beta1, beta2,       |
| PARTIAL_ROWWISE_LAMB               | weight_decay                            |
| LARS_SGD                           | learning_rate, eta, momentum,           |
|                                    | weight_decay                            |
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from shardrec_optim.types import EmbOptimType, WeightDecayMode

_ADAM_LIKE = frozenset({"eps", "beta1", "beta2", "weight_decay"})
SUPPORTED_OPTIONS: Mapping[EmbOptimType, frozenset[str]] = {
    EmbOptimType.SGD: frozenset(),
    EmbOptimType.EXACT_SGD: frozenset(),
    EmbOptimType.EXACT_ADAGRAD: frozenset({"eps"}),
    EmbOptimType.EXACT_ROWWISE_ADAGRAD: frozenset({"eps", "weight_decay", "weight_decay_mode"}),
    EmbOptimType.ROWWISE_ADAGRAD: frozenset({"eps", "weight_decay", "weight_decay_mode"}),
    EmbOptimType.ADAM: _ADAM_LIKE,
    EmbOptimType.PARTIAL_ROWWISE_ADAM: _ADAM_LIKE,
    EmbOptimType.LAMB: _ADAM_LIKE,
    EmbOptimType.PARTIAL_ROWWISE_LAMB: _ADAM_LIKE,
    EmbOptimType.LARS_SGD: frozenset({"eta", "momentum", "weight_decay"}),
}
"""Options (besides `learning_rate`) that each optimizer reads."""

# TorchRec/fbgemm `fused_params` keys that configure the lookup, not the optimizer. They are
# accepted by `from_fused_params` and returned to the caller untouched.
NON_OPTIMIZER_FUSED_PARAMS: frozenset[str] = frozenset(
    {
        "cache_load_factor",
        "cache_precision",
        "prefetch_pipeline",
        "output_dtype",
        "stochastic_rounding",
        "bounds_check_mode",
    }
)

_OPTION_FIELDS = ("eps", "beta1", "beta2", "weight_decay", "weight_decay_mode", "momentum", "eta")
_FUSED_PARAM_KEYS = ("optimizer", "learning_rate", "lr", *_OPTION_FIELDS)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FusedOptimSpec:
    """An embedding optimizer and its hyper-parameters (defaults are fbgemm TBE's).

    `optimizer` accepts an `EmbOptimType`, its plain string, or fbgemm's `EmbOptimType` member;
    `weight_decay_mode` a `WeightDecayMode`, "none"/"l2"/"decouple", 0/1/2 or fbgemm's member.
    """

    optimizer: EmbOptimType
    learning_rate: float = 0.01
    eps: float = 1.0e-8
    beta1: float = 0.9
    beta2: float = 0.999
    weight_decay: float = 0.0
    weight_decay_mode: WeightDecayMode = WeightDecayMode.NONE
    momentum: float = 0.9
    eta: float = 0.001

    def __post_init__(self) -> None:
        object.__setattr__(self, "optimizer", EmbOptimType(self.optimizer))
        object.__setattr__(self, "weight_decay_mode", WeightDecayMode(self.weight_decay_mode))
        for name in ("learning_rate", "eps", "beta1", "beta2", "weight_decay", "momentum", "eta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"{name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value!r}")
            object.__setattr__(self, name, float(value))
        _check(self.learning_rate >= 0, "learning_rate", self.learning_rate, "must be >= 0")
        _check(self.eps >= 0, "eps", self.eps, "must be >= 0")
        _check(0 <= self.beta1 < 1, "beta1", self.beta1, "must be in [0, 1)")
        _check(0 <= self.beta2 < 1, "beta2", self.beta2, "must be in [0, 1)")
        _check(self.weight_decay >= 0, "weight_decay", self.weight_decay, "must be >= 0")
        _check(0 <= self.momentum < 1, "momentum", self.momentum, "must be in [0, 1)")
        _check(self.eta > 0, "eta", self.eta, "must be > 0")
        supported = SUPPORTED_OPTIONS[self.optimizer]
        defaults = FusedOptimSpec._defaults()
        for name in _OPTION_FIELDS:
            if name not in supported and getattr(self, name) != defaults[name]:
                raise ValueError(
                    f"option {name}={getattr(self, name)!r} is not supported by optimizer "
                    f"{self.optimizer.name}; it reads: "
                    f"{', '.join(['learning_rate', *sorted(supported)])}"
                )
        if "eps" in supported and self.eps == 0:
            # fbgemm accepts it, then a row looked up with a zero gradient (a weight-0 id, a
            # masked bag) updates by 0 / (sqrt(0) + 0) = NaN and stays NaN.
            raise ValueError(
                f"eps=0.0 for {self.optimizer.name}: its update divides by sqrt(state) + eps, so "
                "a row looked up with a zero gradient would become NaN; pass eps > 0 (the "
                "default is 1e-8)"
            )
        if (
            self.optimizer in (EmbOptimType.EXACT_ROWWISE_ADAGRAD, EmbOptimType.ROWWISE_ADAGRAD)
            and self.weight_decay > 0
            and self.weight_decay_mode is WeightDecayMode.NONE
        ):
            raise ValueError(
                f"weight_decay={self.weight_decay} has no effect on {self.optimizer.name} with "
                "weight_decay_mode='none'; pass weight_decay_mode='l2' or 'decouple'"
            )

    @staticmethod
    def _defaults() -> dict[str, object]:
        return {
            f.name: f.default
            for f in dataclasses.fields(FusedOptimSpec)
            if f.default is not dataclasses.MISSING
        }

    @classmethod
    def from_fused_params(cls, fused_params: Mapping[str, object]) -> FusedOptimSpec:
        """Parse TorchRec's `fused_params` (`lr` is an alias of `learning_rate`).

        Raises ValueError for a missing `optimizer`, an unknown key, or `lr` and
        `learning_rate` given with different values. Keys in `NON_OPTIMIZER_FUSED_PARAMS` are
        ignored here (see `split_fused_params` to keep them).
        """
        spec, _ = split_fused_params(fused_params)
        return spec

    def to_fused_params(self) -> dict[str, object]:
        """The TorchRec `fused_params` dict of this spec: `optimizer` plus the options it reads."""
        out: dict[str, object] = {"optimizer": self.optimizer, "learning_rate": self.learning_rate}
        for name in sorted(SUPPORTED_OPTIONS[self.optimizer]):
            out[name] = getattr(self, name)
        return out

    def with_learning_rate(self, learning_rate: float) -> FusedOptimSpec:
        """A copy with another learning rate (validated)."""
        return dataclasses.replace(self, learning_rate=learning_rate)


def split_fused_params(
    fused_params: Mapping[str, object],
) -> tuple[FusedOptimSpec, dict[str, object]]:
    """Split `fused_params` into the optimizer spec and the lookup-only keys it also carries."""
    params = dict(fused_params)
    rest = {k: params.pop(k) for k in list(params) if k in NON_OPTIMIZER_FUSED_PARAMS}
    unknown = sorted(k for k in params if k not in _FUSED_PARAM_KEYS)
    if unknown:
        raise ValueError(
            f"unknown fused_params key(s) {unknown}; valid keys: {', '.join(_FUSED_PARAM_KEYS)}"
        )
    if "optimizer" not in params:
        raise ValueError(f"fused_params needs an 'optimizer' key, got keys {sorted(params)}")
    if "lr" in params:
        lr = params.pop("lr")
        if "learning_rate" in params and params["learning_rate"] != lr:
            raise ValueError(
                f"fused_params gives lr={lr!r} and learning_rate={params['learning_rate']!r}; "
                "pass only one"
            )
        params["learning_rate"] = lr
    spec = FusedOptimSpec(**params)  # type: ignore[arg-type]  # values are validated in __post_init__
    return spec, rest


def _check(ok: bool, name: str, value: float, rule: str) -> None:
    if not ok:
        raise ValueError(f"{name} {rule}, got {value!r}")
