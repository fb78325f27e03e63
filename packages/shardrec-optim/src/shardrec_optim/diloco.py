"""`DiLoCo`: a global (outer) optimizer for `SemisyncOptimizer`, after DiLoCo
(arXiv:2311.08105).

TorchRec's `SemisyncOptimizer` calls `global_optimizer._optimizer.global_step(counter, closure)`
every `num_local_steps` steps but ships no optimizer with that method; this is ours. At every
global step, with `theta_g` the global model (a copy kept since the last global step) and
`theta_r` rank r's parameter after its local steps::

    delta_r = theta_g - theta_r                  pseudo-gradient, per rank: (shape of the param)
    delta   = mean over replicas of delta_r      all_reduce_mean, in place
    buf     = momentum * buf + delta             outer SGD (torch.optim.SGD's formula,
    theta_g = theta_g - lr * (delta + momentum * buf  if nesterov else  buf)   dampening 0)
    theta_r = theta_g                            every replica restarts from the same point

With `lr=1, momentum=0` this is plain model averaging (local SGD).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

__all__ = ["AllReduceMean", "DiLoCo"]

AllReduceMean = Callable[[list[Tensor]], None]
"""Averages each tensor of the list, in place, over the data-parallel replicas."""


class DiLoCo(torch.optim.Optimizer):
    """Outer optimizer over the global model: Nesterov SGD on the averaged pseudo-gradient.

    Args:
        params: the replicated parameters the local optimizer trains (all of them, or the
            subset that is synced every `num_local_steps`).
        all_reduce_mean: averages a list of tensors in place over the replicas (rank r's
            tensors in, the mean of all replicas' out; same shapes). Required, keyword: pass
            `None` only for one replica. It is a callable because this layer-0 package may not
            import shardrec-collectives (docs/optim.md builds one from its `all_reduce_sum`).
        lr: outer learning rate, > 0 (DiLoCo's 0.7).
        momentum: outer momentum, in [0, 1) (DiLoCo's 0.9).
        nesterov: Nesterov momentum (DiLoCo's choice); needs `momentum > 0`.

    State (per parameter, created here so a checkpoint taken before the first global step
    loads in place): `"global_param"` (the global model), `"momentum_buffer"`.
    """

    def __init__(
        self,
        params: Iterable[Tensor],
        *,
        all_reduce_mean: AllReduceMean | None,
        lr: float = 0.7,
        momentum: float = 0.9,
        nesterov: bool = True,
    ) -> None:
        if not lr > 0:
            raise ValueError(f"DiLoCo lr={lr!r}: the outer learning rate must be > 0 (try 0.7)")
        if not 0 <= momentum < 1:
            raise ValueError(f"DiLoCo momentum={momentum!r}: must be in [0, 1) (try 0.9)")
        if nesterov and momentum == 0:
            raise ValueError("DiLoCo nesterov=True needs momentum > 0; pass nesterov=False")
        if all_reduce_mean is not None and not callable(all_reduce_mean):
            raise TypeError(
                f"DiLoCo all_reduce_mean must be callable or None, got "
                f"{type(all_reduce_mean).__name__}"
            )
        super().__init__(params, {"lr": lr, "momentum": momentum, "nesterov": nesterov})
        self._all_reduce_mean = all_reduce_mean
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    self.state[p] = {
                        "global_param": p.detach().clone(),
                        "momentum_buffer": torch.zeros_like(p, memory_format=torch.preserve_format),
                    }

    @torch.no_grad()
    def global_step(self, local_step_counter: Tensor | None = None, closure: Any = None) -> None:
        """One outer step (module docstring); TorchRec's call signature.

        `local_step_counter` (0-d int64, the local steps so far) and `closure` are accepted for
        that signature and not used: the pseudo-gradient needs neither a loss nor the count.
        Every replica must call this at the same local step: it runs one `all_reduce_mean`.
        """
        params = [p for g in self.param_groups for p in g["params"]]
        deltas = [self.state[p]["global_param"] - p for p in params]
        if self._all_reduce_mean is not None and deltas:
            self._all_reduce_mean(deltas)
        i = 0
        for group in self.param_groups:
            lr, momentum, nesterov = group["lr"], group["momentum"], group["nesterov"]
            for p in group["params"]:
                state, delta = self.state[p], deltas[i]
                i += 1
                buf = state["momentum_buffer"]
                buf.mul_(momentum).add_(delta)
                direction = delta.add(buf, alpha=momentum) if nesterov else buf
                state["global_param"].add_(direction, alpha=-lr)
                p.copy_(state["global_param"])

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]  # torch overloads on closure; one signature here
        """A global step now (what `init_state` and direct users call); returns `closure()`."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.global_step(None, None)
        return loss
