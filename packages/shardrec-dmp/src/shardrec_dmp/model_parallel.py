"""`DistributedModelParallel`: the wrapper that shards a model's embedding modules.

Wrapping a model is a short script of named steps (`DistributedModelParallel.__init__`):

1. choose the environment (the default process group) and the device;
2. choose the sharders (one per shardable module type) and the plan (the planner's
   `collective_plan`, so every rank gets rank 0's plan);
3. replace every planned submodule by its sharded version, by module path;
4. materialize what is left on `meta` (the dense part) on the device;
5. wrap the model in `DistributedDataParallel`, told to ignore the sharded modules' parameters
   and buffers (they are synchronized by their own collectives).

The wrapper itself is transparent: `named_parameters()`, `state_dict()` and `load_state_dict()`
use the unsharded model's names, without `_dmp_wrapped_module.` or DDP's `module.` prefixes.
"""

from __future__ import annotations

import copy
import dataclasses
import types
from collections.abc import Callable, Iterator, Mapping, Sequence

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.modules.module import _IncompatibleKeys
from torch.nn.parallel import DistributedDataParallel

from shardrec_collectives import ShardingEnv
from shardrec_dmp.data_parallel import DataParallelWrapper, dmp_default_wrapper
from shardrec_optim import CombinedOptimizer, KeyedOptimizer
from shardrec_planner import EmbeddingShardingPlanner, PlannerSharder, ShardingPlan, Topology
from shardrec_planner.default_sharders import set_default_sharders
from shardrec_sharding import (
    EmbeddingBagCollectionSharder,
    EmbeddingCollectionSharder,
    get_default_sharders,
)

__all__ = ["DistributedModelParallel", "default_sharders", "get_module", "get_unwrapped_module"]


def default_sharders() -> list[PlannerSharder]:
    """One sharder per shardable module type: EmbeddingBagCollection and EmbeddingCollection."""
    return [EmbeddingBagCollectionSharder(), EmbeddingCollectionSharder()]


# `EmbeddingShardingPlanner.collective_plan(module)` without sharders uses these (TorchRec's
# `get_default_sharders()`); the planner, a lower layer, cannot import them itself.
set_default_sharders(get_default_sharders)


def _default_env(device: torch.device | None) -> ShardingEnv:
    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(
            "DistributedModelParallel needs an environment: call "
            "torch.distributed.init_process_group(...) first (torchrun sets rank and world size), "
            "or pass env=ShardingEnv.from_process_group(pg) / ShardingEnv.from_local(1, 0)"
        )
    group = dist.group.WORLD
    assert group is not None  # initialized above
    return ShardingEnv.from_process_group(group, device)


def _sharder_for(module: nn.Module, sharders: Sequence[PlannerSharder]) -> PlannerSharder | None:
    # An exact type match wins over a base class, so a user's sharder for a subclass is chosen.
    for sharder in sharders:
        if type(module) is sharder.module_type:
            return sharder
    for sharder in sharders:
        if isinstance(module, sharder.module_type):
            return sharder
    return None


def _replace(root: nn.Module, path: str, new: nn.Module) -> nn.Module:
    """Put `new` at `path` inside `root`; returns the new root (itself when `path` is "")."""
    if not path:
        return new
    parent_path, _, name = path.rpartition(".")
    parent = root.get_submodule(parent_path) if parent_path else root
    setattr(parent, name, new)
    return root


def _materialize_dense(module: nn.Module, skip: set[str], device: torch.device) -> None:
    """Allocate the dense part's `meta` tensors on `device` and initialize them."""
    for path, sub in module.named_modules():
        if any(path == s or path.startswith(s + ".") for s in skip):
            continue
        own = list(sub.parameters(recurse=False)) + list(sub.buffers(recurse=False))
        if any(t.is_meta for t in own):
            sub.to_empty(device=device, recurse=False)
            reset = getattr(sub, "reset_parameters", None)
            if callable(reset):
                reset()


def _move_dense(module: nn.Module, skip: set[str], device: torch.device) -> None:
    """Move the dense part's materialized tensors to `device` in place (as TorchRec moves the
    dense module before wrapping it in DDP). Parameters keep their identity (`.data` moves),
    so an optimizer built before wrapping still holds them."""
    for path, sub in module.named_modules():
        if any(path == s or path.startswith(s + ".") for s in skip):
            continue
        with torch.no_grad():
            for p in sub.parameters(recurse=False):
                if not p.is_meta and p.device != device:
                    p.data = p.data.to(device)
            for name, b in list(sub.named_buffers(recurse=False)):
                if b is not None and not b.is_meta and b.device != device:
                    setattr(sub, name, b.to(device))


def _copy_function(fn: object, memo: dict[int, object]) -> Callable[..., object]:
    """A deep copy of a callable whose closure's contents are copied through `memo` (a plain
    `deepcopy` returns a function itself, still bound to the original's objects)."""
    if isinstance(fn, types.FunctionType) and fn.__closure__:
        cells = []
        for cell in fn.__closure__:
            try:
                cells.append(types.CellType(copy.deepcopy(cell.cell_contents, memo)))
            except ValueError:  # an empty cell
                cells.append(types.CellType())
        new = types.FunctionType(
            fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, tuple(cells)
        )
        new.__kwdefaults__ = fn.__kwdefaults__
        return new
    copied = copy.deepcopy(fn, memo)
    assert callable(copied), "a hook is callable"
    return copied


def make_plan(
    module: nn.Module,
    plan: ShardingPlan | None,
    env: ShardingEnv,
    device: torch.device,
    sharders: Sequence[PlannerSharder],
) -> ShardingPlan:
    """`plan` when given, else the planner's (collective when `env` has a process group)."""
    if plan is not None:
        if not isinstance(plan, ShardingPlan):
            raise TypeError(f"plan must be a ShardingPlan, got {type(plan).__name__}")
        return plan
    planner = EmbeddingShardingPlanner(
        Topology(world_size=env.world_size, compute_device=device.type)
    )
    if env.pg is None:
        return planner.plan(module, sharders)
    return planner.collective_plan(module, sharders, env.pg)


def shard_planned(
    module: nn.Module,
    plan: ShardingPlan,
    env: ShardingEnv,
    device: torch.device,
    sharders: Sequence[PlannerSharder],
) -> tuple[nn.Module, dict[str, nn.Module]]:
    """Replace every planned submodule by its sharder's sharded version; (root, by path)."""
    paths = dict(module.named_modules())
    sharded: dict[str, nn.Module] = {}
    # Planned modules never nest (each table has one owner); a plan for the root ("") is
    # applied last so that the other paths still resolve.
    for path in sorted(plan.plan, key=lambda p: (p == "", p)):
        if path not in paths:
            raise ValueError(
                f"the plan names module {path!r}, which the model does not have "
                f"(modules: {sorted(p for p in paths if p)[:10]})"
            )
        sub = paths[path]
        sharder = _sharder_for(sub, sharders)
        if sharder is None:
            known = [s.module_type.__name__ for s in sharders]
            raise ValueError(
                f"the plan shards module {path!r} of type {type(sub).__name__}, but no "
                f"sharder handles that type (sharders for: {known}); pass sharders=[...]"
            )
        shard = getattr(sharder, "shard", None)
        if not callable(shard):
            raise TypeError(f"sharder {type(sharder).__name__} has no shard() method")
        new = shard(sub, plan.plan[path], env, device)
        if not isinstance(new, nn.Module):
            raise TypeError(
                f"{type(sharder).__name__}.shard returned {type(new).__name__}, not an nn.Module"
            )
        sharded[path] = new
        module = _replace(module, path, new)
    return module, sharded


class DistributedModelParallel(nn.Module):
    """Shards the embedding modules of `module` over the ranks of `env`; the rest is replicated.

    Args:
        module: the model (unsharded). Its embedding modules may live on `meta`: each rank then
            allocates only its shards. Dense `meta` submodules are allocated on `device` and
            initialized with their `reset_parameters()` (when `init_parameters`).
        env: the ranks; default: the default process group (`torch.distributed.init_process_group`
            must have run).
        device: where local shards and the dense part live; default `env.device`.
        plan: which table goes where; default: `EmbeddingShardingPlanner(Topology(world_size,
            compute_device=device.type)).collective_plan(module, sharders, env.pg)`.
        sharders: default `default_sharders()`. Each must satisfy the planner's
            `PlannerSharder` Protocol and have `shard(module, params, env, device)`.
        init_data_parallel: wrap the model in `DistributedDataParallel` (dense gradients are
            averaged over ranks); sharded modules' parameters are excluded from it.
        init_parameters: materialize and initialize the dense part's `meta` parameters.
        data_parallel_wrapper: how the dense part is replicated (`init_data_parallel`); default
            plain `DistributedDataParallel` (DDP's own defaults). TorchRec's wrappers work:
            `DefaultDataParallelWrapper(static_graph=True, ...)` or a `DataParallelWrapper`
            subclass whose `wrap(dmp, env, device)` sets `dmp._dmp_wrapped_module`.

    Gradient scaling (as in TorchRec): DDP *averages* dense gradients over ranks, while sharded
    tables receive the gradient of the *sum* of every rank's loss (docs/dmp.md).

    `forward(...)` returns what the model returns; a sharded module's output is a
    `LazyAwaitable` that waits by itself when used.
    """

    def __init__(
        self,
        module: nn.Module,
        env: ShardingEnv | None = None,
        device: torch.device | str | None = None,
        plan: ShardingPlan | None = None,
        sharders: Sequence[PlannerSharder] | None = None,
        init_data_parallel: bool = True,
        init_parameters: bool = True,
        data_parallel_wrapper: DataParallelWrapper | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(
                f"DistributedModelParallel wraps an nn.Module, got {type(module).__name__}"
            )
        if isinstance(module, DistributedModelParallel):
            raise TypeError("the module is already a DistributedModelParallel; wrap it once")
        # Step 1: environment and device.
        dev = None if device is None else torch.device(device)
        self._env = _default_env(dev) if env is None else env
        self._device = self._env.device if dev is None else dev
        # Step 2: sharders and plan.
        self._sharders = list(default_sharders() if sharders is None else sharders)
        self._plan = self._make_plan(module, plan)
        # Step 3: shard the planned submodules.
        module, self._sharded = self._shard(module)
        # Step 4: the dense part.
        if init_parameters:
            _materialize_dense(module, set(self._sharded), self._device)
        _move_dense(module, set(self._sharded), self._device)
        # Step 5: data parallel for the dense part.
        if data_parallel_wrapper is not None and not callable(
            getattr(data_parallel_wrapper, "wrap", None)
        ):
            raise TypeError(
                f"data_parallel_wrapper must have wrap(dmp, env, device), got "
                f"{type(data_parallel_wrapper).__name__}"
            )
        self._data_parallel_wrapper = (
            dmp_default_wrapper() if data_parallel_wrapper is None else data_parallel_wrapper
        )
        self._dmp_wrapped_module: nn.Module = module
        if init_data_parallel:
            self.init_data_parallel()

    # -- construction steps -------------------------------------------------------------------

    def _make_plan(self, module: nn.Module, plan: ShardingPlan | None) -> ShardingPlan:
        return make_plan(module, plan, self._env, self._device, self._sharders)

    def _shard(self, module: nn.Module) -> tuple[nn.Module, dict[str, nn.Module]]:
        return shard_planned(module, self._plan, self._env, self._device, self._sharders)

    # -- the public surface -------------------------------------------------------------------

    def init_data_parallel(self) -> None:
        """Replicate the dense part with the data-parallel wrapper (a collective).

        Done by the constructor unless `init_data_parallel=False`: then call it once the dense
        parameters are initialized. Calling it again does nothing with the default wrapper.
        """
        self._data_parallel_wrapper.wrap(self, self._env, self._device)

    def forward(self, *args: object, **kwargs: object) -> object:
        """The model's forward on this rank's batch."""
        return self._dmp_wrapped_module(*args, **kwargs)

    @property
    def module(self) -> nn.Module:
        """The model with its sharded submodules, without the DDP wrapper."""
        inner = self._dmp_wrapped_module
        return inner.module if isinstance(inner, DistributedDataParallel) else inner

    @property
    def plan(self) -> ShardingPlan:
        return self._plan

    @property
    def env(self) -> ShardingEnv:
        return self._env

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def sharded_modules(self) -> dict[str, nn.Module]:
        """Module path -> sharded module, for every module the plan sharded."""
        return dict(self._sharded)

    @property
    def fused_optimizer(self) -> CombinedOptimizer:
        """The sharded modules' fused optimizers, keyed by the model's parameter names.

        Its `step()` does nothing (rows update in backward); combine it with a dense optimizer
        over `in_backward_optimizer_filter(model.named_parameters())`.
        """
        optims: list[KeyedOptimizer | tuple[str, KeyedOptimizer]] = []
        for path, sub in self._sharded.items():
            opt = getattr(sub, "fused_optimizer", None)
            if isinstance(opt, KeyedOptimizer):
                optims.append((path, opt) if path else opt)
        return CombinedOptimizer(optims)

    def copy(self, device: torch.device | str) -> DistributedModelParallel:
        """An independent copy of this model on `device` (as TorchRec's `copy(device)`).

        Every parameter, buffer and fused optimizer state tensor is new (the copy's training
        leaves this model unchanged); the process group is shared, not copied, and the plan is
        the same, so each rank copies its own shards. With data parallelism the copy gets its
        own `DistributedDataParallel`, whose construction is a collective: every rank calls
        `copy` together.
        """
        target = torch.device(device)
        inner = self._dmp_wrapped_module
        # The process group is a handle to live connections: the copy uses the same one.
        memo: dict[int, object] = {}
        if self._env.pg is not None:
            memo[id(self._env.pg)] = self._env.pg
        # Parameter.__deepcopy__ clones `.data` alone: it would cut a parameter off from the
        # views of its storage that a sharded lookup updates in backward, and drop the Python
        # attributes `in_backward_optimizer_filter` reads. Copying each parameter as a tensor
        # (the storage memo keeps views shared) and its attributes through the same memo
        # keeps both, pointing at the copy's own objects.
        for param in self.module.parameters():
            if id(param) not in memo:
                twin = nn.Parameter(copy.deepcopy(param.detach(), memo), param.requires_grad)
                memo[id(param)] = twin
                for key, value in vars(param).items():
                    setattr(twin, key, copy.deepcopy(value, memo))
        # DDP holds a reducer bound to this model's parameters; the copy builds its own.
        self._dmp_wrapped_module = self.module
        try:
            new = copy.deepcopy(self, memo)
        finally:
            self._dmp_wrapped_module = inner
        # Tensor hooks (a data-parallel table's gradient all-reduce) are not part of a deep
        # copy; each is re-registered on the copy, its closure copied through the memo so that
        # it refers to the copy's modules.
        for param in self.module.parameters():
            copied = memo[id(param)]
            assert isinstance(copied, Tensor)
            for attr, register in (
                ("_backward_hooks", copied.register_hook),
                ("_post_accumulate_grad_hooks", copied.register_post_accumulate_grad_hook),
            ):
                for hook in (getattr(param, attr, None) or {}).values():
                    register(_copy_function(hook, memo))  # type: ignore[no-untyped-call]  # register_hook is untyped in torch's stubs
        new._env = dataclasses.replace(self._env, device=target)
        new._device = target
        new._dmp_wrapped_module.to(target)
        if isinstance(inner, DistributedDataParallel):
            new.init_data_parallel()
        return new

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, nn.Parameter]]:
        yield from self.module.named_parameters(prefix, recurse, remove_duplicate)

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        yield from self.module.named_buffers(prefix, recurse, remove_duplicate)

    def state_dict(  # type: ignore[override]  # torch's overloads; the one form users call
        self, *, prefix: str = "", keep_vars: bool = False
    ) -> dict[str, object]:
        """The model's state_dict with the unsharded model's keys (sharded tables as
        ShardedTensors with this rank's shards)."""
        out: dict[str, object] = self.module.state_dict(prefix=prefix, keep_vars=keep_vars)
        return out

    def load_state_dict(
        self, state_dict: Mapping[str, object], strict: bool = True, assign: bool = False
    ) -> _IncompatibleKeys:
        """Load a state_dict with the unsharded model's keys (see `state_dict`)."""
        result: _IncompatibleKeys = self.module.load_state_dict(
            state_dict, strict=strict, assign=assign
        )
        return result


def get_module(module: nn.Module) -> nn.Module:
    """`module` without its `DistributedModelParallel` wrappers (a DDP wrapper stays)."""
    while isinstance(module, DistributedModelParallel):
        module = module._dmp_wrapped_module
    return module


def get_unwrapped_module(module: nn.Module) -> nn.Module:
    """`module` without its `DistributedModelParallel` and `DistributedDataParallel` wrappers."""
    while isinstance(module, DistributedModelParallel | DistributedDataParallel):
        inner = (
            module._dmp_wrapped_module
            if isinstance(module, DistributedModelParallel)
            else module.module
        )
        assert isinstance(inner, nn.Module)
        module = inner
    return module
