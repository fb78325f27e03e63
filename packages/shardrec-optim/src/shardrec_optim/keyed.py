"""Optimizers whose state_dict is keyed by parameter name (TorchRec's KeyedOptimizer family).

`torch.optim.Optimizer.state_dict()` numbers parameters by position, which breaks as soon as
parameters are sharded, reordered or split between optimizers. A `KeyedOptimizer` knows each
parameter's name (`"embedding_bags.t1.weight"`) and keys its state by it::

    {"state": {"embedding_bags.t1.weight": {"t1.momentum1": tensor(...)}, ...}}

`load_state_dict` copies tensors *in place* (so sharded or pre-allocated state keeps its
storage) and refuses mismatched keys or shapes instead of loading them silently.
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import torch
from torch import Tensor

OptimizerFactory = Callable[[list[Tensor]], torch.optim.Optimizer]
"""Builds a torch optimizer over a list of parameters: `lambda p: torch.optim.SGD(p, lr=0.1)`."""


class KeyedOptimizer(torch.optim.Optimizer):
    """A torch optimizer over named parameters, with state_dict keyed by name.

    Args:
        params: name -> parameter.
        state: parameter -> its state dict (shared with whatever updates it; kept live).
        param_groups: torch-style groups (`"params"` lists tensors of `params`; `"lr"` etc.).

    `state_dict()` leaves out `param_groups` unless `save_param_groups(True)` was called, as in
    TorchRec: they are usually rebuilt by the training script.
    """

    def __init__(
        self,
        params: Mapping[str, Tensor],
        state: MutableMapping[Tensor, Any],
        param_groups: Sequence[dict[str, Any]],
    ) -> None:
        # torch.optim.Optimizer.__init__ is not called: it would re-create state and groups.
        self._params = dict(params)
        self._state = state
        self._param_groups = list(param_groups)
        self.defaults: dict[str, Any] = {"_save_param_groups": False}
        self._optimizer_step_pre_hooks = {}
        self._optimizer_step_post_hooks = {}
        known = {id(p) for p in self._params.values()}
        stray = [k for k in self._state if id(k) not in known]
        if stray:
            # TorchRec's wording first: code ported from TorchRec matches on it.
            raise ValueError(
                f"All state keys must be params. The following keys are not: {stray!r} "
                f"(params: {sorted(self._params)})"
            )

    # Live views; properties so that wrappers and combinations stay consistent.
    @property
    def params(self) -> dict[str, Tensor]:
        """name -> parameter."""
        return self._params

    @property  # type: ignore[override]  # torch declares a plain attribute; ours is a live view
    def state(self) -> MutableMapping[Tensor, Any]:
        return self._state

    @state.setter
    def state(self, value: MutableMapping[Tensor, Any]) -> None:
        self._state = value

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self._param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self._param_groups = value

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params.values():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_().zero_()

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        raise TypeError(
            f"{type(self).__name__} has a fixed set of named parameters; build a new one "
            "(or a CombinedOptimizer) instead of add_param_group"
        )

    def save_param_groups(self, save: bool) -> None:
        """Include `param_groups` (with parameter names) in `state_dict()`."""
        self.defaults["_save_param_groups"] = save

    def state_dict(self) -> dict[str, object]:
        """`{"state": {param name: {state name: value}}}` (+ `"param_groups"` when saved)."""
        key_of = {id(p): k for k, p in self.params.items()}
        state = {key_of[id(p)]: _detach_tree(s) for p, s in self.state.items() if s}
        out: dict[str, object] = {"state": state}
        if self.defaults.get("_save_param_groups", False):
            out["param_groups"] = [
                {
                    **{k: copy.deepcopy(v) for k, v in g.items() if k != "params"},
                    "params": sorted(key_of[id(p)] for p in g["params"]),
                }
                for g in self.param_groups
            ]
        return out

    def load_state_dict(self, state_dict: Mapping[str, object]) -> None:
        """Copy `state_dict` (from `state_dict()`) into this optimizer, in place.

        Raises ValueError when a parameter name, a state name or a tensor shape differs.
        """
        new_state = state_dict.get("state")
        if not isinstance(new_state, Mapping):
            raise ValueError(f"state_dict needs a 'state' mapping, got keys {sorted(state_dict)}")
        unknown = sorted(set(new_state) - set(self.params))
        if unknown:
            raise ValueError(f"state_dict has state for unknown parameters {unknown}")
        for key, param in self.params.items():
            current = self.state.get(param)
            if not current:
                if key in new_state:
                    self.state[param] = _clone_tree(new_state[key], param.device)
                continue
            if key not in new_state:
                raise ValueError(f"state_dict has no state for parameter {key!r}")
            _copy_into(current, new_state[key], key)
        if self.defaults.get("_save_param_groups", False):
            self._load_param_groups(state_dict)
        self.post_load_state_dict()

    def _load_param_groups(self, state_dict: Mapping[str, object]) -> None:
        groups = state_dict.get("param_groups")
        if not isinstance(groups, Sequence) or len(groups) != len(self.param_groups):
            raise ValueError(
                f"state_dict has param_groups {groups!r}; expected {len(self.param_groups)} groups"
            )
        key_of = {id(p): k for k, p in self.params.items()}
        by_keys = {tuple(sorted(key_of[id(p)] for p in g["params"])): g for g in self.param_groups}
        for new in groups:
            assert isinstance(new, Mapping)
            target = by_keys.get(tuple(sorted(new["params"])))
            if target is None:
                raise ValueError(f"state_dict param_group over {new['params']} matches no group")
            for k, v in new.items():
                if k != "params":
                    target[k] = copy.deepcopy(v)

    def post_load_state_dict(self) -> None:
        """Hook run after `load_state_dict` (wrappers re-derive their settings here)."""

    def init_state(self, sparse_grad_parameter_names: AbstractSet[str] | None = None) -> None:
        """Create lazily-initialized state now (a step on zero gradients), so that a checkpoint
        can be loaded in place. Parameters that do not require grad are skipped; those named in
        `sparse_grad_parameter_names` get a sparse zero gradient (the form an
        `nn.Embedding(sparse=True)` produces), so optimizers that branch on sparsity build the
        state they would build in training."""
        sparse = sparse_grad_parameter_names or set()
        for key, p in self.params.items():
            if p.requires_grad:
                zeros = torch.zeros_like(p)
                p.grad = zeros.to_sparse() if key in sparse else zeros
        self.step()


def _is_sharded(value: object) -> bool:
    """A `torch.distributed` ShardedTensor (looked up lazily: torch builds without distributed
    support still import this package)."""
    if not torch.distributed.is_available():
        return False
    from torch.distributed._shard.sharded_tensor.api import ShardedTensor

    return isinstance(value, ShardedTensor)


def _detach_tree(value: object) -> object:
    """The saved form of one state value: nested mappings recursed, tensors detached (sharded
    tensors kept as they are: the checkpoint writer reads their shards), objects with a
    `state_dict()` (the PyTorch stateful protocol) replaced by it, anything else copied."""
    if isinstance(value, Mapping):
        return {k: _detach_tree(v) for k, v in value.items()}
    if _is_sharded(value):
        return value
    if isinstance(value, Tensor):
        return value.detach()
    if callable(getattr(value, "state_dict", None)):
        return value.state_dict()  # type: ignore[attr-defined]  # checked just above
    return copy.deepcopy(value)


def _clone_tree(value: object, device: torch.device) -> object:
    if isinstance(value, Mapping):
        return {k: _clone_tree(v, device) for k, v in value.items()}
    if isinstance(value, Tensor):
        return value.detach().clone().to(device)
    return copy.deepcopy(value)


def _copy_into(current: Mapping[str, Any], new: object, path: str) -> None:
    if not isinstance(new, Mapping):
        raise ValueError(f"state of {path!r} must be a mapping, got {type(new).__name__}")
    if set(current) != set(new):
        raise ValueError(
            f"state of {path!r} has keys {sorted(map(str, new))}, "
            f"expected {sorted(map(str, current))}"
        )
    for k, v in current.items():
        where = f"{path}/{k}"
        if isinstance(v, Mapping):
            _copy_into(v, new[k], where)
        elif _is_sharded(v):
            _copy_shards(v, new[k], where)
        elif not isinstance(v, Tensor) and callable(getattr(v, "load_state_dict", None)):
            v.load_state_dict(new[k])
        elif isinstance(v, Tensor):
            src = new[k]
            if not isinstance(src, Tensor) or src.shape != v.shape:
                shape = tuple(src.shape) if isinstance(src, Tensor) else type(src).__name__
                raise ValueError(f"state {where!r} has shape {shape}, expected {tuple(v.shape)}")
            v.detach().copy_(src)
        else:
            assert isinstance(current, MutableMapping)
            current[k] = copy.deepcopy(new[k])


def _copy_shards(current: Any, new: Any, path: str) -> None:
    """Copy ShardedTensor `new`'s local shards into ShardedTensor `current`'s, in place."""
    if not _is_sharded(new):
        raise ValueError(f"state {path!r} is a ShardedTensor; got {type(new).__name__}")
    mine, theirs = current.local_shards(), new.local_shards()
    if len(mine) != len(theirs):
        raise ValueError(
            f"state {path!r} has {len(theirs)} local shards, expected {len(mine)} (was the "
            "checkpoint saved with another sharding plan?)"
        )
    for shard, other in zip(mine, theirs, strict=True):
        if shard.tensor.shape != other.tensor.shape:
            raise ValueError(
                f"state {path!r}: a local shard has shape {tuple(other.tensor.shape)}, expected "
                f"{tuple(shard.tensor.shape)}"
            )
        shard.tensor.detach().copy_(other.tensor)


class KeyedOptimizerWrapper(KeyedOptimizer):
    """A KeyedOptimizer around a plain torch optimizer built by `optim_factory(list(params))`."""

    def __init__(self, params: Mapping[str, Tensor], optim_factory: OptimizerFactory) -> None:
        self._optimizer = optim_factory(list(params.values()))
        super().__init__(params, self._optimizer.state, self._optimizer.param_groups)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]  # torch overloads on closure; one signature here
        return self._optimizer.step(closure)


class OptimizerWrapper(KeyedOptimizer):
    """Base of wrappers (warmup, clipping) that add behavior around another KeyedOptimizer."""

    def __init__(self, optimizer: KeyedOptimizer) -> None:
        self._optimizer = optimizer
        self.defaults = {"_save_param_groups": False}
        self._optimizer_step_pre_hooks = {}
        self._optimizer_step_post_hooks = {}

    @property
    def params(self) -> dict[str, Tensor]:
        return self._optimizer.params

    @property  # type: ignore[override]  # live view of the wrapped optimizer
    def state(self) -> MutableMapping[Tensor, Any]:
        return self._optimizer.state

    @state.setter
    def state(self, value: MutableMapping[Tensor, Any]) -> None:
        self._optimizer.state = value

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self._optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self._optimizer.param_groups = value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._optimizer!r})"

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]  # torch overloads on closure; one signature here
        return self._optimizer.step(closure)

    def save_param_groups(self, save: bool) -> None:
        self._optimizer.save_param_groups(save)

    def state_dict(self) -> dict[str, object]:
        return self._optimizer.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, object]) -> None:
        self._optimizer.load_state_dict(state_dict)
        self.post_load_state_dict()


class _MergedViewOptimizer(KeyedOptimizer):
    """A KeyedOptimizer over other optimizers: `state` and `param_groups` are views rebuilt from
    the parts on each read (`_merged_state`, `_merged_param_groups`), and cannot be assigned."""

    _assign_state_instead = "set it on the parts"
    """What to do instead of assigning `state`: the tail of the AttributeError's message."""

    @abc.abstractmethod
    def _merged_state(self) -> dict[Tensor, Any]:
        """The parts' state, keyed by parameter, built now."""

    @abc.abstractmethod
    def _merged_param_groups(self) -> list[dict[str, Any]]:
        """The parts' param groups, in order."""

    @property  # type: ignore[override]  # a merged view of the parts
    def state(self) -> MutableMapping[Tensor, Any]:
        return self._merged_state()

    @state.setter
    def state(self, value: MutableMapping[Tensor, Any]) -> None:
        raise AttributeError(
            f"{type(self).__name__}.state is a merged view; {self._assign_state_instead}"
        )

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self._merged_param_groups()

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        raise AttributeError(f"{type(self).__name__}.param_groups is a merged view; set the parts")


class CombinedOptimizer(_MergedViewOptimizer):
    """Several KeyedOptimizers seen as one; parameter names get `"<prefix>."` prepended.

    Args:
        optims: KeyedOptimizers, or `(prefix, optimizer)` pairs. A duplicate final parameter
            name raises ValueError.
    """

    def __init__(self, optims: Sequence[KeyedOptimizer | tuple[str, KeyedOptimizer]]) -> None:
        self._optims: list[tuple[str, KeyedOptimizer]] = [
            o if isinstance(o, tuple) else ("", o) for o in optims
        ]
        self.defaults = {"_save_param_groups": False}
        self._optimizer_step_pre_hooks = {}
        self._optimizer_step_post_hooks = {}
        seen: set[str] = set()
        for prefix, opt in self._optims:
            if not isinstance(opt, KeyedOptimizer):
                raise TypeError(
                    f"CombinedOptimizer takes KeyedOptimizers, got {type(opt).__name__} "
                    f"(wrap it: KeyedOptimizerWrapper(dict(model.named_parameters()), factory))"
                )
            for key in opt.params:
                full = self.prepend_opt_key(key, prefix)
                if full in seen:
                    raise ValueError(f"duplicate parameter key {full!r} in CombinedOptimizer")
                seen.add(full)

    @staticmethod
    def prepend_opt_key(name: str, opt_key: str) -> str:
        """`"<opt_key>.<name>"`, or either alone when the other is empty."""
        if not name:
            return opt_key
        return f"{opt_key}.{name}" if opt_key else name

    @property
    def optimizers(self) -> list[tuple[str, KeyedOptimizer]]:
        """The `(prefix, optimizer)` pairs."""
        return list(self._optims)

    @property
    def params(self) -> dict[str, Tensor]:
        return {
            self.prepend_opt_key(k, prefix): p
            for prefix, opt in self._optims
            for k, p in opt.params.items()
        }

    def _merged_state(self) -> dict[Tensor, Any]:
        merged: dict[Tensor, Any] = {}
        for _, opt in self._optims:
            merged.update(opt.state)
        return merged

    def _merged_param_groups(self) -> list[dict[str, Any]]:
        return [g for _, opt in self._optims for g in opt.param_groups]

    def __repr__(self) -> str:
        return "CombinedOptimizer(" + ", ".join(f"{k!r}: {o!r}" for k, o in self._optims) + ")"

    def zero_grad(self, set_to_none: bool = True) -> None:
        for _, opt in self._optims:
            opt.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]  # torch overloads on closure; one signature here
        loss = None
        for _, opt in self._optims:
            loss = opt.step(closure)
        return loss

    def save_param_groups(self, save: bool) -> None:
        self.defaults["_save_param_groups"] = save
        for _, opt in self._optims:
            opt.save_param_groups(save)

    def state_dict(self) -> dict[str, object]:
        state: dict[str, object] = {}
        groups: list[object] = []
        for prefix, opt in self._optims:
            sd = opt.state_dict()
            sub = sd["state"]
            assert isinstance(sub, Mapping)
            state.update({self.prepend_opt_key(k, prefix): v for k, v in sub.items()})
            for g in sd.get("param_groups", []):  # type: ignore[attr-defined]  # list of dicts
                groups.append(
                    {**g, "params": [self.prepend_opt_key(k, prefix) for k in g["params"]]}
                )
        out: dict[str, object] = {"state": state}
        if self.defaults["_save_param_groups"]:
            out["param_groups"] = groups
        return out

    def load_state_dict(self, state_dict: Mapping[str, object]) -> None:
        new_state = state_dict.get("state")
        if not isinstance(new_state, Mapping):
            raise ValueError(f"state_dict needs a 'state' mapping, got keys {sorted(state_dict)}")
        owner = {
            self.prepend_opt_key(k, prefix): (i, k)
            for i, (prefix, opt) in enumerate(self._optims)
            for k in opt.params
        }
        unknown = sorted(set(new_state) - set(owner))
        if unknown:
            raise ValueError(f"state_dict has state for unknown parameters {unknown}")
        parts: list[dict[str, object]] = [{} for _ in self._optims]
        for full, value in new_state.items():
            i, k = owner[full]
            parts[i][k] = value
        part_groups: list[list[object]] = [[] for _ in self._optims]
        for g in state_dict.get("param_groups", []):  # type: ignore[attr-defined]  # list of dicts
            i, _ = owner[g["params"][0]]
            part_groups[i].append({**g, "params": [owner[k][1] for k in g["params"]]})
        for i, (_, opt) in enumerate(self._optims):
            sub: dict[str, object] = {"state": parts[i]}
            if self.defaults["_save_param_groups"]:
                sub["param_groups"] = part_groups[i]
            opt.load_state_dict(sub)  # runs each part's post_load_state_dict

    def post_load_state_dict(self) -> None:
        for _, opt in self._optims:
            opt.post_load_state_dict()
