"""Tiered tables (rows on disk behind a cache) in checkpoints: streamed, never whole in memory.

`save` and `load` take the model's state inside `shardrec_tiered.streaming_state_dict()`, so a
tiered table's weight and optimizer state are `StoreSlice`s placed at the table's global
offsets, with the keys and global shapes of the same table held in memory. The planners here
move them a chunk of rows at a time:

```
save   TieredSavePlanner.resolve_data: chunk -> store rows read (dirty cached rows written back
       first) -> DCP writes it (and checksums it, as every file)
load   TieredLoadPlanner: a buffer per read piece -> DCP fills it -> write_region: the rows it
       covers read, patched, written to the store; their cached copies re-read
```

DCP saves chunks with their global offsets, so a tiered checkpoint loads into in-memory tables
and back, and into another plan or world size, inside the usual manifest and checksum checks.

A store is never a checkpoint: `refuse_store_dir` names a store directory given to `load` /
`verify`, and `check_checkpoint_path` refuses a checkpoint path inside a store directory or
holding one (a publish would delete it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor
from torch.distributed.checkpoint._nested_dict import flatten_state_dict
from torch.distributed.checkpoint._sharded_tensor_utils import _flatten_sharded_tensors
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.planner import ReadItem, WriteItem

from shardrec_collectives import agree_on_error
from shardrec_dmp.checkpoint_files import MANIFEST, CheckpointError
from shardrec_dmp.checkpoint_io import SafePlanner
from shardrec_dmp.model_parallel import DistributedModelParallel
from shardrec_tiered import TieredFusedEmbeddingBag
from shardrec_tiered.checkpoint import StreamedTensor
from shardrec_tiered.layout import MAGIC

__all__ = [
    "TieredLoadPlanner",
    "TieredSavePlanner",
    "check_checkpoint_path",
    "flush_tiered",
    "refuse_store_dir",
    "tiered_modules",
]


class TieredSavePlanner(DefaultSavePlanner):
    """DCP's save planner; a `StoreSlice`'s chunks are read from its store when written."""

    def resolve_data(self, write_item: WriteItem) -> Any:
        obj = self.state_dict.get(write_item.index.fqn)
        if isinstance(obj, StreamedTensor):
            chunk = write_item.tensor_data.chunk  # type: ignore[union-attr]  # a tensor item
            return obj.read_chunk(chunk.offsets, chunk.sizes)
        return super().resolve_data(write_item)


class TieredLoadPlanner(SafePlanner):
    """The safe load planner; a piece loaded into a `StoreSlice` is written to its store."""

    def set_up_planner(
        self, state_dict: dict[str, Any], metadata: Any = None, is_coordinator: bool = False
    ) -> None:
        # DCP's set-up replaces, in place, every value it does not know by None (its
        # `_init_state_dict`): put the slices back and flatten again.
        slices = list(_slices_in(state_dict))
        super().set_up_planner(state_dict, metadata, is_coordinator)
        if not slices:
            return
        for container, key, value in slices:
            container[key] = value
        flat: dict[str, Any] = self.original_state_dict
        if self.flatten_sharded_tensors:
            flat = _flatten_sharded_tensors(flat)
        if self.flatten_state_dict:
            flat, self.mappings = flatten_state_dict(flat)
        self.state_dict = flat

    def resolve_tensor(self, read_item: ReadItem) -> Tensor:
        obj = self.state_dict.get(read_item.dest_index.fqn)
        if isinstance(obj, StreamedTensor):
            return torch.empty(tuple(read_item.lengths), dtype=obj.dtype)
        result: Tensor = super().resolve_tensor(read_item)
        return result

    def commit_tensor(self, read_item: ReadItem, tensor: Tensor) -> None:
        obj = self.state_dict.get(read_item.dest_index.fqn)
        if isinstance(obj, StreamedTensor):
            base = read_item.dest_index.offset
            assert base is not None
            offsets = [int(a) + int(b) for a, b in zip(base, read_item.dest_offsets, strict=True)]
            obj.write_region(offsets, tensor)
            return
        super().commit_tensor(read_item, tensor)


def _slices_in(tree: object) -> Iterator[tuple[Any, Any, StreamedTensor]]:
    """(container, key, slice) of every StoreSlice in nested dicts and lists."""
    items = (
        tree.items()
        if isinstance(tree, dict)
        else enumerate(tree)
        if isinstance(tree, list)
        else ()
    )
    for key, value in items:
        if isinstance(value, StreamedTensor):
            yield tree, key, value
        else:
            yield from _slices_in(value)


def tiered_modules(model: DistributedModelParallel) -> Iterator[TieredFusedEmbeddingBag]:
    """The tiered lookups of `model`'s sharded collections on this rank."""
    for module in model.sharded_modules.values():
        for strategy in getattr(module, "_strategies", []):
            found = getattr(strategy.lookup, "tiered_modules", None)
            if callable(found):
                yield from found()


def flush_tiered(model: DistributedModelParallel) -> None:
    """Write every tiered table's dirty cached rows back to its store, before a save touches
    anything: a failed write-back (a full disk) raises here, on every rank (the failing one
    its own `StoreIOError` naming the table, bytes and path), and no checkpoint is begun."""
    error: BaseException | None = None
    try:
        for module in tiered_modules(model):
            module.flush()
        from shardrec_dmp.checkpoint_virtual import flush_virtual  # it imports this module

        flush_virtual(model)
    except OSError as err:
        error = err
    agree_on_error(model.env, error)


def _store_dirs(model: DistributedModelParallel) -> list[str]:
    # the flat-file stores (a raw-id table's key-value store names no single file)
    paths = [
        getattr(cache.store, "path", None) for m in tiered_modules(model) for cache in m.caches
    ]
    from shardrec_dmp.checkpoint_virtual import virtual_tiers  # it imports this module

    for _, part in virtual_tiers(model):  # a raw-id tier's RocksDB directory
        if part.cache is not None:
            paths.append(getattr(getattr(part.cache.store, "kv", None), "path", None))
    return sorted({os.path.dirname(os.path.realpath(p)) for p in paths if isinstance(p, str)})


def _inside(child: str, parent: str) -> bool:
    return os.path.commonpath([child, parent]) == parent


def check_checkpoint_path(path: str, model: DistributedModelParallel) -> None:
    """Refuse a checkpoint path inside a tiered store directory of `model`, or one that holds
    such a directory (publishing a checkpoint replaces its directory: the store would go)."""
    final = os.path.realpath(path)
    for store in _store_dirs(model):
        for where in (final, final + ".partial"):
            if _inside(where, store) or _inside(store, where):
                raise ValueError(
                    f"checkpoint path {path!r} and the tiered store directory {store!r} overlap; "
                    "a store is scratch of the running job, not a checkpoint: save checkpoints "
                    "outside every KeyValueParams.ssd_storage_directory (and vice versa)"
                )


def _is_store_file(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def refuse_store_dir(path: str) -> None:
    """`CheckpointError` if `path` (no checkpoint manifest) is a tiered store directory or
    file, or holds `rank-<r>` store directories: the backing store of a run, not a checkpoint."""
    if os.path.isfile(os.path.join(path, MANIFEST)):
        return
    candidates = [path]
    if os.path.isdir(path):
        for name in sorted(os.listdir(path)):
            full = os.path.join(path, name)
            candidates.append(full)
            if name.startswith("rank-") and os.path.isdir(full):
                candidates += [os.path.join(full, n) for n in sorted(os.listdir(full))]
    stores = [c for c in candidates if c.endswith(".tier") and _is_store_file(c)]
    if os.path.isfile(path) and _is_store_file(path):
        stores.append(path)
    if stores:
        raise CheckpointError(
            f"{path!r} is not a checkpoint: it holds the tiered backing store {stores[0]!r} "
            "(scratch of a running job, possibly interrupted mid-write: never a consistent "
            "state). Load a checkpoint written by shardrec_dmp.save instead (a directory with "
            f"{MANIFEST})"
        )
