"""The checkpoint's manifest (`shardrec.json`) and the checksums of its files.

`save` records, for every file of the checkpoint (each rank's `.distcp` data files and DCP's
`.metadata`), its size and CRC-32 in the manifest, which rank 0 writes last, just before the
checkpoint is published. `load` compares every file with the manifest before it reads a single
tensor, so one flipped bit in a weight is an error that names the file and the checkpoint
instead of a silently changed model.

CRC-32 (`zlib.crc32`) because the checksum guards against accidents (bit rot, a truncated
copy), not against someone who can rewrite the checkpoint: that person can rewrite the
manifest too, which is why reading never unpickles anything (checkpoint_io.py). It was the
fastest stdlib choice measured (benchmarks/checkpoint_verify.py: about 2x sha256 and blake2b
here) and detects every error burst of up to 32 bits.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable, Mapping
from typing import TypedDict

__all__ = [
    "MANIFEST",
    "CheckpointError",
    "FileRecord",
    "file_crc32",
    "file_problem",
    "file_records",
    "problems_of",
    "read_manifest",
    "record_of",
]

MANIFEST = "shardrec.json"
"""The manifest's file name inside a checkpoint directory."""


class FileRecord(TypedDict):
    """A file's entry in the manifest's `files` table."""

    bytes: int
    crc32: str  # 8 lowercase hex digits


_HEX = frozenset("0123456789abcdefABCDEF")
_CHUNK = 8 << 20  # bytes read per call: large enough for ~GB/s, small enough to stay in cache


class CheckpointError(ValueError):
    """A checkpoint's files are damaged or hold something a checkpoint may not hold.

    The message names the checkpoint and the file. Nothing was executed from the checkpoint,
    and when the error comes from verification, nothing was loaded into the model yet.
    """


def file_crc32(path: str | os.PathLike[str]) -> str:
    """The CRC-32 of the file's bytes as 8 lowercase hex digits."""
    crc = 0
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            crc = zlib.crc32(view[:n], crc)
    return f"{crc:08x}"


def record_of(path: str | os.PathLike[str]) -> FileRecord:
    """The manifest entry of the file at `path`."""
    return {"bytes": os.path.getsize(path), "crc32": file_crc32(path)}


def _plain_name(checkpoint: str, name: str) -> str:
    """`name` if it is a file name inside the directory (no separator, not `.` or `..`)."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise CheckpointError(
            f"checkpoint {checkpoint!r}: {MANIFEST} lists the file {name!r}, which is not a "
            "plain file name inside the checkpoint directory; the manifest is damaged or was "
            "crafted: load an earlier checkpoint"
        )
    return name


def file_records(checkpoint: str, manifest: Mapping[str, object]) -> dict[str, FileRecord] | None:
    """The manifest's `files` table, checked; None for a checkpoint saved without checksums."""
    files = manifest.get("files")
    if files is None:
        return None
    bad = f"checkpoint {checkpoint!r}: {MANIFEST} has a malformed 'files' table"
    if not isinstance(files, dict) or not files:
        raise CheckpointError(f"{bad} (expected a non-empty object, got {type(files).__name__})")
    out: dict[str, FileRecord] = {}
    for name, record in files.items():
        size = record.get("bytes") if isinstance(record, dict) else None
        crc = record.get("crc32") if isinstance(record, dict) else None
        crc = crc if isinstance(crc, str) and len(crc) == 8 and set(crc) <= _HEX else None
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or crc is None:
            raise CheckpointError(
                f"{bad}: entry {name!r} is {record!r}, expected "
                '{"bytes": <int>, "crc32": "<8 hex digits>"}'
            )
        out[_plain_name(checkpoint, name)] = {"bytes": size, "crc32": crc.lower()}
    return out


def file_problem(checkpoint: str, name: str, want: FileRecord) -> str | None:
    """Why the file `name` of `checkpoint` does not match its manifest entry, or None."""
    path = os.path.join(checkpoint, name)
    where = f"checkpoint {checkpoint!r}: file {name!r}"
    fix = "load an earlier checkpoint (this one is left in place for inspection)"
    if not os.path.isfile(path):
        return f"{where} is missing (the manifest lists it); {fix}"
    size = os.path.getsize(path)
    if size != want["bytes"]:
        return (
            f"{where} is damaged: it has {size} bytes, the manifest recorded {want['bytes']} "
            f"at save; {fix}"
        )
    crc = file_crc32(path)
    if crc != want["crc32"]:
        return (
            f"{where} is damaged: its CRC-32 is {crc}, the manifest recorded {want['crc32']} "
            f"at save; {fix}"
        )
    return None


def problems_of(
    checkpoint: str, files: Mapping[str, FileRecord], names: Iterable[str]
) -> list[str]:
    """`file_problem` for each of `names` that has one."""
    found = (file_problem(checkpoint, n, files[n]) for n in names)
    return [p for p in found if p is not None]


def read_manifest(path: str | os.PathLike[str], format_version: int) -> dict[str, object]:
    """The checkpoint's manifest, with an error naming the file for each way it can be bad."""
    checkpoint = os.fspath(path)
    file = os.path.join(checkpoint, MANIFEST)
    if not os.path.isfile(file):
        raise FileNotFoundError(f"{checkpoint!r} is not a shardrec checkpoint (no {MANIFEST})")
    try:
        with open(file, encoding="utf-8") as f:
            meta = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(
            f"checkpoint {checkpoint!r}: {file} is not valid JSON ({err}); the manifest is "
            "damaged, so the checkpoint cannot be verified or loaded: load an earlier "
            "checkpoint (this one is left in place for inspection)"
        ) from None
    if not isinstance(meta, dict):
        raise CheckpointError(
            f"checkpoint {checkpoint!r}: {file} holds a JSON {type(meta).__name__}, expected "
            "an object; load an earlier checkpoint"
        )
    version = meta.get("format_version")
    if version != format_version:
        raise ValueError(
            f"checkpoint {checkpoint!r} has format version {version!r}; this shardrec "
            f"reads version {format_version}"
        )
    if not isinstance(meta.get("optimizers", []), list):
        raise CheckpointError(
            f"checkpoint {checkpoint!r}: {file} has 'optimizers' "
            f"{meta['optimizers']!r}, expected a list of names; load an earlier checkpoint"
        )
    file_records(checkpoint, meta)  # a malformed table is reported here, by name
    return meta
