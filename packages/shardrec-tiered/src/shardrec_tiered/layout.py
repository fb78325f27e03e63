"""The layout of one table's backing store, and the header that records it in the file.

A store file is a 4 KiB header followed by `num_rows` fixed-stride rows of float32:

```
offset 0      magic b"SHRDTIER" | u32 version | u32 json length | json (StoreLayout) | zero pad
offset 4096   row 0: weight (dim) | state 0 (its width) | state 1 ... = `stride` floats
              row 1 ...
```

The magic names the file as a tiered backing store, which is scratch space of a running job and
never a checkpoint (a checkpoint is what DCP writes: a `.metadata` file and its shards).
"""

from __future__ import annotations

import dataclasses
import json
import struct

__all__ = [
    "HEADER_BYTES",
    "MAGIC",
    "VERSION",
    "StoreLayout",
    "StoreLayoutError",
    "decode_header",
    "encode_header",
]

MAGIC = b"SHRDTIER"
VERSION = 1
HEADER_BYTES = 4096
_FIXED = struct.Struct("<8sII")


class StoreLayoutError(ValueError):
    """A store file that is not a tiered store, or one written for another table layout."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoreLayout:
    """What fixes the byte position of every value in a store file.

    table: the table's name (a store is one table's). num_rows, dim: the table's shape.
    state: `(name, width)` of each optimizer-state block that follows the weight in a row, in
    order (width `dim` for elementwise state, 1 for rowwise). dtype: of every value.
    """

    table: str
    num_rows: int
    dim: int
    state: tuple[tuple[str, int], ...]
    dtype: str = "float32"

    @property
    def stride(self) -> int:
        """Values per row: the weight and every state block."""
        return self.dim + sum(w for _, w in self.state)

    @property
    def row_bytes(self) -> int:
        return self.stride * 4

    @property
    def file_bytes(self) -> int:
        return HEADER_BYTES + self.num_rows * self.row_bytes

    def mismatch(self, other: StoreLayout) -> list[str]:
        """One `field: ours vs theirs` line per field where `other` differs."""
        out = []
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if mine != theirs:
                out.append(f"{f.name}: this table has {mine!r}, the store has {theirs!r}")
        return out


def encode_header(layout: StoreLayout) -> bytes:
    """The `HEADER_BYTES` header recording `layout`."""
    body = json.dumps(
        {
            "kind": "shardrec tiered backing store (scratch of a running job, not a checkpoint)",
            **dataclasses.asdict(layout),
        },
        sort_keys=True,
    ).encode()
    head = _FIXED.pack(MAGIC, VERSION, len(body)) + body
    if len(head) > HEADER_BYTES:
        raise ValueError(f"table {layout.table!r}: store header of {len(head)} bytes too long")
    return head.ljust(HEADER_BYTES, b"\0")


def decode_header(raw: bytes, path: str) -> StoreLayout:
    """The layout a header records; StoreLayoutError naming `path` if it is not one."""
    if len(raw) < _FIXED.size or raw[:8] != MAGIC:
        raise StoreLayoutError(
            f"{path} is not a shardrec tiered store (no {MAGIC!r} header); pick another "
            "store directory or remove the file"
        )
    _, version, length = _FIXED.unpack_from(raw)
    if version != VERSION:
        raise StoreLayoutError(
            f"{path}: tiered store format version {version}, this shardrec reads {VERSION}"
        )
    data = json.loads(raw[_FIXED.size : _FIXED.size + length])
    return StoreLayout(
        table=data["table"],
        num_rows=data["num_rows"],
        dim=data["dim"],
        state=tuple((str(n), int(w)) for n, w in data["state"]),
        dtype=data["dtype"],
    )
