"""Reading and writing a checkpoint's files without trusting them.

DCP's own reader unpickles `.metadata` with `pickle.load`, and its default load planner
restores non-tensor values (optimizer hyper-parameters) with `torch.load(weights_only=False)`:
either runs any code a crafted checkpoint carries. Here instead

- `read_dcp_metadata` unpickles `.metadata` with an allowlist: DCP's metadata dataclasses,
  `torch.Size`, dtypes, layouts and paths, the globals DCP's own `.metadata` holds. Anything
  else is a `CheckpointError` naming the file and the global, raised before it is called;
- `SafeReader` (a `FileSystemReader`) takes that pre-read metadata, refuses storage paths
  that are not files listed in the manifest, and reports any failure to read a data file as
  a `CheckpointError` naming it (tensors are read with `weights_only=True` by DCP itself);
- `SafePlanner` (a `DefaultLoadPlanner`) restores non-tensor values with
  `torch.load(weights_only=True)`, which admits plain containers and numbers only;
- `ChecksumWriter` (a `FileSystemWriter`) records the size and CRC-32 of each data file it
  wrote, while the file is still in the page cache.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import os
import pathlib
import pickle
from collections.abc import Collection
from typing import IO

import torch
import torch.distributed.checkpoint.metadata as dcp_metadata
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import (
    FileSystemReader,
    FileSystemWriter,
    _StorageInfo,
)
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import (
    LoadPlan,
    LoadPlanner,
    ReadItem,
    SavePlan,
    SavePlanner,
)
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from shardrec_dmp.checkpoint_files import CheckpointError, FileRecord, record_of

__all__ = [
    "DCP_METADATA",
    "ChecksumWriter",
    "SafePlanner",
    "SafeReader",
    "read_dcp_metadata",
]

DCP_METADATA = ".metadata"
"""DCP's index of the checkpoint: which file and byte range holds each tensor and value."""

_DCP_CLASSES = (
    "BytesStorageMetadata",
    "ChunkStorageMetadata",
    "Metadata",
    "MetadataIndex",
    "StorageMeta",
    "TensorProperties",
    "TensorStorageMetadata",
    "_MEM_FORMAT_ENCODING",
)
_ALLOWED: dict[tuple[str, str], object] = {
    **{(dcp_metadata.__name__, n): getattr(dcp_metadata, n) for n in _DCP_CLASSES},
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"): _StorageInfo,
    ("torch", "Size"): torch.Size,
    # A layout pickles as a call of this lookup by name (torch/serialization.py).
    ("torch.serialization", "_get_layout"): torch.serialization._get_layout,
    ("collections", "OrderedDict"): collections.OrderedDict,
    **{("pathlib", n): getattr(pathlib, n) for n in ("PosixPath", "PurePosixPath")},
    **{("pathlib", n): getattr(pathlib, n) for n in ("WindowsPath", "PureWindowsPath")},
}


class _MetadataUnpickler(pickle.Unpickler):
    """`pickle.Unpickler` that resolves only the allowlisted globals (and dtypes): every
    call or object creation in a pickle goes through `find_class` first, so nothing outside
    the list can be reached, let alone run."""

    def __init__(self, file: IO[bytes], where: str) -> None:
        super().__init__(file)
        self.where = where

    def find_class(self, module: str, name: str) -> object:
        found = _ALLOWED.get((module, name))
        if (
            found is None
            and module == "torch"
            and isinstance(getattr(torch, name, None), torch.dtype)
        ):
            found = getattr(torch, name)
        if found is None:
            raise CheckpointError(
                f"{self.where} refers to {module}.{name}, which a DCP metadata file never "
                "holds; it was not unpickled (nothing from it ran). The file is damaged or was "
                "crafted: do not load this checkpoint"
            )
        return found

    def persistent_load(self, pid: object) -> object:
        raise CheckpointError(f"{self.where} holds a persistent id, which DCP never writes")


def read_dcp_metadata(checkpoint: str) -> Metadata:
    """The checkpoint's DCP `Metadata`, unpickled with the allowlist."""
    where = f"checkpoint {checkpoint!r}: file {DCP_METADATA!r}"
    path = os.path.join(checkpoint, DCP_METADATA)
    if not os.path.isfile(path):
        raise CheckpointError(f"{where} is missing; load an earlier checkpoint")
    with open(path, "rb") as f:
        data = f.read()
    try:
        metadata = _MetadataUnpickler(io.BytesIO(data), where).load()
    except CheckpointError:
        raise
    except Exception as err:  # any malformed pickle: EOFError, UnpicklingError, TypeError...
        raise CheckpointError(
            f"{where} cannot be read ({type(err).__name__}: {err}); load an earlier checkpoint"
        ) from None
    if not isinstance(metadata, Metadata) or not isinstance(metadata.storage_data, dict):
        raise CheckpointError(
            f"{where} holds a {type(metadata).__name__}, not DCP metadata; load an earlier "
            "checkpoint"
        )
    return metadata


class SafeReader(FileSystemReader):
    """DCP's file reader over `metadata` read by `read_dcp_metadata` (never by pickle), reading
    only the files in `allowed` (the manifest's; None for a checkpoint without one)."""

    def __init__(
        self, checkpoint: str, metadata: Metadata, allowed: Collection[str] | None
    ) -> None:
        super().__init__(checkpoint)
        self._checkpoint = checkpoint
        self._metadata = metadata
        self._allowed = allowed

    def read_metadata(self, *args: object, **kwargs: object) -> Metadata:
        if kwargs.get("rank") is not None:
            # DCP asks for rank-local metadata only when the global one failed to load.
            raise CheckpointError(f"checkpoint {self._checkpoint!r} has no usable metadata")
        if self._metadata.storage_meta is None:
            self._metadata.storage_meta = dcp_metadata.StorageMeta()
        self._metadata.storage_meta.load_id = self.load_id
        return self._metadata

    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: object, **kwargs: object
    ) -> None:
        for info in metadata.storage_data.values():
            name = getattr(info, "relative_path", None)
            plain = isinstance(name, str) and os.path.basename(name) == name
            if (
                not plain
                or name in ("", ".", "..")
                or (self._allowed is not None and name not in self._allowed)
            ):
                raise CheckpointError(
                    f"checkpoint {self._checkpoint!r}: {DCP_METADATA!r} points at {name!r}, "
                    "which is not a data file listed in the manifest; the metadata is damaged "
                    "or was crafted: load an earlier checkpoint"
                )
        super().set_up_storage_reader(metadata, is_coordinator, *args, **kwargs)

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        by_file: dict[str, list[ReadItem]] = {}
        for item in plan.items:
            by_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
        for name, items in by_file.items():
            try:
                super().read_data(dataclasses.replace(plan, items=items), planner).wait()
            except AssertionError:
                raise  # DCP's own size checks: a model that does not fit, not a bad file
            except Exception as err:
                first = str(err).strip().splitlines()[0] if str(err).strip() else ""
                raise CheckpointError(
                    f"checkpoint {self._checkpoint!r}: file {name!r} cannot be read "
                    f"({type(err).__name__}: {first}); the file is damaged or was crafted: "
                    "load an earlier checkpoint"
                ) from None
        done: Future[None] = Future()
        done.set_result(None)
        return done


class SafePlanner(DefaultLoadPlanner):
    """DCP's default load planner, restoring non-tensor values with `weights_only=True`."""

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        fqn = read_item.dest_index.fqn
        try:
            obj = torch.load(value, weights_only=True)
        except pickle.UnpicklingError as err:
            first = str(err).strip().splitlines()[0]
            raise pickle.UnpicklingError(
                f"entry {fqn!r} holds an object that only a full unpickle could restore; "
                f"refused, nothing ran ({first})"
            ) from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], obj)
        else:
            self.state_dict[fqn] = obj


class ChecksumWriter(FileSystemWriter):
    """DCP's file writer that also records `{file name: record}` of the files it wrote."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.records: dict[str, FileRecord] = {}

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        fut = super().write_data(plan, planner)
        for result in fut.wait():
            name = result.storage_data.relative_path
            if name not in self.records:
                self.records[name] = record_of(os.path.join(os.fspath(self.path), name))
        return fut
