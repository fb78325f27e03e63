"""Multi-probe zero-collision hashing over an identity table, vectorized over the batch.

The table is `identities: (Z,)` int64, -1 for an empty slot, cut into buckets (row ranges). An
id is confined to its bucket `[offset, offset + size)` and probes `max_probe` slots from
`offset + hash(id) % size`, wrapping inside the bucket:

    bucket:  [ . . a . b c . . ]     id x: start = hash(x) % 8, probes start, start+1, ...

`lookup` finds each id's slot (or -1). `insert` gives each id without one the first empty slot
of its window; ids competing for a slot: the one first in the batch wins and the others probe on
(at most `max_probe` rounds: each lost round fills one slot of the loser's window). When
`expiry` (int32 per slot) is given, a slot whose expiry is below `threshold` counts as free
(evicted); `oldest_first` takes the expired slot with the oldest expiry instead of the first.

No Python loop runs over ids: every step is a tensor op over `(U, max_probe)` candidates.
"""

from __future__ import annotations

import torch

__all__ = ["hash_ids", "insert", "lookup", "probe_slots"]

# The functions hold their constants as locals: `torch.jit.script` compiles them (mc.scripted)
# and TorchScript reads no module-level value.


def hash_ids(ids: torch.Tensor) -> torch.Tensor:
    """murmur3's 64-bit finalizer of `ids: (N,)` int64 (wrapping arithmetic), `(N,)` int64."""
    c1 = -49064778989728563  # 0xFF51AFD7ED558CCD, murmur3 fmix64's constants as signed int64
    c2 = -4265267296055464877  # 0xC4CEB9FE1A85EC53
    low31 = 2147483647  # (1 << 31) - 1: an arithmetic shift's sign bits masked off
    h = ids ^ ((ids >> 33) & low31)
    h = h * c1
    h = h ^ ((h >> 33) & low31)
    h = h * c2
    return h ^ ((h >> 33) & low31)


def probe_slots(
    ids: torch.Tensor, offsets: torch.Tensor, sizes: torch.Tensor, max_probe: int
) -> torch.Tensor:
    """`(N, P)` slots each id probes, P = min(max_probe, its bucket size) padded by repeats."""
    steps = torch.arange(max_probe, dtype=torch.int64, device=ids.device)
    start = torch.remainder(hash_ids(ids), sizes)
    return offsets[:, None] + torch.remainder(start[:, None] + steps, sizes[:, None])


def lookup(identities: torch.Tensor, ids: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """Slot holding each id among its probe `slots: (N, P)`, or -1; `(N,)`.

    Probes 8 slots at a time and stops an id at its first empty slot: an id is never
    stored past an empty slot of its window (`insert` takes the first free one, and slots are
    never freed), so most ids are resolved by the first block.
    """
    step = 8  # probes looked at per round
    found = torch.full_like(ids, -1)
    pending = torch.arange(ids.numel(), device=ids.device)
    for start in range(0, slots.size(1), step):
        if pending.numel() == 0:
            break
        block = slots[pending, start : start + step]
        held = identities[block]
        hit = held == ids[pending, None]
        has_hit = hit.any(dim=1)
        first = hit.to(torch.int8).argmax(dim=1, keepdim=True)
        found[pending[has_hit]] = block.gather(1, first).squeeze(1)[has_hit]
        done = has_hit | (held == -1).any(dim=1)
        pending = pending[~done]
    return found


def insert(
    identities: torch.Tensor,
    ids: torch.Tensor,
    slots: torch.Tensor,
    expiry: torch.Tensor | None = None,
    threshold: int = -1,
    oldest_first: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Give each of the distinct, absent `ids: (U,)` a free slot of its window `slots: (U, P)`.

    Writes `identities` (and marks claimed slots unexpired in `expiry`) in place. Returns
    `(slot per id or -1 if its window is full, slots
    whose previous id was evicted)`.
    """
    result = torch.full_like(ids, -1)
    evicted: list[torch.Tensor] = []
    pending = torch.arange(ids.numel(), device=ids.device)
    for _ in range(slots.size(1)):
        if pending.numel() == 0:
            break
        window = slots[pending]
        taken = identities[window]
        free = taken == -1
        expired = torch.zeros_like(free)
        if expiry is not None:
            expired = (taken != -1) & (expiry[window] < threshold)
        usable = free | expired
        has = usable.any(dim=1)
        pending, window, usable, free = pending[has], window[has], usable[has], free[has]
        if pending.numel() == 0:
            break
        # empty slots first; among expired ones the first (TTL) or the oldest (LRU)
        rank = torch.where(free, 0, 1).to(torch.int64)
        if oldest_first and expiry is not None:
            rank = torch.where(free, torch.iinfo(torch.int64).min, expiry[window].to(torch.int64))
        rank = torch.where(usable, rank, torch.iinfo(torch.int64).max)
        pick = window.gather(1, rank.argmin(dim=1, keepdim=True)).squeeze(1)
        # the earliest pending id wins a contested slot
        winner = torch.full_like(identities, ids.numel()).scatter_reduce(
            0, pick, pending, reduce="amin", include_self=True
        )
        won = winner[pick] == pending
        slot, who = pick[won], pending[won]
        was = identities[slot]
        evicted.append(slot[was != -1])
        identities[slot] = ids[who]
        if expiry is not None:  # claimed this batch: not evictable by a later round
            expiry[slot] = torch.iinfo(torch.int32).max
        result[who] = slot
        pending = pending[~won]
    if evicted:
        return result, torch.cat(evicted)
    return result, torch.empty(0, dtype=torch.int64, device=ids.device)
