"""Distributed checkpoints of a `DistributedModelParallel` model and its optimizers.

A checkpoint is a `torch.distributed.checkpoint` (DCP) directory plus `shardrec.json` (format
version, world size, the plan as JSON). Sharded tables are saved as `ShardedTensor`s with their
global offsets, so DCP reads any other sharding of the same tables back: `load` into a model
with another plan or world size needs no conversion.

Nothing is lost on failure: every rank writes into `<path>.partial`; once every rank has
finished, rank 0 moves the previous checkpoint aside, renames the new one to `path` and deletes
the old one. A crash before that rename leaves the previous checkpoint at `path` untouched.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping

import torch
from torch import Tensor
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from shardrec_collectives import ShardingEnv, barrier
from shardrec_dmp.model_parallel import DistributedModelParallel

__all__ = ["FORMAT_VERSION", "load", "read_metadata", "save"]

FORMAT_VERSION = 1
"""Bumped whenever the layout of the saved state changes incompatibly."""

_META = "shardrec.json"


def _state(
    model: DistributedModelParallel, optimizers: Mapping[str, torch.optim.Optimizer]
) -> dict[str, object]:
    return {
        "model": model.state_dict(),
        "optimizers": {name: opt.state_dict() for name, opt in optimizers.items()},
    }


def _prune(value: object) -> object:
    """`value` without empty dicts and lists: DCP saves nothing for them, and then cannot find
    them when loading (a rank without fused tables has an empty fused optimizer state)."""
    if isinstance(value, Mapping):
        out = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if not (isinstance(v, dict | list) and not v)}
    if isinstance(value, list):
        kept = [_prune(v) for v in value]
        return [v for v in kept if not (isinstance(v, dict | list) and not v)]
    return value


def _merge(into: object, loaded: object) -> object:
    """`into` with every leaf DCP loaded (scalars are replaced, tensors were filled in place)."""
    if isinstance(into, dict) and isinstance(loaded, Mapping):
        for k, v in loaded.items():
            into[k] = _merge(into[k], v) if k in into else v
        return into
    if isinstance(into, list) and isinstance(loaded, list) and len(into) == len(loaded):
        return [_merge(a, b) for a, b in zip(into, loaded, strict=True)]
    return loaded


def _init_lazy_state(opt: torch.optim.Optimizer) -> None:
    """Give `opt` the state entries a step would create (Adam's are created on the first
    step), so that DCP finds a tensor to load each saved entry into; a fresh optimizer would
    otherwise load nothing and silently restart from empty state. Uses the optimizer's
    `init_state()` (a step on zero gradients; `KeyedOptimizer` has it) and puts the
    parameters' gradients back afterwards. Parameters are then overwritten by the load."""
    init = getattr(opt, "init_state", None)
    params = getattr(opt, "params", None)
    if not callable(init) or not isinstance(params, Mapping):
        return
    trainable = [p for p in params.values() if isinstance(p, Tensor) and p.requires_grad]
    if all(opt.state.get(p) for p in trainable):
        return
    grads = [(p, p.grad) for p in trainable]
    init()
    for p, grad in grads:
        p.grad = grad


def _check(model: object) -> DistributedModelParallel:
    if not isinstance(model, DistributedModelParallel):
        raise TypeError(
            f"checkpoints are of a DistributedModelParallel model, got {type(model).__name__}"
        )
    return model


def save(
    path: str | os.PathLike[str],
    model: DistributedModelParallel,
    optimizers: Mapping[str, torch.optim.Optimizer] | None = None,
) -> None:
    """Save `model` (its tables, dense parameters and buffers) and `optimizers` at `path`.

    Every rank calls it with the same `path` (a directory on storage all ranks share).
    `optimizers` maps a name to an optimizer whose `state_dict()` DCP can save (keyed
    optimizers: `model.fused_optimizer`, `KeyedOptimizerWrapper`, `CombinedOptimizer`).
    """
    model = _check(model)
    env: ShardingEnv = model.env
    final = os.fspath(path)
    partial = final + ".partial"
    if env.rank == 0 and os.path.exists(partial):
        shutil.rmtree(partial)  # left by an earlier crashed save
    barrier(env)
    state = _prune(_state(model, dict(optimizers or {})))
    assert isinstance(state, dict)
    dcp_save(state, checkpoint_id=partial, process_group=env.pg)
    if env.rank == 0:
        meta = {
            "format_version": FORMAT_VERSION,
            "world_size": env.world_size,
            "optimizers": sorted(optimizers or {}),
            "plan": json.loads(model.plan.to_json()),
        }
        with open(os.path.join(partial, _META), "w") as f:
            json.dump(meta, f)
    # Every rank's shards are on disk before the checkpoint becomes visible under `path`.
    barrier(env)
    if env.rank == 0:
        _publish(partial, final)
    barrier(env)


def _publish(partial: str, final: str) -> None:
    """Make the finished `partial` checkpoint the one at `final` (rank 0, after every rank
    wrote). Between the two renames `final` is missing but `<final>.old` holds it."""
    old = final + ".old"
    if os.path.exists(old):
        shutil.rmtree(old)
    if os.path.exists(final):
        os.replace(final, old)
    os.replace(partial, final)
    if os.path.exists(old):
        shutil.rmtree(old)


def read_metadata(path: str | os.PathLike[str]) -> dict[str, object]:
    """The checkpoint's `shardrec.json`: format version, world size, optimizer names, plan."""
    file = os.path.join(os.fspath(path), _META)
    if not os.path.isfile(file):
        raise FileNotFoundError(f"{os.fspath(path)!r} is not a shardrec checkpoint (no {_META})")
    with open(file) as f:
        meta: dict[str, object] = json.load(f)
    version = meta.get("format_version")
    if version != FORMAT_VERSION:
        raise ValueError(
            f"checkpoint {os.fspath(path)!r} has format version {version!r}; this shardrec "
            f"reads version {FORMAT_VERSION}"
        )
    return meta


def load(
    path: str | os.PathLike[str],
    model: DistributedModelParallel,
    optimizers: Mapping[str, torch.optim.Optimizer] | None = None,
) -> None:
    """Load a checkpoint written by `save` into `model` and `optimizers`, in place.

    The model may have another plan or world size than the one saved: each rank reads the
    rows and columns of its own shards (optimizer state reshards too as long as each table
    stays with the same optimizer: fused stays fused). `optimizers` must name saved optimizers.
    An optimizer whose state is created lazily (Adam) is initialized with its `init_state()`
    first, so a freshly built optimizer receives the saved state too.
    """
    model = _check(model)
    opts = dict(optimizers or {})
    meta = read_metadata(path)
    saved = meta.get("optimizers")
    assert isinstance(saved, list)
    missing = sorted(set(opts) - {str(s) for s in saved})
    if missing:
        raise ValueError(
            f"optimizers {missing} are not in checkpoint {os.fspath(path)!r} (saved: {saved})"
        )
    for opt in opts.values():
        _init_lazy_state(opt)
    state = _state(model, opts)
    pruned = _prune(state)
    assert isinstance(pruned, dict)
    dcp_load(pruned, checkpoint_id=os.fspath(path), process_group=model.env.pg)
    _merge(state, pruned)
    loaded = state["model"]
    assert isinstance(loaded, Mapping)
    model.load_state_dict(loaded)
    optim_states = state["optimizers"]
    assert isinstance(optim_states, Mapping)
    for name, opt in opts.items():
        opt.load_state_dict(optim_states[name])
