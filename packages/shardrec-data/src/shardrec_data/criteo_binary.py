"""TorchRec's `BinaryCriteoUtils`: Criteo TSV to .npy, row ranges per rank, remapping, shuffling.

The .npy layout per day file: `dense (N, 13)` float32 (log(x - min + 2) of the raw integers),
`sparse (N, 26)` int64 hex-decoded ids, `labels (N, 1)` int32. Only local paths are read
(`path_manager_key` is accepted for TorchRec's signatures).
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import numpy.typing as npt

from shardrec_data.criteo_pipes import (
    CAT_FEATURE_COUNT,
    DAYS,
    FREQUENCY_THRESHOLD,
    INT_FEATURE_COUNT,
    CriteoIterDataPipe,
)
from shardrec_data.datapipes import PATH_MANAGER_KEY

__all__ = ["BinaryCriteoUtils"]

_Row = tuple[list[int], list[int], int]


def _parse(row: list[str], first: int, label: int | None) -> _Row:
    """(dense, sparse, label) of one line whose integer fields start at `first`."""
    dense = [int(row[i] or "0") for i in range(first, first + INT_FEATURE_COUNT)]
    cats = range(first + INT_FEATURE_COUNT, first + INT_FEATURE_COUNT + CAT_FEATURE_COUNT)
    sparse = [int(row[i] or "0", 16) for i in cats]
    return dense, sparse, int(row[0] or "0") if label is None else label


def _with_label(row: list[str]) -> _Row:
    return _parse(row, 1, None)


def _without_label(row: list[str]) -> _Row:
    return _parse(row, 0, -1)  # the Kaggle test set has no labels: -1 marks filler


def _read_header(path: str) -> tuple[tuple[int, ...], np.dtype[np.generic]]:
    with open(path, "rb") as fin:
        np.lib.format.read_magic(fin)
        shape, _fortran, dtype = np.lib.format.read_array_header_1_0(fin)
    return tuple(shape), dtype


class BinaryCriteoUtils:
    """Preprocess, load and partition Criteo in .npy form (static methods, as TorchRec)."""

    @staticmethod
    def tsv_to_npys(
        in_file: str,
        out_dense_file: str,
        out_sparse_file: str,
        out_labels_file: str,
        dataset_name: str = "criteo_1tb",
        path_manager_key: str = PATH_MANAGER_KEY,
    ) -> None:
        """One TSV file to three .npy files (layout in the module docstring).

        dataset_name "criteo_kaggle" with "test" in `in_file` reads label-less lines and
        writes labels of -1.
        """
        unlabeled = dataset_name == "criteo_kaggle" and "test" in in_file
        mapper = _without_label if unlabeled else _with_label
        rows = list(CriteoIterDataPipe([in_file], row_mapper=mapper))
        dense_raw = np.array([r[0] for r in rows], dtype=np.int32).reshape(-1, INT_FEATURE_COUNT)
        sparse = np.array([r[1] for r in rows], dtype=np.int64).reshape(-1, CAT_FEATURE_COUNT)
        labels = np.array([r[2] for r in rows], dtype=np.int32).reshape(-1, 1)
        if dense_raw.size:
            dense_raw -= dense_raw.min() - 2  # every value >= 2, so the log is >= log 2
        dense = np.log(dense_raw, dtype=np.float32)
        for path, arr in (
            (out_dense_file, dense),
            (out_sparse_file, sparse),
            (out_labels_file, labels),
        ):
            with open(path, "wb") as fout:
                np.save(fout, arr)

    @staticmethod
    def get_shape_from_npy(path: str, path_manager_key: str = PATH_MANAGER_KEY) -> tuple[int, ...]:
        """The array shape of an .npy file, read from its header only."""
        return _read_header(path)[0]

    @staticmethod
    def get_file_row_ranges_and_remainder(
        lengths: list[int],
        rank: int,
        world_size: int,
        start_row: int = 0,
        last_row: int | None = None,
    ) -> tuple[dict[int, tuple[int, int]], int]:
        """Which rows of which files `rank` reads: `({file index: (first, last)}, remainder)`.

        Rows `start_row..last_row` (inclusive; default: to the end) of the files laid end to
        end are cut into `world_size` contiguous blocks, the first `remainder` blocks one row
        longer (remainder = rows % world_size). Ranges are inclusive and local to each file.
        """
        total = sum(lengths) - start_row if last_row is None else last_row - start_row + 1
        base, remainder = divmod(total, world_size)
        first = start_row + rank * base + min(rank, remainder)
        last = first + base + (1 if rank < remainder else 0) - 1
        out: dict[int, tuple[int, int]] = {}
        file_first = 0
        for idx, length in enumerate(lengths):
            file_last = file_first + length - 1
            if first <= file_last and last >= file_first:
                out[idx] = (max(first, file_first) - file_first, min(last, file_last) - file_first)
            file_first = file_last + 1
        return out, remainder

    @staticmethod
    def load_npy_range(
        fname: str,
        start_row: int,
        num_rows: int,
        path_manager_key: str = PATH_MANAGER_KEY,
        mmap_mode: bool = False,
    ) -> npt.NDArray[np.generic]:
        """Rows `start_row .. start_row + num_rows - 1` of a 2-d .npy file (the rest unread)."""
        shape, _ = _read_header(fname)
        if len(shape) != 2:
            raise ValueError(f"Cannot load range for npy with ndim != 2: {fname} has shape {shape}")
        total = shape[0]
        if not 0 <= start_row < total:
            raise ValueError(
                f"start_row ({start_row}) is out of bounds. It must be between 0 and "
                f"{total - 1}, inclusive."
            )
        if start_row + num_rows > total:
            raise ValueError(
                f"num_rows ({num_rows}) exceeds number of available rows ({total}) for the "
                f"given start_row ({start_row})."
            )
        rows = np.load(fname, mmap_mode="r")[start_row : start_row + num_rows]
        return rows if mmap_mode else np.array(rows)

    @staticmethod
    def sparse_to_contiguous(
        in_files: list[str],
        output_dir: str,
        frequency_threshold: int = FREQUENCY_THRESHOLD,
        columns: int = CAT_FEATURE_COUNT,
        path_manager_key: str = PATH_MANAGER_KEY,
        output_file_suffix: str = "_contig_freq.npy",
    ) -> None:
        """Remap each sparse column, over all files together, to ids 2, 3, ... by first appearance.

        With `frequency_threshold` > 1, ids seen fewer times than that (over all files) become
        1. Output: `<output_dir>/<input stem><output_file_suffix>`, same dtype and shape.
        """
        arrays = {os.path.basename(f).split(".")[0]: np.load(f) for f in in_files}
        sizes = [a.shape[0] for a in arrays.values()]
        for col in range(columns):
            ids = np.concatenate([a[:, col] for a in arrays.values()])
            uniq, first, inverse, counts = np.unique(
                ids, return_index=True, return_inverse=True, return_counts=True
            )
            keep = np.ones(uniq.shape[0], dtype=bool)
            if frequency_threshold > 1:
                keep = counts >= frequency_threshold
            new_ids = np.ones(uniq.shape[0], dtype=np.int64)
            kept = np.nonzero(keep)[0]
            by_appearance = kept[np.argsort(first[kept], kind="stable")]
            new_ids[by_appearance] = np.arange(2, 2 + kept.shape[0])
            mapped = new_ids[inverse.reshape(-1)]
            for arr, part in zip(
                arrays.values(), np.split(mapped, np.cumsum(sizes)[:-1]), strict=True
            ):
                arr[:, col] = part
        for stem, arr in arrays.items():
            with open(os.path.join(output_dir, stem + output_file_suffix), "wb") as fout:
                np.save(fout, arr)

    @staticmethod
    def shuffle(
        input_dir_labels_and_dense: str,
        input_dir_sparse: str,
        output_dir_shuffled: str,
        rows_per_day: dict[int, int],
        output_dir_full_set: str | None = None,
        days: int = DAYS,
        int_columns: int = INT_FEATURE_COUNT,
        sparse_columns: int = CAT_FEATURE_COUNT,
        path_manager_key: str = PATH_MANAGER_KEY,
        random_seed: int = 0,
    ) -> None:
        """Shuffle the rows of days 0..days-2 together; copy the last day unchanged.

        Reads `day_{d}_{dense,sparse,labels}.npy`, writes the same names to
        `output_dir_shuffled` (dense float32, sparse and labels int32) and, when
        `output_dir_full_set` is given, the unshuffled `full.npy` (columns: dense, sparse,
        label). The row order is NumPy's global `np.random.seed(random_seed)` shuffle, as
        TorchRec's, so both give the same files.
        """
        total = sum(rows_per_day[d] for d in range(days - 1))
        columns = int_columns + sparse_columns + 1
        full = np.zeros((total, columns), dtype=np.float32)
        row = 0
        for d in range(days - 1):
            end = row + rows_per_day[d]
            dense_dir, sparse_dir = input_dir_labels_and_dense, input_dir_sparse
            full[row:end, :int_columns] = np.load(os.path.join(dense_dir, f"day_{d}_dense.npy"))
            full[row:end, int_columns : columns - 1] = np.load(
                os.path.join(sparse_dir, f"day_{d}_sparse.npy")
            )
            full[row:end, columns - 1 :] = np.load(os.path.join(dense_dir, f"day_{d}_labels.npy"))
            row = end
        if output_dir_full_set is not None:
            with open(os.path.join(output_dir_full_set, "full.npy"), "wb") as fout:
                np.save(fout, full)
        np.random.seed(random_seed)
        np.random.shuffle(full)
        row = 0
        for d in range(days - 1):
            end = row + rows_per_day[d]
            parts = {
                "dense": full[row:end, :int_columns],
                "sparse": full[row:end, int_columns : columns - 1].astype(np.int32),
                "labels": full[row:end, columns - 1 :].astype(np.int32),
            }
            for part, arr in parts.items():
                with open(os.path.join(output_dir_shuffled, f"day_{d}_{part}.npy"), "wb") as fout:
                    np.save(fout, arr)
            row = end
        last = days - 1
        for part, src_dir in (
            ("sparse", input_dir_sparse),
            ("dense", input_dir_labels_and_dense),
            ("labels", input_dir_labels_and_dense),
        ):
            shutil.copyfile(
                os.path.join(src_dir, f"day_{last}_{part}.npy"),
                os.path.join(output_dir_shuffled, f"day_{last}_{part}.npy"),
            )
