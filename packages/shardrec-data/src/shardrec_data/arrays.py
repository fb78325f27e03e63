"""Datasets held as NumPy arrays (in memory or memory-mapped), and how a batch is gathered.

Sparse columns come in two kinds, listed in key order:

- ``IdMatrix``: K consecutive single-id features stored as one ``(N, K)`` integer matrix (Criteo's
  26 columns, MovieLens' user and item). A batch gathers B rows and transposes them to the
  key-major KeyedJaggedTensor layout, every length 1.
- ``JaggedColumn``: one multi-hot feature as ``offsets (N + 1,)`` and ``values (nnz,)``; sample i's
  ids are ``values[offsets[i]:offsets[i + 1]]`` (MovieLens' genres).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from shardrec_data.batch import Batch
from shardrec_data.dataset import RecDataset, SparseFeature, check_indices, check_split
from shardrec_jagged import KeyedJaggedTensor

__all__ = [
    "ArrayDataset",
    "ConcatArrays",
    "IdMatrix",
    "JaggedColumn",
    "SplitArrays",
    "concat_arrays",
]


@dataclass(frozen=True)
class IdMatrix:
    """``ids: (N, K)`` integer: K single-id features, one column each.

    ``modulo`` (K sizes), when given, is applied to the ids as rows are read: memory-mapped raw
    hashes stay on disk as they are.
    """

    ids: npt.NDArray[np.integer]
    modulo: tuple[int, ...] | None = None

    @property
    def width(self) -> int:
        return int(self.ids.shape[1])

    def rows(self, indices: npt.NDArray[np.int64] | slice) -> npt.NDArray[np.int64]:
        """``(B, K)`` int64 ids of rows ``indices``."""
        got = np.asarray(self.ids[indices], dtype=np.int64)
        if self.modulo is not None:
            got = got % np.array(self.modulo, dtype=np.int64)
        return got


@dataclass(frozen=True)
class JaggedColumn:
    """One multi-hot feature: ``offsets (N + 1,)`` int64 and ``values (nnz,)`` integer."""

    offsets: npt.NDArray[np.int64]
    values: npt.NDArray[np.integer]

    @property
    def width(self) -> int:
        return 1

    def lengths(self) -> npt.NDArray[np.int64]:
        """``(N,)`` ids per sample."""
        return np.diff(self.offsets)

    def gather(
        self, indices: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Samples ``indices``' ``(lengths (B,), values (sum of lengths,))``, in that order."""
        starts = self.offsets[indices]
        lens = self.offsets[indices + 1] - starts
        # Output position p comes from starts[bag(p)] + (p - first output position of bag(p)).
        first = np.cumsum(lens) - lens
        src = np.repeat(starts - first, lens) + np.arange(int(lens.sum()), dtype=np.int64)
        return lens.astype(np.int64, copy=False), np.asarray(self.values[src], dtype=np.int64)

    def select(self, indices: npt.NDArray[np.int64]) -> JaggedColumn:
        """A new column holding samples ``indices`` in that order."""
        lens, values = self.gather(indices)
        offsets = np.zeros(lens.size + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        return JaggedColumn(offsets=offsets, values=values)


SparseColumn = IdMatrix | JaggedColumn


@dataclass(frozen=True)
class SplitArrays:
    """One split as arrays (N samples).

    Attributes:
        dense: ``(N, num_dense)`` float32.
        sparse: the columns, in key order (their widths sum to the number of features).
        labels: ``(N,)`` 0/1 (any numeric dtype; batches convert to float32).
    """

    dense: npt.NDArray[np.floating]
    sparse: tuple[SparseColumn, ...]
    labels: npt.NDArray[np.number]

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def take(self, indices: npt.NDArray[np.int64], keys: Sequence[str]) -> Batch:
        """The batch of samples ``indices`` (``(B,)``) with KeyedJaggedTensor ``keys``."""
        b = int(indices.size)
        lengths: list[npt.NDArray[np.int64]] = []
        values: list[npt.NDArray[np.int64]] = []
        for col in self.sparse:
            if isinstance(col, IdMatrix):
                rows = col.rows(indices)  # (B, K)
                values.append(rows.T.reshape(-1))
                lengths.append(np.ones(b * col.width, dtype=np.int64))
            else:
                lens, vals = col.gather(indices)
                values.append(vals)
                lengths.append(lens)
        kjt = KeyedJaggedTensor(
            keys=list(keys),
            values=torch.from_numpy(np.concatenate(values) if values else np.zeros(0, np.int64)),
            lengths=torch.from_numpy(np.concatenate(lengths) if lengths else np.zeros(0, np.int64)),
            stride=b,
        )
        dense = np.ascontiguousarray(self.dense[indices], dtype=np.float32)
        labels = np.ascontiguousarray(self.labels[indices], dtype=np.float32).reshape(b)
        return Batch(
            dense_features=torch.from_numpy(dense),
            sparse_features=kjt,
            labels=torch.from_numpy(labels),
        )

    def select(self, indices: npt.NDArray[np.int64]) -> SplitArrays:
        """A new SplitArrays holding samples ``indices`` in that order (copies)."""
        return SplitArrays(
            dense=np.ascontiguousarray(self.dense[indices]),
            sparse=tuple(
                IdMatrix(c.rows(indices)) if isinstance(c, IdMatrix) else c.select(indices)
                for c in self.sparse
            ),
            labels=np.ascontiguousarray(self.labels[indices]),
        )

    def slice(self, start: int, stop: int) -> SplitArrays:
        """Samples ``[start, stop)`` as views (no copy; memory maps stay memory maps)."""
        return SplitArrays(
            dense=self.dense[start:stop],
            sparse=tuple(
                IdMatrix(c.ids[start:stop], c.modulo)
                if isinstance(c, IdMatrix)
                else JaggedColumn(offsets=c.offsets[start : stop + 1], values=c.values)
                for c in self.sparse
            ),
            labels=self.labels[start:stop],
        )

    def sparse_ids(self, column: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Feature ``column``'s ``(lengths (N,), values (nnz,))`` over the whole split."""
        at = 0
        for col in self.sparse:
            if at <= column < at + col.width:
                if isinstance(col, IdMatrix):
                    ids = col.rows(slice(None))[:, column - at]
                    return np.ones(len(self), dtype=np.int64), ids
                return col.lengths(), np.asarray(col.values, dtype=np.int64)
            at += col.width
        raise IndexError(f"feature column {column} is out of range for {at} features")


class ConcatArrays:
    """Several SplitArrays (e.g. memory-mapped day files) read as one split, without copying.

    A batch sorts its indices once (so each memory-mapped file is read in ascending order),
    gathers from each part, and restores the requested order.
    """

    def __init__(self, parts: Sequence[SplitArrays]) -> None:
        assert parts, "ConcatArrays needs at least one part (it may be empty)"
        # Empty parts may stay: searchsorted(side="right") below never picks one.
        self.parts = tuple(parts)
        sizes = [len(p) for p in self.parts]
        self._starts = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self._starts[1:])

    def __len__(self) -> int:
        return int(self._starts[-1])

    def select(self, indices: npt.NDArray[np.int64]) -> SplitArrays:
        """Samples ``indices`` in that order, as one in-memory SplitArrays."""
        if len(self.parts) == 1:
            return self.parts[0].select(indices)
        order = np.argsort(indices, kind="stable")
        sorted_idx = indices[order]
        part_of = np.searchsorted(self._starts, sorted_idx, side="right") - 1
        pieces = []
        for p in np.unique(part_of):
            mask = part_of == p
            pieces.append(self.parts[int(p)].select(sorted_idx[mask] - self._starts[p]))
        merged = concat_arrays(pieces) if pieces else self.parts[0].select(indices)
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.size, dtype=order.dtype)
        return merged.select(inverse)

    def take(self, indices: npt.NDArray[np.int64], keys: Sequence[str]) -> Batch:
        """The batch of samples ``indices`` (``(B,)``) with KeyedJaggedTensor ``keys``."""
        selected = self.select(indices)
        return selected.take(np.arange(len(selected), dtype=np.int64), keys)


def concat_arrays(parts: Sequence[SplitArrays]) -> SplitArrays:
    """The samples of ``parts`` one after the other (same column layout in every part)."""
    columns: list[SparseColumn] = []
    for c, col in enumerate(parts[0].sparse):
        if isinstance(col, IdMatrix):
            mats = [m for p in parts if isinstance(m := p.sparse[c], IdMatrix)]
            assert len(mats) == len(parts), "parts must share one column layout"
            columns.append(IdMatrix(np.concatenate([m.rows(slice(None)) for m in mats])))
        else:
            lens, vals = [], []
            for p in parts:
                jc = p.sparse[c]
                assert isinstance(jc, JaggedColumn)
                n = len(p)
                ln, vs = jc.gather(np.arange(n, dtype=np.int64))
                lens.append(ln)
                vals.append(vs)
            all_lens = np.concatenate(lens)
            offsets = np.zeros(all_lens.size + 1, dtype=np.int64)
            np.cumsum(all_lens, out=offsets[1:])
            columns.append(JaggedColumn(offsets=offsets, values=np.concatenate(vals)))
    return SplitArrays(
        dense=np.concatenate([p.dense for p in parts]),
        sparse=tuple(columns),
        labels=np.concatenate([p.labels for p in parts]),
    )


class ArrayDataset(RecDataset):
    """A RecDataset whose two splits are ``SplitArrays``."""

    def __init__(
        self,
        *,
        name: str,
        num_dense: int,
        sparse_features: Sequence[SparseFeature],
        train: SplitArrays | ConcatArrays,
        test: SplitArrays | ConcatArrays,
    ) -> None:
        self.name = name
        self.num_dense = num_dense
        self.sparse_features = tuple(sparse_features)
        self._splits = {"train": train, "test": test}
        for split, source in self._splits.items():
            for arrays in source.parts if isinstance(source, ConcatArrays) else (source,):
                width = sum(c.width for c in arrays.sparse)
                assert width == len(self.sparse_features), (split, width)
                assert arrays.dense.shape[1] == num_dense, (split, arrays.dense.shape)

    def arrays(self, split: str) -> SplitArrays:
        """The whole ``split`` as arrays (for baselines and checks; a multi-file split is
        copied into memory)."""
        check_split(split)
        source = self._splits[split]
        if isinstance(source, ConcatArrays):
            return source.select(np.arange(len(source), dtype=np.int64))
        return source

    def num_samples(self, split: str) -> int:
        check_split(split)
        return len(self._splits[split])

    def take(self, split: str, indices: npt.NDArray[np.int64]) -> Batch:
        check_split(split)
        source = self._splits[split]
        indices = np.asarray(indices, dtype=np.int64)
        check_indices(split, indices, len(source))
        return source.take(indices, self.feature_names)
