"""The update rules of the fused embedding optimizers: one `UpdateRule` per `EmbOptimType`.

A rule is data: the state it keeps per table (names and shapes, in fbgemm's order), whether its
update reads the step count (bias correction), and the backends that have a kernel for it, in
the order `backend="auto"` tries them. The formulas are in `sparse_kernels` (the torch kernel
every rule has); `pooled.pooled_update` is the one dispatch that runs a rule on a backend.

| optimizer | state (R rows, D columns) | auto order |
|---|---|---|
| SGD, EXACT_SGD | - | native, fbgemm, torch |
| EXACT_ADAGRAD | momentum1 (R, D) | native, fbgemm, torch |
| (EXACT_)ROWWISE_ADAGRAD | momentum1 (R,) | triton, native, fbgemm, torch |
| ADAM, LAMB | momentum1 (R, D), momentum2 (R, D) | torch |
| PARTIAL_ROWWISE_ADAM / _LAMB | momentum1 (R, D), momentum2 (R,) | torch |
| LARS_SGD | momentum1 (R, D) | torch |

Each order is the measured speed on CPU (benchmarks/optim_update.py, issue 28; docs/optim.md):
native SGD (scatter) and Adagrad (one-pass) are 2.4-4.2x faster than fbgemm's kernels; for
rowwise Adagrad the two kernels tie on a group's own gradient (0.94-1.00x), and the native one
wins in the step once it reads the lookup's output gradient in place (the segment lookup,
issue 28 session 8), so native comes first there too (one kernel for every path, so a tiered
and an in-memory table train bitwise alike). Triton runs only on CUDA under auto.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

import torch
from torch import Tensor

from shardrec_optim.types import EmbOptimType

Backend = Literal["auto", "torch", "fbgemm", "triton", "native"]
"""Which kernel runs a fused update: "auto" tries the rule's backends in its order; the others
force one (parity tests; "triton" also runs on CPU tensors under `TRITON_INTERPRET=1`)."""

BACKENDS: tuple[Backend, ...] = ("auto", "torch", "fbgemm", "triton", "native")

OptimState = dict[str, Tensor]
"""Optimizer state of one weight: `"momentum1"` / `"momentum2"` -> tensor (see module table)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class StateSlot:
    """One state tensor of a rule: its name and whether it holds one value per row."""

    name: str
    rowwise: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class UpdateRule:
    """How one optimizer updates the rows a batch touched (see the module table).

    state: the tensors it keeps, in fbgemm's order. uses_step: its update reads the step count.
    backends: the backends with a kernel for it, in the order "auto" tries them (torch last:
    it runs everything).
    """

    state: tuple[StateSlot, ...]
    uses_step: bool
    backends: tuple[Backend, ...]

    def __post_init__(self) -> None:
        if not self.backends or self.backends[-1] != "torch":
            raise ValueError(f"backends must end with 'torch', got {self.backends!r}")


_M1 = StateSlot(name="momentum1", rowwise=False)
_M1_ROW = StateSlot(name="momentum1", rowwise=True)
_M2 = StateSlot(name="momentum2", rowwise=False)
_M2_ROW = StateSlot(name="momentum2", rowwise=True)

_SGD = UpdateRule(state=(), uses_step=False, backends=("native", "fbgemm", "torch"))
_ADAGRAD = UpdateRule(state=(_M1,), uses_step=False, backends=("native", "fbgemm", "torch"))
_ROWWISE_ADAGRAD = UpdateRule(
    state=(_M1_ROW,), uses_step=False, backends=("triton", "native", "fbgemm", "torch")
)
_ADAM = UpdateRule(state=(_M1, _M2), uses_step=True, backends=("torch",))
_PARTIAL_ROWWISE = UpdateRule(state=(_M1, _M2_ROW), uses_step=True, backends=("torch",))

RULES: Mapping[EmbOptimType, UpdateRule] = {
    EmbOptimType.SGD: _SGD,
    EmbOptimType.EXACT_SGD: _SGD,
    EmbOptimType.EXACT_ADAGRAD: _ADAGRAD,
    EmbOptimType.EXACT_ROWWISE_ADAGRAD: _ROWWISE_ADAGRAD,
    EmbOptimType.ROWWISE_ADAGRAD: _ROWWISE_ADAGRAD,
    EmbOptimType.ADAM: _ADAM,
    EmbOptimType.PARTIAL_ROWWISE_ADAM: _PARTIAL_ROWWISE,
    EmbOptimType.LAMB: _ADAM,
    EmbOptimType.PARTIAL_ROWWISE_LAMB: _PARTIAL_ROWWISE,
    EmbOptimType.LARS_SGD: UpdateRule(state=(_M1,), uses_step=False, backends=("torch",)),
}
"""The rule of each optimizer."""


def optimizers_on(backend: Backend) -> frozenset[EmbOptimType]:
    """The optimizers with a kernel on `backend`."""
    return frozenset(opt for opt, rule in RULES.items() if backend in rule.backends)


def state_shapes(
    optimizer: EmbOptimType | str, num_rows: int, dim: int
) -> dict[str, tuple[int, ...]]:
    """Shape of each state tensor `optimizer` keeps for a `(num_rows, dim)` weight."""
    rule = RULES[EmbOptimType(optimizer)]
    return {s.name: (num_rows,) if s.rowwise else (num_rows, dim) for s in rule.state}


def init_state(
    optimizer: EmbOptimType | str,
    num_rows: int,
    dim: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> OptimState:
    """Zero-initialized optimizer state for a `(num_rows, dim)` weight."""
    return {
        name: torch.zeros(shape, dtype=dtype, device=device)
        for name, shape in state_shapes(optimizer, num_rows, dim).items()
    }
