"""Distributed checkpoints of a `DistributedModelParallel` model and its optimizers.

A checkpoint is a `torch.distributed.checkpoint` (DCP) directory plus `shardrec.json` (format
version, world size, the plan as JSON). Sharded tables are saved as `ShardedTensor`s with their
global offsets, so DCP reads any other sharding of the same tables back: `load` into a model
with another plan or world size needs no conversion.

Nothing is lost on failure: every rank writes into `<path>.partial`; once every rank has
finished, rank 0 moves the previous checkpoint aside, renames the new one to `path` and deletes
the old one. A crash before that rename leaves the previous checkpoint at `path` untouched.

Nothing runs from a checkpoint and nothing damaged loads silently: `shardrec.json` records the
size and CRC-32 of every file, `load` verifies them all (each rank a share of the files) before
it reads a tensor, and reads `.metadata` and non-tensor values without ever unpickling code
(checkpoint_files.py, checkpoint_io.py; the trust model is in docs/checkpoints.md).
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Mapping

import torch
from torch import Tensor
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from shardrec_collectives import ShardingEnv, agree_on_error, all_gather_object, barrier
from shardrec_dmp.checkpoint_dynamic import apply_moves, plan_moves, strip_moved
from shardrec_dmp.checkpoint_files import (
    MANIFEST,
    CheckpointError,
    FileRecord,
    file_records,
    problems_of,
    read_manifest,
    record_of,
)
from shardrec_dmp.checkpoint_interchange import apply_swaps, plan_swaps
from shardrec_dmp.checkpoint_io import (
    DCP_METADATA,
    ChecksumWriter,
    SafeReader,
    read_dcp_metadata,
)
from shardrec_dmp.checkpoint_tiered import (
    TieredLoadPlanner,
    TieredSavePlanner,
    check_checkpoint_path,
    flush_tiered,
    refuse_store_dir,
)
from shardrec_dmp.checkpoint_virtual import restore_virtual_tiers, strip_tiers
from shardrec_dmp.model_parallel import DistributedModelParallel
from shardrec_tiered.checkpoint import streaming_state_dict

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "load",
    "read_metadata",
    "save",
    "saved_shapes",
    "verify",
]

FORMAT_VERSION = 1
"""Bumped whenever the layout of the saved state changes incompatibly (checksums were added
compatibly: a version-1 manifest without them loads unverified, with a warning)."""


def _state(
    model: DistributedModelParallel, optimizers: Mapping[str, torch.optim.Optimizer]
) -> dict[str, object]:
    # Tiered tables give StoreSlices, streamed from their stores (checkpoint_tiered).
    with streaming_state_dict():
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
    overlap: ValueError | None = None
    try:
        check_checkpoint_path(final, model)  # a store of this rank's (others may have none)
    except ValueError as err:
        overlap = err
    agree_on_error(env, overlap)
    flush_tiered(model)  # a full disk fails here, every rank, before anything is written
    if env.rank == 0 and os.path.exists(partial):
        shutil.rmtree(partial)  # left by an earlier crashed save
    barrier(env)
    state = _prune(_state(model, dict(optimizers or {})))
    assert isinstance(state, dict)
    writer = ChecksumWriter(partial)
    dcp_save(state, storage_writer=writer, planner=TieredSavePlanner(), process_group=env.pg)
    # Each rank checksummed the data files it wrote; DCP's `.metadata` is rank 0's.
    gathered = all_gather_object(env, writer.records)
    if env.rank == 0:
        files: dict[str, FileRecord] = {}
        for records in gathered:
            assert isinstance(records, dict)
            files.update(records)
        files[DCP_METADATA] = record_of(os.path.join(partial, DCP_METADATA))
        meta = {
            "format_version": FORMAT_VERSION,
            "world_size": env.world_size,
            "optimizers": sorted(optimizers or {}),
            "plan": json.loads(model.plan.to_json()),
            "files": dict(sorted(files.items())),
        }
        with open(os.path.join(partial, MANIFEST), "w") as f:
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
    """The checkpoint's `shardrec.json`: format version, world size, optimizer names, plan,
    and `files` (each file's size and CRC-32). A damaged one is a `CheckpointError` naming it;
    so is a tiered backing store given as a checkpoint."""
    refuse_store_dir(os.fspath(path))
    return read_manifest(path, FORMAT_VERSION)


def _unverified(checkpoint: str) -> str:
    return (
        f"checkpoint {checkpoint!r} has no checksums (saved by a shardrec before they were "
        "added): loading it unverified, a damaged weight would go unnoticed; save it again to "
        "add them"
    )


def _verify_shared(env: ShardingEnv, checkpoint: str, files: Mapping[str, FileRecord]) -> None:
    """Every file against the manifest, each rank checking every world_size-th one; every
    rank raises the same `CheckpointError` if any file fails (a collective)."""
    names = sorted(files)
    mine = problems_of(checkpoint, files, names[env.rank :: env.world_size])
    found: list[str] = []
    for problems in all_gather_object(env, mine):
        assert isinstance(problems, list)
        found += problems
    if found:
        more = f" (and {len(found) - 1} more damaged file(s))" if len(found) > 1 else ""
        raise CheckpointError(found[0] + more)


def verify(path: str | os.PathLike[str]) -> int:
    """Check every file of the checkpoint at `path` against its manifest in this process;
    returns the bytes checked. Raises `CheckpointError` naming the first damaged file. A
    checkpoint without checksums is reported with a warning and returns 0."""
    checkpoint = os.fspath(path)
    files = file_records(checkpoint, read_metadata(checkpoint))
    if files is None:
        warnings.warn(_unverified(checkpoint), UserWarning, stacklevel=2)
        return 0
    problems = problems_of(checkpoint, files, sorted(files))
    if problems:
        raise CheckpointError(problems[0])
    metadata = read_dcp_metadata(checkpoint)  # unpickles safely, or names what it refused
    SafeReader(checkpoint, metadata, set(files)).set_up_storage_reader(metadata, True)
    return sum(r["bytes"] for r in files.values())


def saved_shapes(path: str | os.PathLike[str]) -> dict[str, tuple[int, ...]]:
    """The global shape of every tensor the checkpoint holds, by DCP key (`model.<fqn>`,
    `optimizers.<name>.<...>`); reads only the manifest and `.metadata` (verified first)."""
    checkpoint = os.fspath(path)
    files = file_records(checkpoint, read_metadata(checkpoint))
    if files is not None and DCP_METADATA in files:
        problems = problems_of(checkpoint, files, [DCP_METADATA])
        if problems:
            raise CheckpointError(problems[0])
    metadata = read_dcp_metadata(checkpoint)
    return {
        key: tuple(int(n) for n in item.size)
        for key, item in metadata.state_dict_metadata.items()
        if isinstance(item, TensorStorageMetadata)
    }


def load(
    path: str | os.PathLike[str],
    model: DistributedModelParallel,
    optimizers: Mapping[str, torch.optim.Optimizer] | None = None,
    *,
    evict_to_fit: bool = False,
) -> None:
    """Load a checkpoint written by `save` into `model` and `optimizers`, in place.

    Dynamic (raw-id) tables saved under another plan, world size or capacity are re-partitioned
    by their ids' hash (checkpoint_dynamic; docs/dynamic.md); one saved with more slots than the
    module has is refused, or with `evict_to_fit` cut down by its eviction policy.
    A dynamic table saved in memory loads into the same table planned as a raw-id tier
    (`ssd_virtual_table` / `dram_virtual_table`) and a tier's into memory
    (checkpoint_interchange; docs/tiered.md "In memory <-> raw-id tier").

    The model may have another plan or world size than the one saved: each rank reads the
    rows and columns of its own shards (optimizer state reshards too as long as each table
    stays with the same optimizer: fused stays fused). `optimizers` must name saved optimizers.
    An optimizer whose state is created lazily (Adam) is initialized with its `init_state()`
    first, so a freshly built optimizer receives the saved state too.

    Before any tensor is read, every file is checked against the size and CRC-32 in the
    manifest (the ranks share the work); a mismatch, a damaged manifest or `.metadata`, or a
    file holding anything but tensors and plain values is a `CheckpointError` naming the file
    and the checkpoint, raised on every rank. A checkpoint saved without checksums loads with
    a warning that it is unverified.
    """
    model = _check(model)
    env: ShardingEnv = model.env
    checkpoint = os.fspath(path)
    opts = dict(optimizers or {})
    meta = read_metadata(checkpoint)
    saved = meta.get("optimizers")
    assert isinstance(saved, list)
    missing = sorted(set(opts) - {str(s) for s in saved})
    if missing:
        raise ValueError(
            f"optimizers {missing} are not in checkpoint {checkpoint!r} (saved: {saved})"
        )
    files = file_records(checkpoint, meta)
    if files is None:
        if env.rank == 0:
            warnings.warn(_unverified(checkpoint), UserWarning, stacklevel=2)
    else:
        _verify_shared(env, checkpoint, files)
    metadata = read_dcp_metadata(checkpoint)
    for opt in opts.values():
        _init_lazy_state(opt)
    state = _state(model, opts)
    # Dynamic tables saved under another layout are read whole afterwards (checkpoint_dynamic).
    shapes = _shapes(metadata)
    # Dynamic tables saved in memory into a raw-id tier and back (checkpoint_interchange).
    swaps = plan_swaps(model, shapes, checkpoint, evict_to_fit=evict_to_fit)
    skip = {s.move.weight_key for s in swaps}
    moves = plan_moves(model, meta, shapes, checkpoint, evict_to_fit=evict_to_fit, skip=skip)
    stripped = moves + [s.move for s in swaps]
    loadable = strip_moved(state, stripped) if stripped else state
    # Raw-id tiers' entries hold the saved number of ids: read afterwards (checkpoint_virtual).
    loadable = strip_tiers(loadable, model)
    pruned = _prune(loadable)
    assert isinstance(pruned, dict)
    reader = SafeReader(checkpoint, metadata, None if files is None else set(files))
    try:
        dcp_load(pruned, storage_reader=reader, planner=TieredLoadPlanner(), process_group=env.pg)
    except CheckpointException as err:
        # DCP gathers every rank's failure; a damaged or crafted file is reported as itself.
        for failure, _ in err.failures.values():
            if isinstance(failure, CheckpointError):
                raise CheckpointError(str(failure)) from None
        raise
    _merge(loadable, pruned)
    if stripped:
        loadable = strip_tiers(_refill(loadable, state), model)
    loaded = loadable["model"]
    assert isinstance(loaded, Mapping)
    model.load_state_dict(loaded)
    optim_states = loadable["optimizers"]
    assert isinstance(optim_states, Mapping)
    for name, opt in opts.items():
        opt.load_state_dict(optim_states[name])
    if moves:
        apply_moves(
            model,
            moves,
            sorted(opts),
            shapes,
            SafeReader(checkpoint, metadata, None if files is None else set(files)),
            evict_to_fit=evict_to_fit,
        )
    restore_virtual_tiers(
        model,
        shapes,
        SafeReader(checkpoint, metadata, None if files is None else set(files)),
        checkpoint,
    )
    if swaps:
        apply_swaps(
            model,
            swaps,
            shapes,
            SafeReader(checkpoint, metadata, None if files is None else set(files)),
            evict_to_fit=evict_to_fit,
        )


def _shapes(metadata: object) -> dict[str, tuple[int, ...]]:
    items = getattr(metadata, "state_dict_metadata", {})
    return {
        key: tuple(int(n) for n in item.size)
        for key, item in items.items()
        if isinstance(item, TensorStorageMetadata)
    }


def _refill(loaded: Mapping[str, object], current: Mapping[str, object]) -> dict[str, object]:
    """`loaded` with the entries `strip_moved` took out put back at their current values (the
    model and optimizers load them unchanged; `apply_moves` then sets them)."""
    model: dict[str, object] = {**current["model"], **loaded["model"]}  # type: ignore[dict-item]  # both dicts
    opts: dict[str, object] = {}
    for name, sd in dict(loaded["optimizers"]).items():  # type: ignore[call-overload]  # a dict
        cur = current["optimizers"][name]  # type: ignore[index]  # a dict
        if isinstance(sd, Mapping) and isinstance(sd.get("state"), Mapping):
            opts[name] = {**sd, "state": {**cur["state"], **sd["state"]}}
        else:
            opts[name] = sd
    return {"model": model, "optimizers": opts}
