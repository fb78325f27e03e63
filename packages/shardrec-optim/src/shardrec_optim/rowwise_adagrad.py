"""`RowWiseAdagrad`: Adagrad with one accumulator per row (TorchRec's dense reference form).

For a parameter `W: (R, ...)` with gradient `G`, at step t (from 1):

    G'    = G + weight_decay * W                      (G negated first when maximize)
    s_r  += mean(G'_r ** 2)                            one scalar per row r, `state["sum"]: (R, 1)`
    W_r  -= lr / (1 + (t - 1) * lr_decay) * G'_r / (sqrt(s_r) + eps)

The accumulator costs one float per row instead of one per element; when every element of a
row sees the same squared gradient it equals `torch.optim.Adagrad`. Fused embedding tables use
the same rule in their backward (`EmbOptimType.EXACT_ROWWISE_ADAGRAD`); this class is for dense
parameters and for `apply_optimizer_in_backward(RowWiseAdagrad, ...)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["RowWiseAdagrad"]


class RowWiseAdagrad(torch.optim.Optimizer):
    """Row-wise Adagrad over `params` (see the module docstring for the update).

    Args:
        params: parameters (at least 1-D; a 1-D parameter has one row per element) or groups.
        lr, lr_decay, weight_decay, initial_accumulator_value, eps: as `torch.optim.Adagrad`;
            each >= 0.
        maximize: ascend instead of descend.

    Sparse gradients are refused (`TypeError`): use a fused embedding table for those.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        *,
        maximize: bool = False,
    ) -> None:
        for name, value in (
            ("lr", lr),
            ("lr_decay", lr_decay),
            ("weight_decay", weight_decay),
            ("initial_accumulator_value", initial_accumulator_value),
            ("eps", eps),
        ):
            if not value >= 0.0:
                raise ValueError(f"RowWiseAdagrad: {name} must be >= 0, got {value!r}")
        defaults = {
            "lr": lr,
            "lr_decay": lr_decay,
            "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value,
            "eps": eps,
            "maximize": maximize,
        }
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                if p.dim() == 0:
                    raise ValueError(
                        "RowWiseAdagrad needs parameters with at least one dimension (rows); "
                        "got a 0-d parameter"
                    )
                state = self.state[p]
                state["step"] = torch.tensor(0.0)
                shape = (p.shape[0],) + (1,) * (p.dim() - 1)
                state["sum"] = torch.full(
                    shape, group["initial_accumulator_value"], dtype=p.dtype, device=p.device
                )

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]  # torch overloads on closure; one signature here
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                _update(p, p.grad, self.state[p], group)
        return loss


def _update(
    p: torch.Tensor, grad: torch.Tensor, state: dict[str, Any], group: dict[str, Any]
) -> None:
    if grad.is_sparse:
        raise TypeError(
            "RowWiseAdagrad takes dense gradients; for sparse embedding gradients use a fused "
            "table (EmbOptimType.EXACT_ROWWISE_ADAGRAD) or torch.optim.SparseAdam"
        )
    step_t: torch.Tensor = state["step"]
    step_t += 1
    g = -grad if group["maximize"] else grad
    if group["weight_decay"]:
        g = g.add(p, alpha=group["weight_decay"])
    acc: torch.Tensor = state["sum"]
    acc += g.pow(2).reshape(p.shape[0], -1).mean(dim=1).view(acc.shape)
    std = acc.sqrt().add_(group["eps"])
    clr = group["lr"] / (1 + (step_t.item() - 1) * group["lr_decay"])
    p.addcdiv_(g, std, value=-clr)
