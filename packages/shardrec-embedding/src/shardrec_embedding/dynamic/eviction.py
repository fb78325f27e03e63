"""The eviction policies' choice of slots to free (`DynamicTable`'s steps 3 and 4).

Both scan windows of slots from a cursor kept in the table's counters (`ttl_cursor`,
`evict_cursor`), wrapping around the capacity: TTL frees the slots of one window unseen for more
than `ttl_steps` steps; an admission that needs `k` slots more than are free takes up to `k`
victims, scanning windows of `max(EVICTION_SAMPLE * k, scan_per_step)` slots, least recently
seen first (LRU, TTL) or least often seen first, ties by last seen (LFU). Slots of held
(in-flight) steps are never chosen (`in_flight.py`). LRU / TTL windows are selected by the
native counting selection where the map is native (the same slots in the same order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from shardrec_embedding.dynamic.config import EvictionPolicy
from shardrec_embedding.dynamic.id_map import _library

if TYPE_CHECKING:
    from shardrec_embedding.dynamic.table import DynamicTable

__all__ = ["EVICTION_SAMPLE", "evict_for", "ttl_sweep"]

EVICTION_SAMPLE = 8
"""An eviction needing k slots scans windows of max(EVICTION_SAMPLE * k, scan_per_step) slots."""


def _window(
    table: DynamicTable, cursor_name: str, width: int
) -> tuple[Tensor, Tensor, Tensor | int]:
    """The next `width` slots from a cursor (wrapping): their `(occupied, last_seen)` and
    where they are: the first slot (a contiguous window, read as views) or the slots."""
    start = table._counters[cursor_name]
    table._counters[cursor_name] = (start + width) % table.capacity
    if start + width <= table.capacity:
        end = start + width
        return table.occupied[start:end], table.last_seen[start:end], start
    slots = torch.arange(start, start + width) % table.capacity
    return table.occupied[slots], table.last_seen[slots], slots


def _slots_where(ok: Tensor, where: Tensor | int) -> Tensor:
    if isinstance(where, int):
        return torch.nonzero(ok).reshape(-1) + where
    return where[ok]


def ttl_sweep(table: DynamicTable, step: int) -> None:
    """TTL: free the slots of a window of `scan_per_step` unseen for more than `ttl_steps`."""
    ttl = table.config.ttl_steps
    assert ttl is not None
    width = min(table.capacity, table.config.scan_per_step)
    occupied, seen, where = _window(table, "ttl_cursor", width)
    expired = occupied & (step - seen > ttl) & (seen < table.in_flight.protect_below(step))
    table._free(_slots_where(expired, where))


def evict_for(table: DynamicTable, k: int, step: int) -> Tensor:
    """Up to `k` victims by the eviction policy, in eviction order (not freed yet)."""
    policy = table.config.eviction
    width = min(table.capacity, max(EVICTION_SAMPLE * k, table.config.scan_per_step))
    victims: list[Tensor] = []
    scanned = 0
    below = table.in_flight.protect_below(step)  # slots of held (in-flight) steps stay
    while k > 0 and scanned < table.capacity:
        part = min(width, table.capacity - scanned)
        occupied, seen, where = _window(table, "evict_cursor", part)
        scanned += part
        if policy is not EvictionPolicy.LFU and table.map.backend == "native":
            pick = _native_pick(table, occupied, seen, where, step, k, below)
            if pick is not None:
                victims.append(pick)
                k -= pick.numel()
                continue
        ok = occupied & (seen < below)
        if policy is EvictionPolicy.TTL:
            assert table.config.ttl_steps is not None
            ok &= step - seen > table.config.ttl_steps
        cand = _slots_where(ok, where)
        if cand.numel() == 0:
            continue
        cand_seen = seen[ok]
        if policy is EvictionPolicy.LFU:
            order = torch.argsort(cand_seen, stable=True)
            cand = cand[order]
            pick = cand[torch.argsort(table.counts[cand], stable=True)][:k]
        else:
            # (last seen, place in the window) as one distinct key: the k smallest in
            # key order by a partial selection instead of a full sort.
            key = cand_seen * cand.numel() + torch.arange(cand.numel())
            if 8 * k < cand.numel():  # a few victims out of many: partial selection
                pick = cand[torch.topk(key, k, largest=False, sorted=True).indices]
            else:
                pick = cand[torch.argsort(key)[:k]]
        victims.append(pick)
        k -= pick.numel()
    if len(victims) == 1:
        return victims[0]
    return torch.cat(victims) if victims else torch.empty(0, dtype=torch.int64)


def _native_pick(
    table: DynamicTable,
    occupied: Tensor,
    seen: Tensor,
    where: Tensor | int,
    step: int,
    k: int,
    below: int | None = None,
) -> Tensor | None:
    """The LRU / TTL victims of one window by the native counting selection (the same
    slots in the same order as the torch selection below), or None to use that. below:
    only slots last seen before it (held steps: `in_flight.py`; default `step`)."""
    lib = _library()
    assert lib is not None
    occupied, seen = occupied.contiguous(), seen.contiguous()
    out = torch.empty(min(k, seen.numel()), dtype=torch.int64)
    ttl = table.config.ttl_steps if table.config.eviction is EvictionPolicy.TTL else None
    if below is not None and below < step:
        if ttl is not None:
            return None  # the kernel ages TTL rows from its step: the torch selection
        step = below
    got = int(
        lib.sr_idmap_lru_pick(
            occupied.data_ptr(),
            seen.data_ptr(),
            seen.numel(),
            step,
            -1 if ttl is None else ttl,
            k,
            out.data_ptr(),
        )
    )
    if got < 0:
        return None
    pos = out[:got]
    return pos + where if isinstance(where, int) else where[pos]
