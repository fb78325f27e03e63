"""Criteo's raw TSV format: parsing into arrays, streaming, with errors that name file:line.

One sample per line, 40 tab-separated fields::

    label \\t I1 ... I13 \\t C1 ... C26
    1     \\t 5 \\t \\t 3 ... \\t 68fd1e64 \\t \\t 80e26c9b ...

- label: 0 or 1 (required).
- I1..I13: integers (may be negative), empty = 0 (as TorchRec's Criteo reader).
- C1..C26: hexadecimal hashes (8 digits in the real data, at most 15 accepted), empty = 0 (as
  TorchRec: an empty field and ``00000000`` are the same category).

Files are read in blocks with pyarrow's CSV reader (multi-threaded, one block in memory at a
time); hex decoding is vectorized NumPy over the string buffers. When pyarrow rejects a block,
a plain Python pass over the file finds the first bad line and the error names it.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type stubs
import pyarrow.csv as pa_csv  # type: ignore[import-untyped]  # no type stubs either

__all__ = [
    "CAT_NAMES",
    "DENSE_NAMES",
    "NUM_DENSE",
    "NUM_SPARSE",
    "RawCriteo",
    "log_transform",
    "read_tsv",
    "read_tsv_blocks",
]

NUM_DENSE = 13
NUM_SPARSE = 26
DENSE_NAMES = tuple(f"int_{i}" for i in range(NUM_DENSE))
CAT_NAMES = tuple(f"cat_{i}" for i in range(NUM_SPARSE))
_COLUMNS = ("label", *DENSE_NAMES, *CAT_NAMES)
_MAX_HEX_DIGITS = 15  # fits int64
_BLOCK_BYTES = 1 << 24

_HEX = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i


@dataclass(frozen=True)
class RawCriteo:
    """Parsed lines before any transform.

    Attributes:
        labels: ``(N,)`` int8, 0 or 1.
        dense: ``(N, 13)`` int64, empty fields 0.
        cats: ``(N, 26)`` int64, the hex values, empty fields 0.
    """

    labels: npt.NDArray[np.int8]
    dense: npt.NDArray[np.int64]
    cats: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @staticmethod
    def concat(parts: list[RawCriteo]) -> RawCriteo:
        if not parts:
            return RawCriteo(
                labels=np.zeros(0, np.int8),
                dense=np.zeros((0, NUM_DENSE), np.int64),
                cats=np.zeros((0, NUM_SPARSE), np.int64),
            )
        return RawCriteo(
            labels=np.concatenate([p.labels for p in parts]),
            dense=np.concatenate([p.dense for p in parts]),
            cats=np.concatenate([p.cats for p in parts]),
        )


def log_transform(dense: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    """``log(1 + max(x, 0))`` as float32 (TorchRec's transform of the integer features)."""
    out: npt.NDArray[np.float32] = np.log1p(np.maximum(dense, 0).astype(np.float64)).astype(
        np.float32
    )
    return out


def _is_int(text: str) -> bool:
    body = text[1:] if text[:1] in ("-", "+") else text
    return body.isdigit() and body.isascii()


def _is_hex(text: str) -> bool:
    return len(text) <= _MAX_HEX_DIGITS and all(c in "0123456789abcdefABCDEF" for c in text)


def line_error(fields: list[str]) -> str | None:
    """Why a line's fields are not a Criteo sample, or None when they are (plain Python)."""
    if len(fields) != len(_COLUMNS):
        return f"expected {len(_COLUMNS)} tab-separated fields, got {len(fields)}"
    if fields[0] not in ("0", "1"):
        return f"label must be 0 or 1, got {fields[0]!r}"
    for name, text in zip(DENSE_NAMES, fields[1 : 1 + NUM_DENSE], strict=True):
        if text and not _is_int(text):
            return f"{name} must be an integer or empty, got {text!r}"
    for name, text in zip(CAT_NAMES, fields[1 + NUM_DENSE :], strict=True):
        if text and not _is_hex(text):
            return (
                f"{name} must be hexadecimal (at most {_MAX_HEX_DIGITS} digits) or empty, "
                f"got {text!r}"
            )
    return None


def _raise_first_bad_line(path: pathlib.Path, fallback: str) -> None:
    with path.open("r", encoding="utf-8", errors="replace", newline="\n") as f:
        for line_no, line in enumerate(f, start=1):
            reason = line_error(line.rstrip("\n").removesuffix("\r").split("\t"))
            if reason is not None:
                raise ValueError(f"{path}:{line_no}: {reason}")
    raise ValueError(f"{path}: not a Criteo TSV file ({fallback})")


def _hex_values(column: pa.Array) -> tuple[npt.NDArray[np.int64], int]:
    """Decode a binary column of hex text; returns (values (N,), first bad row or -1)."""
    n = len(column)
    values = np.zeros(n, dtype=np.int64)
    if n == 0:
        return values, -1
    buffers = column.buffers()
    offset_type = np.int64 if column.type == pa.large_binary() else np.int32
    offsets = np.frombuffer(buffers[1], dtype=offset_type)[column.offset : column.offset + n + 1]
    offsets = offsets.astype(np.int64)
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else None
    lens = np.diff(offsets)
    width = int(lens.max())
    if width == 0 or data is None:
        return values, -1
    if width > _MAX_HEX_DIGITS:
        return values, int(np.argmax(lens > _MAX_HEX_DIGITS))
    nonempty = lens > 0
    if width == 8 and bool((lens[nonempty] == 8).all()):
        # Criteo's own values are 8 digits: the non-empty strings lie back to back in the data
        # buffer, so they reshape to (M, 8) without a gather, and digit pairs pack into bytes
        # that read as one big-endian uint32.
        chars = data[offsets[0] : offsets[-1]].reshape(-1, 8)
        nibbles = _HEX[chars]
        bad_m = (nibbles == 255).any(axis=1)
        rows = np.flatnonzero(nonempty)
        if bad_m.any():
            return values, int(rows[np.argmax(bad_m)])
        packed = np.ascontiguousarray((nibbles[:, 0::2] << 4) | nibbles[:, 1::2])
        values[rows] = packed.view(">u4").reshape(-1)
        return values, -1
    bad = np.zeros(n, dtype=bool)
    for k in range(width):
        has = lens > k
        nib = _HEX[data[np.where(has, offsets[:-1] + k, 0)]].astype(np.int64)
        bad |= has & (nib == 255)
        values = np.where(has, values * 16 + nib, values)
    return values, (int(np.argmax(bad)) if bad.any() else -1)


def _convert(batch: pa.RecordBatch, path: pathlib.Path, first_line: int) -> RawCriteo:
    labels_col = batch.column(0)
    if labels_col.null_count:
        # An empty label, or an empty line (pyarrow reads it as a row of nulls): the plain
        # Python pass tells which.
        _raise_first_bad_line(path, "a label is empty")
    labels = np.asarray(labels_col.to_numpy(), dtype=np.int64)
    wrong = (labels != 0) & (labels != 1)
    if wrong.any():
        row = int(np.argmax(wrong))
        raise ValueError(f"{path}:{first_line + row}: label must be 0 or 1, got {int(labels[row])}")
    dense = np.stack(
        [
            np.asarray(batch.column(1 + i).fill_null(0).to_numpy(), dtype=np.int64)
            for i in range(NUM_DENSE)
        ],
        axis=1,
    )
    cats = np.empty((batch.num_rows, NUM_SPARSE), dtype=np.int64)
    for i in range(NUM_SPARSE):
        cats[:, i], bad_row = _hex_values(batch.column(1 + NUM_DENSE + i))
        if bad_row >= 0:
            text = batch.column(1 + NUM_DENSE + i)[bad_row].as_py().decode(errors="replace")
            raise ValueError(
                f"{path}:{first_line + bad_row}: {CAT_NAMES[i]} must be hexadecimal (at most "
                f"{_MAX_HEX_DIGITS} digits) or empty, got {text!r}"
            )
    return RawCriteo(labels=labels.astype(np.int8), dense=dense, cats=cats)


def read_tsv_blocks(
    path: str | pathlib.Path, block_bytes: int = _BLOCK_BYTES
) -> Iterator[RawCriteo]:
    """A Criteo TSV file as consecutive blocks of parsed lines (bounded memory)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"criteo: TSV file {path} does not exist")
    if path.stat().st_size == 0:
        return
    types = {name: pa.int64() for name in _COLUMNS[: 1 + NUM_DENSE]}
    # Binary, not string: the hex digits need no UTF-8 validation.
    types.update({name: pa.binary() for name in CAT_NAMES})
    try:
        reader = pa_csv.open_csv(
            path,
            read_options=pa_csv.ReadOptions(column_names=list(_COLUMNS), block_size=block_bytes),
            # Empty lines are kept (and rejected) so that row numbers stay line numbers.
            parse_options=pa_csv.ParseOptions(
                delimiter="\t", quote_char=False, ignore_empty_lines=False
            ),
            convert_options=pa_csv.ConvertOptions(column_types=types, strings_can_be_null=False),
        )
        line = 1
        for batch in reader:
            yield _convert(batch, path, line)
            line += batch.num_rows
    except pa.ArrowInvalid as err:
        _raise_first_bad_line(path, str(err))


def read_tsv(path: str | pathlib.Path) -> RawCriteo:
    """A whole Criteo TSV file, parsed."""
    return RawCriteo.concat(list(read_tsv_blocks(path)))
