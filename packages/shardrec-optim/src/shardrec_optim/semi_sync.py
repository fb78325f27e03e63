"""`SemisyncOptimizer`: local steps every step, a global step every `num_local_steps`
(TorchRec's `torchrec.optim.semi_sync`).

Schedule, with N = `num_local_steps` and the local counter counting `step()` calls::

    step 1 .. N-1:  optimizer.step()
    step N:         optimizer.step(); global_optimizer.zero_grad();
                    global_optimizer._optimizer.global_step(local_counter, closure)
    step N+1 ..     repeats; the global counter counts global steps

What the global step does is the global optimizer's business (`DiLoCo` here: the averaged
difference to the global model since the last global step, fed to an outer SGD).

Checkpoint layout (TorchRec's): one entry per parameter; the local optimizer's state names get
`"semi_sync_local_"`, the global's `"semi_sync_global_"`, and every parameter with global state
also carries both step counters (0-d int64)::

    {"state": {"dense.weight": {"semi_sync_local_momentum_buffer": ...,
                                "semi_sync_global_global_param": ...,
                                "__semisync_global_step_counter__": tensor(2),
                                "__semisync_local_step_counter__": tensor(37)}}}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import Tensor

from shardrec_optim.keyed import KeyedOptimizer, _MergedViewOptimizer

__all__ = [
    "SEMISYNC_GLOBAL_STEP_COUNTER_KEY",
    "SEMISYNC_LOCAL_STEP_COUNTER_KEY",
    "SEMI_SYNC_GLOBAL_OPTIM_KEY",
    "SEMI_SYNC_GLOBAL_STATE_KEY",
    "SEMI_SYNC_LOCAL_OPTIM_KEY",
    "SEMI_SYNC_LOCAL_STATE_KEY",
    "SemisyncOptimizer",
]

SEMI_SYNC_GLOBAL_OPTIM_KEY = "semi_sync_global_optim"
SEMI_SYNC_LOCAL_OPTIM_KEY = "semi_sync_local_optim"
SEMI_SYNC_GLOBAL_STATE_KEY = "semi_sync_global_"
SEMI_SYNC_LOCAL_STATE_KEY = "semi_sync_local_"
SEMISYNC_GLOBAL_STEP_COUNTER_KEY = "__semisync_global_step_counter__"
SEMISYNC_LOCAL_STEP_COUNTER_KEY = "__semisync_local_step_counter__"
_COUNTER_KEYS = (SEMISYNC_GLOBAL_STEP_COUNTER_KEY, SEMISYNC_LOCAL_STEP_COUNTER_KEY)


class _NoGlobalParamsError(ValueError, IndexError):
    """Empty `global_params`: a ValueError by our rules, an IndexError where TorchRec's code
    (which indexes the empty list) is caught."""


class SemisyncOptimizer(_MergedViewOptimizer):
    """Semi-synchronous training: the local optimizer every step, the global one every
    `num_local_steps` (module docstring).

    Args:
        global_params: the parameters the global step syncs (tensors, or torch-style groups
            `{"params": [...]}`); kept as `_worker_model_params`. Must not be empty.
        optimizer: the local KeyedOptimizer (a wrapper, a CombinedOptimizer, fused tables'
            optimizers, ...).
        global_optimizer: a KeyedOptimizer whose `_optimizer` has `global_step(counter,
            closure)`, e.g. `KeyedOptimizerWrapper(params, lambda p: DiLoCo(p, ...))`.
        num_local_steps: local steps per global step, an int >= 1 (TorchRec's default 16).
        semi_sync_worker_shard_group: TorchRec keeps it for metrics logging; stored, not used
            (averaging happens inside the global optimizer, over the group it was given).
        offload_global_model, non_blocking: TorchRec 1.8 stores these and does not act on
            them; so do we (the global model's placement is the global optimizer's).
    """

    def __init__(
        self,
        global_params: Iterable[Tensor] | Iterable[dict[str, Any]],
        optimizer: KeyedOptimizer,
        global_optimizer: KeyedOptimizer,
        num_local_steps: int = 16,
        semi_sync_worker_shard_group: object | None = None,
        offload_global_model: bool = False,
        non_blocking: bool = False,
    ) -> None:
        if isinstance(num_local_steps, bool) or not isinstance(num_local_steps, int):
            raise ValueError(
                f"num_local_steps={num_local_steps!r}: must be an int >= 1 (the local steps "
                "between two global steps, e.g. 16)"
            )
        if num_local_steps < 1:
            raise ValueError(
                f"num_local_steps={num_local_steps}: must be >= 1 (1 runs the global step after "
                "every local step)"
            )
        global_step = getattr(getattr(global_optimizer, "_optimizer", None), "global_step", None)
        if not callable(global_step):
            raise ValueError(
                f"global_optimizer {type(global_optimizer).__name__} has no "
                "_optimizer.global_step(counter, closure); wrap one that has it, e.g. "
                "KeyedOptimizerWrapper(params, lambda p: DiLoCo(p, all_reduce_mean=...))"
            )
        listed = list(global_params)
        if not listed:
            raise _NoGlobalParamsError(
                "global_params is empty: pass the parameters the global step syncs (usually "
                "those of global_optimizer)"
            )
        self._worker_model_params: list[Tensor] = (
            [p for group in listed if isinstance(group, dict) for p in group["params"]]
            if isinstance(listed[0], dict)
            else [p for p in listed if isinstance(p, Tensor)]
        )
        self._optimizer = optimizer
        self._global_optimizer = global_optimizer
        self._num_local_steps = num_local_steps
        self._local_step_counter = torch.tensor(0, dtype=torch.int64)
        self._global_step_counter = torch.tensor(0, dtype=torch.int64)
        self._worker_shard_group = semi_sync_worker_shard_group
        self._offload_global_model = offload_global_model
        self._non_blocking = non_blocking
        self.defaults = {"_save_param_groups": False}
        self._optimizer_step_pre_hooks = {}
        self._optimizer_step_post_hooks = {}
        _ = self.params  # a name naming two tensors fails here, not at the first checkpoint

    # Merged live views of the two optimizers (as TorchRec's).
    @property
    def params(self) -> dict[str, Tensor]:
        """Both optimizers' parameters plus the two step counters under their keys. A name in
        both must name the same tensor."""
        out = dict(self._optimizer.params)
        for key, p in self._global_optimizer.params.items():
            if key in out and out[key] is not p:
                raise ValueError(
                    f"parameter {key!r} names different tensors in the local and the global "
                    "optimizer; build both from the same named parameters"
                )
            out[key] = p
        out[SEMISYNC_GLOBAL_STEP_COUNTER_KEY] = self._global_step_counter
        out[SEMISYNC_LOCAL_STEP_COUNTER_KEY] = self._local_step_counter
        return out

    _assign_state_instead = "use load_state_dict"

    def _merged_state(self) -> dict[Tensor, Any]:
        out: dict[Tensor, Any] = {
            p: {SEMI_SYNC_LOCAL_STATE_KEY + k: v for k, v in s.items()}
            for p, s in self._optimizer.state.items()
        }
        for p, s in self._global_optimizer.state.items():
            entry = out.setdefault(p, {})
            entry.update({SEMI_SYNC_GLOBAL_STATE_KEY + k: v for k, v in s.items()})
            entry[SEMISYNC_GLOBAL_STEP_COUNTER_KEY] = self._global_step_counter
            entry[SEMISYNC_LOCAL_STEP_COUNTER_KEY] = self._local_step_counter
        return out

    def _merged_param_groups(self) -> list[dict[str, Any]]:
        """The local optimizer's groups, then the global optimizer's."""
        return [*self._optimizer.param_groups, *self._global_optimizer.param_groups]

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]  # TorchRec's returns None
        """The local step; after every `num_local_steps`-th, the global step."""
        self._local_step_counter.add_(1)
        due = int(self._local_step_counter) % self._num_local_steps == 0
        self._optimizer.step(closure)
        if due:
            self._global_step_counter.add_(1)
            # Gradients are not needed by the global step; free them before it allocates.
            self._global_optimizer.zero_grad()
            self._global_optimizer._optimizer.global_step(  # type: ignore[attr-defined]  # checked in __init__
                self._local_step_counter, closure
            )

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._optimizer.zero_grad(set_to_none=set_to_none)
        self._global_optimizer.zero_grad(set_to_none=set_to_none)

    def save_param_groups(self, save: bool) -> None:
        self.defaults["_save_param_groups"] = save
        self._optimizer.save_param_groups(save)
        self._global_optimizer.save_param_groups(save)

    def load_state_dict(self, state_dict: Mapping[str, object]) -> None:
        """Load a `state_dict()` (module docstring layout): counters in place, each prefix's
        state through that optimizer's own `load_state_dict` (so its checks and in-place
        copies apply), param_groups split in `param_groups` order when saved.

        Raises ValueError on unknown parameters or state names, or missing counters.
        """
        new_state = state_dict.get("state")
        if not isinstance(new_state, Mapping):
            raise ValueError(f"state_dict needs a 'state' mapping, got keys {sorted(state_dict)}")
        params = self.params
        unknown = sorted(set(new_state) - set(params))
        if unknown:
            raise ValueError(f"state_dict has state for unknown parameters {unknown}")
        local: dict[str, dict[str, object]] = {}
        glob: dict[str, dict[str, object]] = {}
        counters: dict[str, object] = {}
        for key, entry in new_state.items():
            if not isinstance(entry, Mapping):
                raise ValueError(f"state of {key!r} must be a mapping, got {type(entry).__name__}")
            for name, value in entry.items():
                if name in _COUNTER_KEYS:
                    counters[name] = value
                elif name.startswith(SEMI_SYNC_LOCAL_STATE_KEY):
                    local.setdefault(key, {})[name[len(SEMI_SYNC_LOCAL_STATE_KEY) :]] = value
                elif name.startswith(SEMI_SYNC_GLOBAL_STATE_KEY):
                    glob.setdefault(key, {})[name[len(SEMI_SYNC_GLOBAL_STATE_KEY) :]] = value
                else:
                    raise ValueError(
                        f"state {key}/{name!r} has neither prefix {SEMI_SYNC_LOCAL_STATE_KEY!r} "
                        f"nor {SEMI_SYNC_GLOBAL_STATE_KEY!r}: was it saved by a SemisyncOptimizer?"
                    )
        missing = [k for k in _COUNTER_KEYS if k not in counters]
        if missing and (glob or self._global_optimizer.state):
            raise ValueError(
                f"state_dict lacks the step counter(s) {missing}; save it from a "
                "SemisyncOptimizer's state_dict()"
            )
        groups = state_dict.get("param_groups") if self.defaults["_save_param_groups"] else None
        n_local = len(self._optimizer.param_groups)
        for opt, part, part_groups in (
            (self._optimizer, local, None if groups is None else list(groups)[:n_local]),  # type: ignore[call-overload]  # a list of dicts
            (self._global_optimizer, glob, None if groups is None else list(groups)[n_local:]),  # type: ignore[call-overload]  # a list of dicts
        ):
            sub: dict[str, object] = {"state": part}
            if part_groups is not None:
                sub["param_groups"] = part_groups
            opt.load_state_dict(sub)
        for name, counter in (
            (SEMISYNC_GLOBAL_STEP_COUNTER_KEY, self._global_step_counter),
            (SEMISYNC_LOCAL_STEP_COUNTER_KEY, self._local_step_counter),
        ):
            if name in counters:
                counter.copy_(torch.as_tensor(counters[name], dtype=torch.int64))
        self.post_load_state_dict()

    def post_load_state_dict(self) -> None:
        """Hook after `load_state_dict`; the parts ran theirs inside their own loads."""

    def set_optimizer_step(self, step: int) -> None:
        """Forwarded to whichever of the two optimizers has it."""
        for opt in (self._optimizer, self._global_optimizer):
            setter = getattr(opt, "set_optimizer_step", None)
            if callable(setter):
                setter(step)

    def update_hyper_parameters(self, params_dict: dict[str, Any]) -> None:
        """Forwarded to whichever of the two optimizers has it."""
        for opt in (self._optimizer, self._global_optimizer):
            update = getattr(opt, "update_hyper_parameters", None)
            if callable(update):
                update(params_dict)

    def __repr__(self) -> str:
        return (
            f"{SEMI_SYNC_LOCAL_OPTIM_KEY}: {self._optimizer!r}, "
            f"{SEMI_SYNC_GLOBAL_OPTIM_KEY}: {self._global_optimizer!r}"
        )

    @staticmethod
    def _extract_prefixed_state(param_state: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        """The entries of `param_state` whose name starts with `prefix`, prefix removed."""
        return {k[len(prefix) :]: v for k, v in param_state.items() if k.startswith(prefix)}
