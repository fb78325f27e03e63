"""Checkpoints of tiered tables: state_dict values that stream from the store.

A tiered table has no weight tensor in memory, so its `state_dict()` value is read from the
store. Two forms:

- plain `state_dict()`: a tensor holding the table (read whole after the dirty rows are
  written back), with the key and shape of the in-memory table's `weight` (optimizer state
  likewise, through `fused_optimizer.state_dict()`), so it loads into an in-memory table and
  back;
- inside `streaming_state_dict()` (what `shardrec_dmp.save` / `load` use): a `StoreSlice`, a
  stand-in that names columns of the store's rows and their place in the global tensor. DCP
  saves it a chunk of rows at a time (`read_chunk`, at most `CHUNK_BYTES` of store rows) and
  loads into it a piece at a time (`write_region`: read, patch, write back the covered rows),
  so no table is ever whole in memory.

```
store row   | weight (dim) | momentum1 | momentum2 |      StoreSlice(col=0, width=dim): the weight
                                                           StoreSlice(col=dim, width=1, vector): a
                                                           rowwise optimizer's state
```

Loading writes into the store and refreshes the cached copies of the rows written (dirty
cached rows are written back first), so the cache and the store agree at every step.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from shardrec_optim import FusedEmbeddingOptimizer, FusedOptimSpec
from shardrec_optim.rules import RULES

if TYPE_CHECKING:
    from shardrec_tiered.lookup import TieredFusedEmbeddingBag

__all__ = [
    "CHUNK_BYTES",
    "StoreSlice",
    "StreamedTensor",
    "TieredFusedOptimizer",
    "is_streaming",
    "streaming_state_dict",
]

CHUNK_BYTES = 64 << 20
"""Save and load move at most this many bytes of store rows at a time (read at call time)."""

_STREAMING: contextvars.ContextVar[bool] = contextvars.ContextVar("tiered_streaming", default=False)


@contextlib.contextmanager
def streaming_state_dict() -> Iterator[None]:
    """Within it, tiered tables' state_dict values are `StoreSlice`s instead of tensors."""
    token = _STREAMING.set(True)
    try:
        yield
    finally:
        _STREAMING.reset(token)


def is_streaming() -> bool:
    return _STREAMING.get()


@dataclasses.dataclass(frozen=True)
class _Piece:
    """`width` store columns from `col`, at `offsets` of the global tensor (all local rows)."""

    col: int
    width: int
    offsets: tuple[int, ...]


class StreamedTensor:
    """A stand-in for a tensor in a streaming state_dict: DCP saves its `chunks()` one at a
    time (`read_chunk`) and loads into it a piece at a time (`write_region`), through the
    planners of shardrec_dmp.checkpoint_tiered. `size()`: the global tensor's."""

    dtype = torch.float32

    def size(self) -> torch.Size:
        raise NotImplementedError

    def chunks(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """`(global offsets, sizes)` of each chunk DCP saves."""
        raise NotImplementedError

    def read_chunk(self, offsets: Sequence[int], sizes: Sequence[int]) -> Tensor:
        raise NotImplementedError

    def write_region(self, offsets: Sequence[int], value: Tensor) -> None:
        raise NotImplementedError

    def __deepcopy__(self, memo: dict[int, object]) -> StreamedTensor:
        return self  # a reference to a store, as a tensor view refers to its storage

    def __create_write_items__(self, fqn: str, obj: object) -> list[Any]:
        from torch.distributed.checkpoint.metadata import (
            ChunkStorageMetadata,
            MetadataIndex,
            TensorProperties,
        )
        from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType

        return [
            WriteItem(
                index=MetadataIndex(fqn, torch.Size(offsets)),
                type=WriteItemType.SHARD,
                tensor_data=TensorWriteData(
                    chunk=ChunkStorageMetadata(
                        offsets=torch.Size(offsets), sizes=torch.Size(sizes)
                    ),
                    properties=TensorProperties(dtype=self.dtype),
                    size=self.size(),
                ),
            )
            for offsets, sizes in self.chunks()
        ]

    def __create_chunk_list__(self) -> list[Any]:
        from torch.distributed.checkpoint.metadata import ChunkStorageMetadata

        return [
            ChunkStorageMetadata(offsets=torch.Size(o), sizes=torch.Size(s))
            for o, s in self.chunks()
        ]


class StoreSlice(StreamedTensor):
    """Columns of every row of one tiered table's store, standing in for a tensor in a
    streaming state_dict (module docstring). `shape`: the local tensor's; `size()`: the global
    one (DCP compares it with the saved size)."""

    def __init__(
        self,
        owner: TieredFusedEmbeddingBag,
        table: int,
        pieces: Sequence[_Piece],
        global_size: Sequence[int],
        *,
        vector: bool = False,
    ) -> None:
        self.owner = owner
        self.table = table
        self.pieces = tuple(pieces)
        self.global_size = torch.Size(global_size)
        self.vector = vector
        self.rows = owner.table_specs[table].num_rows

    @classmethod
    def local(
        cls, owner: TieredFusedEmbeddingBag, table: int, col: int, width: int, *, vector: bool
    ) -> StoreSlice:
        rows = owner.table_specs[table].num_rows
        size = (rows,) if vector else (rows, width)
        return cls(owner, table, [_Piece(col, width, (0,) * len(size))], size, vector=vector)

    @property
    def shape(self) -> torch.Size:
        width = sum(p.width for p in self.pieces)
        return torch.Size((self.rows,) if self.vector else (self.rows, width))

    def dim(self) -> int:
        return len(self.shape)

    def size(self) -> torch.Size:
        return self.global_size

    def numel(self) -> int:
        return int(np.prod(self.shape))

    def placed(
        self,
        blocks: Sequence[tuple[int, int, Sequence[int]]],
        global_size: Sequence[int],
        *,
        vector: bool | None = None,
    ) -> StoreSlice:
        """This slice's local columns `[start, start + n)` of each `(start, n, offsets)` block
        at `offsets` of a global tensor of `global_size` (a sharded table's shards).
        vector: the placed form is 1-D (default: as this one)."""
        assert len(self.pieces) == 1, "place a local slice"
        base = self.pieces[0]
        pieces = [_Piece(base.col + s, n, tuple(o)) for s, n, o in blocks]
        return StoreSlice(
            self.owner,
            self.table,
            pieces,
            global_size,
            vector=self.vector if vector is None else vector,
        )

    def same_place(self, other: object) -> bool:
        """Whether `other` names exactly the store columns this one does (loading it into
        this one has nothing to do: DCP wrote it in place)."""
        return (
            isinstance(other, StoreSlice)
            and other.owner is self.owner
            and other.table == self.table
            and [(p.col, p.width) for p in other.pieces] == [(p.col, p.width) for p in self.pieces]
        )

    def __repr__(self) -> str:
        name = self.owner.table_specs[self.table].name
        return f"StoreSlice({name!r}, shape={tuple(self.shape)}, size={tuple(self.size())})"

    # -- whole (plain state_dict, small tables) ---------------------------------------------

    def read(self) -> Tensor:
        """The local tensor, read whole from the store."""
        blocks = [
            self.owner.read_columns(self.table, 0, self.rows, p.col, p.width) for p in self.pieces
        ]
        out = blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=1)
        return out.reshape(self.shape)

    def write(self, value: Tensor) -> None:
        """Write the local tensor `value` (this slice's shape) into the store, in chunks."""
        if tuple(value.shape) != tuple(self.shape):
            raise ValueError(
                f"{self!r}: cannot load a tensor of shape {tuple(value.shape)} into it"
            )
        value = value.detach().reshape(self.rows, -1)
        step = self._chunk_rows()
        for lo in range(0, self.rows, step):
            hi = min(self.rows, lo + step)
            col = 0
            for p in self.pieces:
                self.owner.write_columns(self.table, lo, p.col, value[lo:hi, col : col + p.width])
                col += p.width

    # -- DCP's checkpointable protocol (save: write items and chunk reads; load: regions) ----

    def _chunk_rows(self) -> int:
        from shardrec_tiered import checkpoint

        return max(
            1, checkpoint.CHUNK_BYTES // self.owner.caches[self.table].store.layout.row_bytes
        )

    def chunks(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """`(global offsets, sizes)` of each chunk DCP saves."""
        out: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        step = self._chunk_rows()
        for p in self.pieces:
            for lo in range(0, self.rows, step):
                n = min(step, self.rows - lo)
                offsets = (p.offsets[0] + lo, *p.offsets[1:])
                sizes = (n,) if self.vector else (n, p.width)
                out.append((offsets, sizes))
        return out

    def _locate(self, offsets: Sequence[int], sizes: Sequence[int]) -> tuple[_Piece, int, int]:
        """The piece holding the global box `offsets`/`sizes`: (piece, first local row, first
        column within the piece)."""
        for p in self.pieces:
            row = offsets[0] - p.offsets[0]
            col = 0 if self.vector else offsets[1] - p.offsets[1]
            width = 1 if self.vector else sizes[1]
            if row >= 0 and row + sizes[0] <= self.rows and col >= 0 and col + width <= p.width:
                return p, row, col
        raise ValueError(f"{self!r} holds no box at offsets {list(offsets)} sizes {list(sizes)}")

    def read_chunk(self, offsets: Sequence[int], sizes: Sequence[int]) -> Tensor:
        """The box of the global tensor at `offsets` of `sizes` (one saved chunk)."""
        p, row, col = self._locate(offsets, sizes)
        width = 1 if self.vector else sizes[1]
        out = self.owner.read_columns(self.table, row, sizes[0], p.col + col, width)
        return out.reshape(tuple(sizes))

    def write_region(self, offsets: Sequence[int], value: Tensor) -> None:
        """Write `value` at `offsets` of the global tensor into the store (a loaded piece)."""
        sizes = tuple(value.shape)
        p, row, col = self._locate(offsets, sizes)
        self.owner.write_columns(self.table, row, p.col + col, value.reshape(sizes[0], -1))


class TieredFusedOptimizer(FusedEmbeddingOptimizer):
    """The fused optimizer view of a `TieredFusedEmbeddingBag`: the in-memory table's keys
    (`<table>.weight` -> `{"<table>.momentum1": ..., "<table>.step": ...}`) over the store's
    state columns, and the learning rate backward reads (`param_groups[0]["lr"]`).

    `state` holds `StoreSlice`s (reading it costs nothing); `state_dict()` reads them into
    tensors, or keeps them inside `streaming_state_dict()`. `load_state_dict` writes tensors
    (or another store's slices) into the store and sets the step."""

    def __init__(self, owner: TieredFusedEmbeddingBag, spec: FusedOptimSpec) -> None:
        # A stand-in parameter per table (the rows are in the store): the state's key.
        self._stand_ins = {t.name: torch.empty(0, t.dim) for t in owner.table_specs}
        self._owner = owner
        super().__init__(spec, self._stand_ins, self._slices, self._step_tensor)

    def _slices(self) -> dict[str, dict[str, Any]]:
        owner = self._owner
        return {t.name: owner.state_slices(i) for i, t in enumerate(owner.table_specs)}

    def _step_tensor(self) -> Tensor:
        return torch.tensor([self._owner.step], dtype=torch.int64)

    def state_dict(self) -> dict[str, object]:
        stream = is_streaming()
        state: dict[str, object] = {}
        for name, entry in self._slices().items():
            out: dict[str, object] = {
                f"{name}.{k}": v if stream else v.read() for k, v in entry.items()
            }
            if RULES[self.spec.optimizer].uses_step:
                out[f"{name}.step"] = self._step_tensor()
            if out:  # as the in-memory optimizer: no entry for a stateless one (SGD)
                state[f"{name}.weight"] = out
        result: dict[str, object] = {"state": state}
        if self.defaults.get("_save_param_groups", False):
            result["param_groups"] = [
                {**{k: v for k, v in g.items() if k != "params"}, "params": sorted(self.params)}
                for g in self.param_groups
            ]
        return result

    def load_state_dict(self, state_dict: Mapping[str, object]) -> None:
        new = state_dict.get("state")
        if not isinstance(new, Mapping):
            raise ValueError(f"state_dict needs a 'state' mapping, got keys {sorted(state_dict)}")
        unknown = sorted(set(map(str, new)) - set(self.params))
        if unknown:
            raise ValueError(f"state_dict has state for unknown parameters {unknown}")
        current = self.state_dict_keys()
        steps: list[int] = []
        for key, names in current.items():
            if not names:
                continue
            if key not in new:
                raise ValueError(f"state_dict has no state for parameter {key!r}")
            entry = new[key]
            if not isinstance(entry, Mapping) or set(map(str, entry)) != names:
                got = sorted(map(str, entry)) if isinstance(entry, Mapping) else type(entry)
                raise ValueError(f"state of {key!r} has keys {got}, expected {sorted(names)}")
        for i, t in enumerate(self._owner.table_specs):
            entry = new.get(f"{t.name}.weight", {})
            assert isinstance(entry, Mapping)
            for k, target in self._owner.state_slices(i).items():
                value = entry[f"{t.name}.{k}"]
                if target.same_place(value):
                    continue  # written in place by a streaming load
                if isinstance(value, StoreSlice):
                    value = value.read()
                if not isinstance(value, Tensor):
                    raise ValueError(
                        f"state {t.name}.{k} must be a tensor, got {type(value).__name__}"
                    )
                target.write(value)
            if RULES[self.spec.optimizer].uses_step:
                step = entry[f"{t.name}.step"]
                steps.append(int(step.reshape(-1)[0]) if isinstance(step, Tensor) else int(step))
        if steps:
            self._owner.step = max(steps)
        if self.defaults.get("_save_param_groups", False):
            self._load_param_groups(state_dict)
        self.post_load_state_dict()

    def state_dict_keys(self) -> dict[str, set[str]]:
        """Parameter key -> its state names (what `load_state_dict` expects)."""
        uses_step = RULES[self.spec.optimizer].uses_step
        out = {}
        for i, t in enumerate(self._owner.table_specs):
            names = {f"{t.name}.{k}" for k in self._owner.state_slices(i)}
            if uses_step:
                names.add(f"{t.name}.step")
            out[f"{t.name}.weight"] = names
        return out
