"""A plain-Python model of TorchRec's sorted managed-collision hashing (MCH), for the mc tests.

Written from TorchRec's documented behaviour (docs/dynamic.md, "TorchRec managed-collision
modules"): `zch_size` slots, the last a reserved miss row; a window of the ids seen since the
last round (sized at the first non-empty batch, 1.25 x its ids x interval, overflow dropped);
every `interval` training forwards the window's distinct ids (by count, then id) compete with
the held ids on the policy's score; the best `zch_size` stay (held slots first on ties) and the
winners take the losers' rows in score order.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence

INT64_MAX = (1 << 63) - 1


@dataclasses.dataclass
class Slot:
    raw: int
    row: int
    counts: int = 0
    last: int = 0


Score = Callable[[int, Slot], float]


def lfu(now: int, s: Slot) -> float:
    return float(s.counts)


def lru(now: int, s: Slot) -> float:
    return -float(now - s.last + 1)


def distance_lfu(now: int, s: Slot) -> float:
    return s.counts / float(now - s.last + 1)


class MCHModel:
    def __init__(self, zch_size: int, interval: int, score: Score) -> None:
        self.zch = zch_size
        self.interval = interval
        self.score = score
        self.slots = [Slot(INT64_MAX, r) for r in range(zch_size)]
        self.iter = 0
        self.last_round = 0
        self.capacity = -1
        self.window: list[tuple[int, int]] = []  # (id, iteration)
        self.evicted: set[int] | None = None

    def lookup(self, ids: Sequence[int]) -> list[int]:
        held = {s.raw: s.row for s in self.slots[:-1]}
        return [held.get(i, self.zch - 1) for i in ids]

    def train_step(self, ids: Sequence[int]) -> list[int]:
        self.iter += 1
        if self.capacity == -1 and ids:
            self.capacity = int(len(ids) * self.interval * 1.25)
        if self.capacity > 0:
            room = self.capacity - len(self.window)
            self.window += [(i, self.iter) for i in list(ids)[:room]]
        if self.iter - self.last_round == self.interval:
            if self.capacity > 0:
                self._round()
            self.last_round = self.iter
        return self.lookup(ids)

    def take_evicted(self) -> list[int] | None:
        out, self.evicted = self.evicted, None
        return None if out is None else sorted(out)

    def _round(self) -> None:
        counts = Counter(i for i, _ in self.window)
        last: dict[int, int] = {}
        for i, it in self.window:
            last[i] = max(last.get(i, 0), it)
        self.window = []
        by_raw = {s.raw: s for s in self.slots[:-1]}
        new: list[Slot] = []
        for i in sorted(counts, key=lambda i: (-counts[i], i)):
            if i in by_raw:
                by_raw[i].counts += counts[i]
                by_raw[i].last = last[i]
            else:
                new.append(Slot(i, -1, counts[i], last[i]))
        sentinel = self.slots[-1]
        sentinel.counts, sentinel.last = INT64_MAX, self.iter
        merged = [*self.slots, *new]
        order = sorted(range(len(merged)), key=lambda k: -self.score(self.iter, merged[k]))
        kept, dropped = order[: self.zch], order[self.zch :]
        losers = [k for k in dropped if k < self.zch]
        winners = [k - self.zch for k in kept if k >= self.zch]
        rows = set()
        for k, w in zip(losers, winners, strict=True):
            row = self.slots[k].row
            rows.add(row)
            self.slots[k] = dataclasses.replace(new[w], row=row)
        self.evicted = rows if self.evicted is None else self.evicted | rows
        self.slots.sort(key=lambda s: s.raw)
