"""Criteo TSV -> TorchRec's per-day ``.npy`` layout, with a contiguous id remap.

``preprocess_criteo(["day_0.tsv", "day_1.tsv"], "out/", frequency_threshold=3)`` writes, for the
i-th input file::

    out/day_{i}_dense.npy   float32 (N, 13)  log(1 + max(x, 0)), empty fields 0
    out/day_{i}_sparse.npy  int32   (N, 26)  remapped ids
    out/day_{i}_labels.npy  int32   (N,)
    out/cardinalities.json  {"num_embeddings": [26 ints], "frequency_threshold": t, ...}

Remap, per column, over all input files: a hex value seen at least ``frequency_threshold``
times gets an id in ``1..K`` (ascending hex value); every rarer value shares id 0, so the
column's table has ``K + 1`` rows. An empty field counts as the value 0 (as in ``criteo-tsv``).

Two streaming passes (count, then write), one block of lines in memory at a time; the id
counts are held per column in sorted NumPy arrays. The command line is shardrec-train's
(a higher layer, which parses its arguments without importing torch)::

    shardrec preprocess-criteo day_0.tsv day_1.tsv --out-dir out --frequency-threshold 3
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from shardrec_data.criteo import CARDINALITIES_FILE, npy_day_paths
from shardrec_data.criteo_format import NUM_DENSE, NUM_SPARSE, log_transform, read_tsv_blocks

__all__ = ["DEFAULT_FREQUENCY_THRESHOLD", "preprocess_criteo"]

DEFAULT_FREQUENCY_THRESHOLD = 1


def _merge_counts(
    values: npt.NDArray[np.int64],
    counts: npt.NDArray[np.int64],
    more: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Add the occurrences in ``more`` to the sorted (values, counts)."""
    new_values, new_counts = np.unique(more, return_counts=True)
    merged, inverse = np.unique(np.concatenate([values, new_values]), return_inverse=True)
    total = np.bincount(
        inverse, weights=np.concatenate([counts, new_counts]), minlength=merged.size
    )
    return merged, total.astype(np.int64)


def preprocess_criteo(
    tsv_paths: Sequence[str | pathlib.Path],
    out_dir: str | pathlib.Path,
    frequency_threshold: int = DEFAULT_FREQUENCY_THRESHOLD,
) -> list[int]:
    """Convert Criteo TSV files to the ``criteo-npy`` layout (module docstring).

    Returns: the 26 table sizes (also written to ``cardinalities.json``).
    """
    if isinstance(frequency_threshold, bool) or not isinstance(frequency_threshold, int):
        raise TypeError(f"frequency_threshold must be an int, got {frequency_threshold!r}")
    if frequency_threshold < 0:
        raise ValueError(f"frequency_threshold must be >= 0, got {frequency_threshold}")
    paths = [pathlib.Path(p) for p in tsv_paths]
    if not paths:
        raise ValueError("preprocess_criteo: tsv_paths is empty; give at least one TSV file")
    for p in paths:
        if not p.is_file():
            raise FileNotFoundError(f"preprocess_criteo: TSV file {p} does not exist")
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    # Pass 1: samples per file and occurrences of every value per column.
    empty = np.zeros(0, dtype=np.int64)
    counts = [(empty, empty) for _ in range(NUM_SPARSE)]
    rows = []
    for p in paths:
        n = 0
        for block in read_tsv_blocks(p):
            n += len(block)
            for c in range(NUM_SPARSE):
                counts[c] = _merge_counts(*counts[c], block.cats[:, c])
        rows.append(n)
    kept = [vals[cnt >= frequency_threshold] for vals, cnt in counts]
    sizes = [int(k.size) + 1 for k in kept]

    # Pass 2: write each file's arrays block by block into preallocated .npy files.
    for day, (p, n) in enumerate(zip(paths, rows, strict=True)):
        files = npy_day_paths(out, day)
        dense = np.lib.format.open_memmap(
            files["dense"], mode="w+", dtype=np.float32, shape=(n, NUM_DENSE)
        )
        sparse = np.lib.format.open_memmap(
            files["sparse"], mode="w+", dtype=np.int32, shape=(n, NUM_SPARSE)
        )
        labels = np.lib.format.open_memmap(files["labels"], mode="w+", dtype=np.int32, shape=(n,))
        at = 0
        for block in read_tsv_blocks(p):
            stop = at + len(block)
            dense[at:stop] = log_transform(block.dense)
            labels[at:stop] = block.labels
            for c in range(NUM_SPARSE):
                raw = block.cats[:, c]
                pos = np.searchsorted(kept[c], raw)
                hit = pos < kept[c].size
                hit[hit] = kept[c][pos[hit]] == raw[hit]
                sparse[at:stop, c] = np.where(hit, pos + 1, 0)
            at = stop
        assert at == n, (p, at, n)
        for arr in (dense, sparse, labels):
            arr.flush()
        del dense, sparse, labels

    meta = {
        "num_embeddings": sizes,
        "frequency_threshold": frequency_threshold,
        "rare_id": 0,
        "files": [str(p) for p in paths],
        "samples": rows,
    }
    (out / CARDINALITIES_FILE).write_text(json.dumps(meta, indent=1) + "\n")
    return sizes


if __name__ == "__main__":
    raise SystemExit(
        "shardrec_data has no command line; run shardrec-train's "
        "`shardrec preprocess-criteo TSV... --out-dir DIR [--frequency-threshold N]`"
    )
