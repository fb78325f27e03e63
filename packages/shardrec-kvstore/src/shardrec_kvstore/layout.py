"""`RowLayout`: what one raw-id store's values are, and the header key that records it.

Every value of a store is one row of a table: the weight (`dim` values) followed by each
optimizer-state block (its width: `dim` for elementwise state, 1 for rowwise), all `dtype`
(float32). The layout is stored under `HEADER_KEY` (not 8 bytes long, so never an id's key)
as JSON whose `kind` marks the store as scratch of a running job, never a checkpoint.
"""

from __future__ import annotations

import dataclasses
import json

__all__ = [
    "HEADER_KEY",
    "MAGIC",
    "VERSION",
    "RowLayout",
    "StoreLayoutError",
    "decode_header",
    "encode_header",
]

HEADER_KEY = b"shardrec:layout"
MAGIC = "SHRDKV"
VERSION = 1
KIND = "shardrec raw-id tiered store (scratch of a running job, not a checkpoint)"


class StoreLayoutError(ValueError):
    """A directory that is not a shardrec raw-id store, or one written for another layout."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RowLayout:
    """The bytes of one value.

    table: the table's name (a store is one table's). dim: the weight's width.
    state: `(name, width)` of each optimizer-state block after the weight, in order.
    dtype: of every value (float32).
    """

    table: str
    dim: int
    state: tuple[tuple[str, int], ...] = ()
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 1:
            raise ValueError(
                f"table {self.table!r}: RowLayout.dim must be an int >= 1, got {self.dim!r}"
            )
        if self.dtype != "float32":
            raise ValueError(
                f"table {self.table!r}: raw-id stores hold float32, got {self.dtype!r}"
            )
        object.__setattr__(self, "state", tuple((str(n), int(w)) for n, w in self.state))

    @property
    def stride(self) -> int:
        """Values per row: the weight and every state block."""
        return self.dim + sum(w for _, w in self.state)

    @property
    def row_bytes(self) -> int:
        return self.stride * 4

    def mismatch(self, other: RowLayout) -> list[str]:
        """One `field: ours vs theirs` line per field where `other` differs."""
        out = []
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if mine != theirs:
                out.append(f"{f.name}: this table has {mine!r}, the store has {theirs!r}")
        return out


def encode_header(layout: RowLayout) -> bytes:
    """The value stored under `HEADER_KEY`."""
    body = {"magic": MAGIC, "version": VERSION, "kind": KIND, **dataclasses.asdict(layout)}
    return json.dumps(body, sort_keys=True).encode()


def decode_header(raw: bytes | None, path: str) -> RowLayout:
    """The layout a header value records; StoreLayoutError naming `path` if it is not one."""
    try:
        data = json.loads(raw) if raw is not None else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or data.get("magic") != MAGIC:
        raise StoreLayoutError(
            f"{path} is not a shardrec raw-id store (no {HEADER_KEY!r} header); pick another "
            "store directory or remove it"
        )
    if data.get("version") != VERSION:
        raise StoreLayoutError(
            f"{path}: raw-id store format version {data.get('version')}, this shardrec reads "
            f"{VERSION}"
        )
    return RowLayout(
        table=str(data["table"]),
        dim=int(data["dim"]),
        state=tuple((str(n), int(w)) for n, w in data["state"]),
        dtype=str(data["dtype"]),
    )
