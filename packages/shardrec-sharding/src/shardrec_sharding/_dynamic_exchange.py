"""The batch's shared id exchange of a sharded collection's dynamic tables, packed over all its
tables at once, and the error flags that make every rank raise when one fails (part of
`shardrec_sharding.dynamic_routing`, whose `ShardedDynamicTables.remap` runs it).

Two all-to-alls of int64 (the first with its size exchange):

- out: to each rank d one block `[flag, count of table 0 .. T-1 for d, table 0's ids for d,
  table 1's ...]`; a partitioned table's ids go to the rank owning their hash part (a
  bucketed table's: their bucket's part, `shardrec_sharding.id_buckets`), a
  replicated table's to every rank, each table's ids in their batch order. The block is
  packed for all tables in one native pass (`_native/idroute.c`: hash, count, place) or, when
  the kernels are off, by torch ops table by table (the same buffer).
- back: to each rank s one block `[flag, slots of the partitioned tables' ids s sent here,
  table after table]` (a collection of replicated tables only sends the flags).

Flags (0 on the good path, so no collective is added for them): out, `BAD_INPUT` from a rank
that refused its batch (`precheck`) or failed to pack it; back, `1 + t` from an owner whose
map of table t raised. Every rank sees every rank's flag in the same exchange, so all of them
stop together: the failing ranks raise their own error, the others one naming the failing
rank(s), their table and cause (their messages are gathered only then).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from shardrec_collectives import PeerError, ShardingEnv, all_to_all_ids, return_ids
from shardrec_collectives.errors import raise_agreed
from shardrec_embedding._native.loader import native_library_at
from shardrec_embedding.dynamic import mix64
from shardrec_sharding.id_buckets import bucket_part

__all__ = [
    "BAD_INPUT",
    "DynamicMapError",
    "Packed",
    "RoutePlan",
    "by_table",
    "exchange_back",
    "exchange_out",
    "pack",
    "pack_refusal",
]

BAD_INPUT = 1
"""The out flag of a rank that refused (or could not pack) its batch."""

_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p


class DynamicMapError(PeerError):
    """Raised on the ranks whose maps did not fail when an owner's id map raised while mapping
    a batch's exchanged ids (the owner re-raises its own error, with a note naming the table
    and its rank). `failed` maps each failing rank to the table whose map raised there;
    `ranks` / `messages` as `PeerError`'s."""

    def __init__(
        self, message: str, failed: dict[int, str], ranks: list[int], messages: list[str]
    ) -> None:
        RuntimeError.__init__(self, message)
        self.failed = failed
        self.ranks = ranks
        self.messages = messages

    def __reduce__(self) -> tuple[type[PeerError], tuple[list[int], list[str]]]:
        return (DynamicMapError, (str(self), self.failed, self.ranks, self.messages))  # type: ignore[return-value]  # PeerError's narrower signature


@functools.cache
def _native() -> ctypes.CDLL | None:
    lib = native_library_at(Path(__file__).with_name("_native") / "idroute.c")
    if lib is None:
        return None
    lib.sr_route_pack.argtypes = (_PTR, _PTR, _I64, *[_PTR] * 5, _I64, _I64, *[_PTR] * 4)
    lib.sr_route_pack.restype = _I64
    return lib


@dataclasses.dataclass(frozen=True)
class RoutePlan:
    """Where each dynamic table's ids go, as tensors for the packing (fixed per collection).

    parts[t]: table t's id-space parts (0: replicated); its part p lives on rank
    `owners[base[t] + p]`. bounded[t]: 1 when table t is bucketed, its parts' id bounds then
    `bounds[base[t] + t .. base[t] + t + parts[t]]` (`parts[t] + 1` of them)."""

    world: int
    salt: int
    parts: Tensor
    base: Tensor
    owners: Tensor
    bounded: Tensor
    bounds: Tensor

    @staticmethod
    def of(
        routes: Sequence[tuple[bool, Sequence[int], Sequence[int]]], world: int, salt: int
    ) -> RoutePlan:
        """`routes`: per table, `(replicated, owner ranks of its parts, its parts' id bounds
        (empty: hashed))`."""
        parts = [0 if rep else len(owners) for rep, owners, _ in routes]
        base = [sum(parts[:t]) for t in range(len(parts))]
        flat = [r for rep, owners, _ in routes if not rep for r in owners]
        bounds: list[int] = []
        for t, (_, _, b) in enumerate(routes):  # table t's run starts at base[t] + t
            bounds.extend(b or [0] * (parts[t] + 1))
        return RoutePlan(
            world=world,
            salt=salt,
            parts=torch.tensor(parts, dtype=torch.int64),
            base=torch.tensor(base, dtype=torch.int64),
            owners=torch.tensor(flat or [0], dtype=torch.int64),
            bounded=torch.tensor([1 if b else 0 for _, _, b in routes], dtype=torch.int64),
            bounds=torch.tensor(bounds or [0], dtype=torch.int64),
        )

    def table_bounds(self, t: int) -> Tensor | None:
        """Table t's part bounds when it is bucketed, else None."""
        if not int(self.bounded[t]):
            return None
        start = int(self.base[t]) + t
        return self.bounds[start : start + int(self.parts[t]) + 1]

    @property
    def tables(self) -> int:
        return int(self.parts.numel())


@dataclasses.dataclass(frozen=True)
class Packed:
    """The out buffer (`sizes[d]` int64 to rank d), what rank d sends back (`back[d]`: the
    flag and the slots of the partitioned tables' ids sent there) and, per id of the batch
    (tables in order), its position in the way-back buffer (-1: a replicated table's id)."""

    send: Tensor
    sizes: list[int]
    back: list[int]
    where: Tensor


def pack(plan: RoutePlan, ids: Tensor, lens: Sequence[int]) -> Packed:
    """The out buffer of `ids` (every table's int64 ids, table after table, `lens[t]` each)."""
    world, tables = plan.world, plan.tables
    lens_t = torch.tensor(list(lens), dtype=torch.int64)
    lib = _native()
    if lib is None:
        return _pack_torch(plan, ids, lens)
    ids = ids.contiguous()
    n = ids.numel()
    replicated = int(lens_t[plan.parts == 0].sum())
    counts = torch.empty(world, tables, dtype=torch.int64)
    header = world * (1 + tables)
    send = torch.empty(header + n - replicated + world * replicated, dtype=torch.int64)
    where = torch.empty(n, dtype=torch.int64)
    dest = torch.empty(n, dtype=torch.int64)
    got = lib.sr_route_pack(
        ids.data_ptr(), lens_t.data_ptr(), tables, plan.parts.data_ptr(), plan.base.data_ptr(),
        plan.owners.data_ptr(), plan.bounded.data_ptr(), plan.bounds.data_ptr(), world,
        _signed(plan.salt), counts.data_ptr(), send.data_ptr(), where.data_ptr(), dest.data_ptr(),
    )  # fmt: skip
    if got < 0:
        raise MemoryError("dynamic id exchange: no memory for the packing cursors")
    return Packed(send=send, **_sizes(plan, counts), where=where)


def _sizes(plan: RoutePlan, counts: Tensor) -> dict[str, list[int]]:
    """`Packed`'s sizes from the `(world, T)` counts of ids sent to each rank."""
    return {
        "sizes": (counts.sum(1) + 1 + plan.tables).tolist(),
        "back": (counts[:, plan.parts != 0].sum(1) + 1).tolist(),
    }


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


def _pack_torch(plan: RoutePlan, ids: Tensor, lens: Sequence[int]) -> Packed:
    """`pack` in torch ops, table by table (the same buffer as the native pass)."""
    world, tables = plan.world, plan.tables
    parts, base = plan.parts.tolist(), plan.base.tolist()
    runs: list[list[Tensor]] = [[] for _ in range(world)]  # per rank: its run of each table
    counts = torch.zeros(world, tables, dtype=torch.int64)
    routed: list[tuple[Tensor, Tensor] | None] = []  # per table: (ranks sorted, their order)
    at = 0
    for t, n in enumerate(lens):
        x = ids[at : at + n]
        at += n
        if parts[t] == 0:  # replicated: to every rank
            for run in runs:
                run.append(x)
            counts[:, t] = n
            routed.append(None)
            continue
        bounds = plan.table_bounds(t)
        part = (
            torch.remainder(mix64(x ^ plan.salt), parts[t])
            if bounds is None
            else bucket_part(x, bounds)
        )
        dest = plan.owners[base[t] + part]
        dest, order = torch.sort(dest, stable=True)
        per_rank = torch.bincount(dest, minlength=world)
        counts[:, t] = per_rank
        x = x[order]
        start = 0
        for d, c in enumerate(per_rank.tolist()):
            runs[d].append(x[start : start + c])
            start += c
        routed.append((dest, order))
    # Way back: to rank d one block [flag, its slots of each partitioned table's run].
    rows = counts.tolist()
    first = torch.zeros(world, tables, dtype=torch.int64)  # (d, t): where its run comes back
    pos = 0
    for d in range(world):
        pos += 1
        for t in range(tables):
            if parts[t]:
                first[d, t] = pos
                pos += rows[d][t]
    where = torch.full((ids.numel(),), -1, dtype=torch.int64)
    at = 0
    for t, n in enumerate(lens):
        route = routed[t]
        if route is not None:
            dest, order = route
            before = torch.cumsum(counts[:, t], 0) - counts[:, t]  # sorted ids to lower ranks
            where[at : at + n][order] = (first[:, t] - before)[dest] + torch.arange(n)
        at += n
    headers = torch.cat([torch.zeros(world, 1, dtype=torch.int64), counts], dim=1)
    send = torch.cat([x for d in range(world) for x in (headers[d], *runs[d])])
    return Packed(send=send, **_sizes(plan, counts), where=where)


def pack_refusal(plan: RoutePlan) -> Packed:
    """The out buffer of a rank that refused its batch: flagged headers, no ids."""
    send = torch.zeros(plan.world, 1 + plan.tables, dtype=torch.int64)
    send[:, 0] = BAD_INPUT
    return Packed(
        send=send.reshape(-1),
        sizes=[1 + plan.tables] * plan.world,
        back=[1] * plan.world,
        where=torch.empty(0, dtype=torch.int64),
    )


def exchange_out(
    env: ShardingEnv, plan: RoutePlan, packed: Packed, error: BaseException | None
) -> tuple[Tensor, list[int], list[list[int]]]:
    """Send the out buffers; every rank raises when any rank flagged its block. Returns the
    received buffer, its size from each rank, and each rank's per-table counts."""
    received, recv = all_to_all_ids(env, packed.send, packed.sizes)
    tables = plan.tables
    starts = [sum(recv[:s]) for s in range(env.world_size)]
    heads = torch.stack([received[a : a + 1 + tables] for a in starts]).tolist()
    failed = [s for s, h in enumerate(heads) if h[0]]
    if failed:
        raise_agreed(env, error, failed)
    assert error is None
    return received, recv, [h[1:] for h in heads]


def by_table(
    received: Tensor, recv: Sequence[int], counts: Sequence[Sequence[int]]
) -> list[Tensor]:
    """Per table: the ids every rank sent here, in rank order (what its map takes)."""
    tables = len(counts[0]) if counts else 0
    pieces: list[list[Tensor]] = [[] for _ in range(tables)]
    at = 0
    for total, row in zip(recv, counts, strict=True):
        pos = at + 1 + tables
        for t, c in enumerate(row):
            pieces[t].append(received[pos : pos + c])
            pos += c
        at += total
    return [p[0] if len(p) == 1 else torch.cat(p) for p in pieces]


def exchange_back(
    env: ShardingEnv,
    owner: str,
    names: Sequence[str],
    found: Sequence[Tensor],
    partitioned: Sequence[int],
    counts: Sequence[Sequence[int]],
    packed: Packed,
    failure: tuple[int, BaseException] | None,
) -> Tensor:
    """Send each partitioned table's slots back to the ranks their ids came from, with this
    rank's flag (`failure`: the first table whose map raised here, and its error); every rank
    raises when any owner flagged. Returns the way-back buffer (`packed.where` indexes it)."""
    flag = torch.tensor([0 if failure is None else failure[0] + 1], dtype=torch.int64)
    blocks: list[Tensor] = []
    starts = [0] * len(names)
    for row in counts:  # per source rank: the flag, then its ids' slots, table after table
        blocks.append(flag)
        for t in partitioned:
            blocks.append(found[t][starts[t] : starts[t] + row[t]])
            starts[t] += row[t]
    per_rank = [1 + sum(row[t] for t in partitioned) for row in counts]
    back = return_ids(env, torch.cat(blocks), per_rank, packed.back)
    heads_at = [sum(packed.back[:d]) for d in range(env.world_size)]
    flags = back[torch.tensor(heads_at, dtype=torch.int64)].tolist()
    failed = {d: names[f - 1] for d, f in enumerate(flags) if f}
    if failed:
        _raise_map_error(env, owner, failed, failure)
    return back


def _raise_map_error(
    env: ShardingEnv,
    owner: str,
    failed: dict[int, str],
    failure: tuple[int, BaseException] | None,
) -> None:
    """Every rank: the failing owners re-raise their own error (a note names the table and
    rank), the others a `DynamicMapError` quoting them."""
    error = None if failure is None else failure[1]
    if error is not None:
        error.add_note(
            f"{owner}: raised by the id map of dynamic table {failed[env.rank]!r} on rank "
            f"{env.rank} while mapping this batch's exchanged ids; every rank stops with this "
            "batch (docs/dynamic.md, Sharding: when an owner fails)"
        )
    try:
        raise_agreed(env, error, sorted(failed))
    except PeerError as peer:
        if error is not None:
            raise
        where = "; ".join(
            f"rank {r} (table {failed[r]!r}): {m}"
            for r, m in zip(peer.ranks, peer.messages, strict=True)
        )
        raise DynamicMapError(
            f"{owner}: the id map of dynamic table(s) {sorted(set(failed.values()))} raised on "
            f"the owning rank(s) {sorted(failed)} while mapping this batch's ids, so rank "
            f"{env.rank} stops too: {where}",
            failed,
            peer.ranks,
            peer.messages,
        ) from peer
