"""A plain-Python dict model of a dynamic table (ids -> slot, admission, eviction, counters).

Written from docs/dynamic.md's rules, independently of `shardrec_embedding.dynamic.table`:
dicts and lists, one id at a time, with its own (integer) copy of the hash.
"""

from __future__ import annotations

from shardrec_embedding.dynamic import AdmissionPolicy, DynamicTableConfig, EvictionPolicy
from shardrec_embedding.dynamic.table import EVICTION_SAMPLE

M64 = (1 << 64) - 1


def mix64(x: int) -> int:
    x &= M64
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & M64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & M64
    return x ^ (x >> 33)


def signed(x: int) -> int:
    x &= M64
    return x - (1 << 64) if x >> 63 else x


class ModelTable:
    def __init__(self, config: DynamicTableConfig, capacity: int) -> None:
        self.cfg, self.capacity = config, capacity
        self.id2slot: dict[int, int] = {}
        self.slot2id: dict[int, int] = {}
        self.last_seen = [0] * capacity
        self.counts = [0] * capacity
        self.free: list[int] = []
        self.high_water = 0
        self.steps = 0
        self.sightings: dict[int, int] = {}
        self.evict_cursor = self.ttl_cursor = 0
        self.admissions = self.rejections = self.evictions = self.unknown_reads = 0
        self.freed: list[list[int]] = []

    def lookup(self, ids: list[int]) -> list[int]:
        out = [self.id2slot.get(i, -1) for i in ids]
        self.unknown_reads += sum(s < 0 for s in out)
        return out

    def train(self, ids: list[int]) -> list[int]:
        self.steps += 1
        s = self.steps
        for i in ids:
            if i in self.id2slot:
                slot = self.id2slot[i]
                self.last_seen[slot] = s
                self.counts[slot] += 1
        if self.cfg.eviction is EvictionPolicy.TTL:
            width = min(self.capacity, self.cfg.scan_per_step)
            window = self._window("ttl_cursor", width)
            self._free([x for x in window if x in self.slot2id and self._expired(x, s)])
        missing: dict[int, int] = {}
        for i in ids:
            if i not in self.id2slot:
                missing[i] = missing.get(i, 0) + 1
        admitted = [i for i, c in missing.items() if self._admit(i, c, s)]
        self.rejections += len(missing) - len(admitted)
        need = len(admitted)
        if need > self._available() and self.cfg.eviction is not EvictionPolicy.NONE:
            self._evict(need - self._available(), s)
        take = min(need, self._available())
        self.rejections += need - take
        reused = min(take, len(self.free))
        new_slots = self.free[len(self.free) - reused :]
        del self.free[len(self.free) - reused :]
        new_slots += list(range(self.high_water, self.high_water + take - reused))
        self.high_water += take - reused
        for i, slot in zip(admitted[:take], new_slots, strict=True):
            self.id2slot[i], self.slot2id[slot] = slot, i
            self.last_seen[slot], self.counts[slot] = s, missing[i]
        self.admissions += take
        return [self.id2slot.get(i, -1) for i in ids]

    def _admit(self, i: int, count: int, step: int) -> bool:
        cfg = self.cfg
        if cfg.admission is AdmissionPolicy.THRESHOLD:
            self.sightings[i] = self.sightings.get(i, 0) + count
            return self.sightings[i] >= cfg.admission_threshold
        if cfg.admission is AdmissionPolicy.PROBABILITY:
            step_key = mix64((step * 0x9E3779B97F4A7C15) % (1 << 63))
            key = signed(mix64(i) ^ step_key) ^ cfg.admission_seed
            draw = (mix64(key) >> 11) / float(1 << 53)
            return draw < 1.0 - (1.0 - cfg.admission_probability) ** count
        return True

    def _expired(self, slot: int, step: int) -> bool:
        assert self.cfg.ttl_steps is not None
        return step - self.last_seen[slot] > self.cfg.ttl_steps

    def _available(self) -> int:
        return len(self.free) + self.capacity - self.high_water

    def _window(self, cursor: str, width: int) -> list[int]:
        start = getattr(self, cursor)
        setattr(self, cursor, (start + width) % self.capacity)
        return [(start + j) % self.capacity for j in range(width)]

    def _evict(self, k: int, step: int) -> None:
        width = min(self.capacity, max(EVICTION_SAMPLE * k, self.cfg.scan_per_step))
        scanned, victims = 0, []
        while k > 0 and scanned < self.capacity:
            window = self._window("evict_cursor", min(width, self.capacity - scanned))
            scanned += len(window)
            cand = [x for x in window if x in self.slot2id and self.last_seen[x] < step]
            if self.cfg.eviction is EvictionPolicy.TTL:
                cand = [x for x in cand if self._expired(x, step)]
            if self.cfg.eviction is EvictionPolicy.LFU:
                cand.sort(key=lambda x: (self.counts[x], self.last_seen[x]))
            else:
                cand.sort(key=lambda x: self.last_seen[x])
            victims += cand[:k]
            k -= len(cand[:k])
        self._free(victims)

    def _free(self, slots: list[int]) -> None:
        if not slots:
            return
        for x in slots:
            del self.id2slot[self.slot2id.pop(x)]
            self.last_seen[x] = self.counts[x] = 0
        self.free += slots
        self.evictions += len(slots)
        self.freed.append(list(slots))

    def stats(self) -> dict[str, int]:
        return {
            "capacity": self.capacity,
            "occupancy": len(self.slot2id),
            "admissions": self.admissions,
            "rejections": self.rejections,
            "evictions": self.evictions,
            "unknown_reads": self.unknown_reads,
            "steps": self.steps,
        }

    def items(self) -> list[tuple[int, int]]:
        return sorted(((i, s) for i, s in self.id2slot.items()), key=lambda p: p[1])


def reset_row(
    init_seed: int, name: str, slot: int, generation: int, dim: int, low: float, high: float
) -> list[float]:
    """The row a freed `slot` of table `name` is reset to when the table has run `generation`
    training steps (docs/dynamic.md, "Reset rows"): float32 values, one at a time."""
    import zlib

    import numpy as np

    seed = mix64(init_seed ^ (zlib.crc32(name.encode()) << 32))
    key = mix64(seed ^ mix64(slot + generation * 0x9E3779B97F4A7C15))
    lo = np.float32(low)
    span = np.float32(np.float32(high) - lo)
    row = []
    for j in range(dim):
        h = mix64(key + (j // 2 + 1) * 0xD1B54A32D192ED03)
        bits = (h >> 40) if j % 2 == 0 else (h >> 8) & 0xFFFFFF
        u = np.float32(bits) * np.float32(2.0**-24)
        row.append(float(lo + span * u))
    return row
