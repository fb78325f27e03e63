"""TorchRec's `InMemoryBinaryCriteoIterDataPipe`: Criteo .npy day files as per-rank batches.

The files' rows, laid end to end, are cut into global batches of `batch_size`; batch g goes to
rank g % world_size, so every rank gets the same number of batches:

    rows    [ b0 ][ b1 ][ b2 ][ b3 ][ last round ]      world_size 2
    rank 0    b0          b2          l0
    rank 1          b1          b3          l1

The rows left after the full rounds (R = rows % (world_size * batch_size)) form one last round
of world_size batches of R // world_size rows, the first R % world_size one row longer; when
R < world_size the last full round is merged into it instead (batches of batch_size (+1)), so
no rank gets an empty batch. `drop_last=True` drops that round.

stage "val" reads the first half (rounded up) of the first file, "test" the second half.
`shuffle_training_set` (stage "train") permutes all rows with NumPy's global generator seeded
by `shuffle_training_set_random_seed`, keeps this rank's contiguous block of the permuted
order, and batches it alone. `hashes[i]` reduces feature i's ids modulo hashes[i].
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import IterableDataset

from shardrec_data.batch import Batch
from shardrec_data.criteo_pipes import CAT_FEATURE_COUNT, DEFAULT_CAT_NAMES
from shardrec_data.datapipes import PATH_MANAGER_KEY
from shardrec_jagged import KeyedJaggedTensor

__all__ = ["InMemoryBinaryCriteoIterDataPipe", "batch_sizes_per_round"]

_STAGES = ("train", "val", "test")
_Arr = npt.NDArray[Any]


def batch_sizes_per_round(
    total_rows: int, batch_size: int, world_size: int, drop_last: bool
) -> list[int]:
    """Sizes of the global batches in order (global batch g goes to rank g % world_size)."""
    rounds = total_rows // (batch_size * world_size)
    full = rounds * world_size
    remainder = total_rows % (batch_size * world_size)
    if drop_last or remainder == 0:
        return [batch_size] * full
    if remainder < world_size:
        full -= world_size
        last = [batch_size] * world_size
    else:
        last = [remainder // world_size] * world_size
    for r in range(remainder % world_size):
        last[r] += 1
    return [batch_size] * full + last


class InMemoryBinaryCriteoIterDataPipe(IterableDataset[Batch]):
    """Batches of Criteo .npy files held in memory (or memory-mapped); see the module docstring.

    Each batch: `dense_features (B, 13)` and `labels (B,)` in the files' dtypes, and a
    KeyedJaggedTensor of the 26 `cat_i` features, one id per sample (`lengths` int32 ones).
    """

    def __init__(
        self,
        stage: str,
        dense_paths: list[str],
        sparse_paths: list[str],
        labels_paths: list[str],
        batch_size: int,
        rank: int,
        world_size: int,
        drop_last: bool | None = False,
        shuffle_batches: bool = False,
        shuffle_training_set: bool = False,
        shuffle_training_set_random_seed: int = 0,
        mmap_mode: bool = False,
        hashes: Sequence[int] | None = None,
        path_manager_key: str = PATH_MANAGER_KEY,
    ) -> None:
        super().__init__()
        _check_args(stage, dense_paths, sparse_paths, labels_paths, batch_size, rank, world_size)
        self.stage = stage
        self.dense_paths, self.sparse_paths, self.labels_paths = (
            dense_paths,
            sparse_paths,
            labels_paths,
        )
        self.batch_size = batch_size
        self.rank, self.world_size = rank, world_size
        self.drop_last = bool(drop_last)
        self.shuffle_batches = shuffle_batches
        self.shuffle_training_set = shuffle_training_set
        self.mmap_mode = mmap_mode
        self.path_manager_key = path_manager_key
        if hashes is not None and len(hashes) != CAT_FEATURE_COUNT:
            raise ValueError(
                f"hashes must hold one modulus per categorical feature ({CAT_FEATURE_COUNT}), "
                f"got {len(hashes)}"
            )
        self.hashes: _Arr | None = (
            None if hashes is None else np.array(hashes).reshape((1, CAT_FEATURE_COUNT))
        )
        # TorchRec seeds NumPy's global generator here; the shuffles below draw from it.
        np.random.seed(shuffle_training_set_random_seed)
        self._hash_on_read = mmap_mode
        if shuffle_training_set and stage == "train":
            self.dense_arrs, self.sparse_arrs, self.labels_arrs = self._shuffled_rows()
            self.rank, self.world_size = 0, 1
            self._hash_on_read = False
        else:
            mode: Literal["r"] | None = "r" if mmap_mode else None
            self.dense_arrs = [np.load(p, mmap_mode=mode) for p in dense_paths]
            self.sparse_arrs = [np.load(p, mmap_mode=mode) for p in sparse_paths]
            self.labels_arrs = [np.load(p, mmap_mode=mode) for p in labels_paths]
            self._cut_stage()
        if self.hashes is not None and not self._hash_on_read:
            self.sparse_arrs = [(a % self.hashes).astype(a.dtype) for a in self.sparse_arrs]
        self.num_rows_per_file: list[int] = [len(a) for a in self.dense_arrs]
        self._sizes = batch_sizes_per_round(
            sum(self.num_rows_per_file), batch_size, self.world_size, self.drop_last
        )
        self._starts = np.cumsum([0, *self._sizes])
        self.keys: list[str] = list(DEFAULT_CAT_NAMES)

    def _cut_stage(self) -> None:
        if self.stage == "train":
            return
        rows = len(self.dense_arrs[0])
        half = rows // 2 + rows % 2
        part = slice(0, half) if self.stage == "val" else slice(half, rows)
        for arrs in (self.dense_arrs, self.sparse_arrs, self.labels_arrs):
            arrs[0] = arrs[0][part]

    def _shuffled_rows(self) -> tuple[list[_Arr], list[_Arr], list[_Arr]]:
        sources = [
            [np.load(p, mmap_mode="r") for p in paths]
            for paths in (self.dense_paths, self.sparse_paths, self.labels_paths)
        ]
        file_rows = [len(a) for a in sources[0]]
        total = sum(file_rows)
        permutation = np.random.permutation(total)  # row i moves to position permutation[i]
        base, remainder = divmod(total, self.world_size)
        first = self.rank * base + min(self.rank, remainder)
        count = base + (1 if self.rank < remainder else 0)
        source_of = np.argsort(permutation)[first : first + count]
        file_starts = np.cumsum([0, *file_rows])
        file_of = np.searchsorted(file_starts, source_of, side="right") - 1
        out: list[list[_Arr]] = []
        for arrs in sources:
            taken = np.empty((count, arrs[0].shape[1]), dtype=arrs[0].dtype)
            for f, arr in enumerate(arrs):
                mine = np.nonzero(file_of == f)[0]
                taken[mine] = arr[source_of[mine] - file_starts[f]]
            out.append([taken])
        return out[0], out[1], out[2]

    def _rows(self, arrs: list[_Arr], first: int, end: int) -> _Arr:
        """Rows [first, end) of the files laid end to end."""
        parts = []
        offset = 0
        for arr in arrs:
            lo, hi = max(first - offset, 0), min(end - offset, len(arr))
            if lo < hi:
                parts.append(arr[lo:hi])
            offset += len(arr)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _batch(self, first: int, end: int) -> Batch:
        dense = self._rows(self.dense_arrs, first, end)
        sparse = self._rows(self.sparse_arrs, first, end)
        labels = self._rows(self.labels_arrs, first, end)
        if self._hash_on_read and self.hashes is not None:
            sparse = (sparse % self.hashes).astype(sparse.dtype)
        if self.shuffle_batches:
            order = np.random.permutation(len(dense))
            dense, sparse, labels = dense[order], sparse[order], labels[order]
        b = end - first
        return Batch(
            dense_features=torch.from_numpy(np.ascontiguousarray(dense)),
            sparse_features=KeyedJaggedTensor(
                keys=self.keys,
                values=torch.from_numpy(np.ascontiguousarray(sparse.T).reshape(-1)),
                lengths=torch.ones(CAT_FEATURE_COUNT * b, dtype=torch.int32),
                stride=b,
                length_per_key=[b] * CAT_FEATURE_COUNT,
                offset_per_key=[b * i for i in range(CAT_FEATURE_COUNT + 1)],
            ),
            labels=torch.from_numpy(np.ascontiguousarray(labels).reshape(-1)),
        )

    def __iter__(self) -> Iterator[Batch]:
        for g in range(self.rank, len(self._sizes), self.world_size):
            yield self._batch(int(self._starts[g]), int(self._starts[g + 1]))

    def __len__(self) -> int:
        return len(self._sizes) // self.world_size


def _check_args(
    stage: str,
    dense_paths: Sequence[str],
    sparse_paths: Sequence[str],
    labels_paths: Sequence[str],
    batch_size: int,
    rank: int,
    world_size: int,
) -> None:
    if stage not in _STAGES:
        raise ValueError(f"stage must be one of {_STAGES}, got {stage!r}")
    if not dense_paths or not (len(dense_paths) == len(sparse_paths) == len(labels_paths)):
        raise ValueError(
            "dense_paths, sparse_paths and labels_paths must name the same number (>= 1) of "
            f"files, got {len(dense_paths)}, {len(sparse_paths)}, {len(labels_paths)}"
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size <= 0:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")
