"""`get_unsharded_module_names`: the top-level modules of a model that hold no sharded module.

A module counts as sharded when a `DistributedModelParallel` inside the model (the model itself
included) replaced it with its sharder's output, or when it is one of shardrec's sharded
collections (a module that `sharder.shard(...)` returned outside a DMP). The walk starts at the
root: a child holding no sharded module is reported by its full path, and a child holding one
is walked into, so the names are the largest subtrees that data parallelism can wrap.
"""

from __future__ import annotations

from torch import nn

from shardrec_dmp.model_parallel import DistributedModelParallel
from shardrec_sharding import (
    ShardedEmbeddingBagCollection,
    ShardedEmbeddingCollection,
    ShardedQuantEmbeddingBagCollection,
    ShardedQuantEmbeddingCollection,
)

__all__ = ["get_unsharded_module_names"]

_SHARDED_TYPES = (
    ShardedEmbeddingBagCollection,
    ShardedEmbeddingCollection,
    ShardedQuantEmbeddingBagCollection,
    ShardedQuantEmbeddingCollection,
)


def get_unsharded_module_names(model: nn.Module) -> list[str]:
    """Paths (sorted) of the modules without sharded submodules whose parent holds one.

    Without any sharded module in `model` the list is empty (TorchRec's rule: nothing is
    reported below a parent that holds no sharded module).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    sharded = {
        id(sub)
        for m in model.modules()
        if isinstance(m, DistributedModelParallel)
        for sub in m.sharded_modules.values()
    }
    names: list[str] = []

    def holds_sharded(module: nn.Module, prefix: str) -> bool:
        children = list(module.named_children())
        has = {
            name: id(child) in sharded
            or isinstance(child, _SHARDED_TYPES)
            or holds_sharded(child, f"{prefix}{name}.")
            for name, child in children
        }
        if any(has.values()):
            names.extend(prefix + name for name, _ in children if not has[name])
        return any(has.values())

    holds_sharded(model, "")
    return sorted(names)
