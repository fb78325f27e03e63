"""Choose an option and ranks for every table: a greedy start improved by local search.

Objective: the slowest rank's estimated step time (the sum of its shards' costs), with every
rank's device and host memory, and its disk (tiered tables' stores), under their caps. The
greedy start picks each table's cheapest option that fits one rank, switches tables to smaller
options (least time added per byte saved) while the model would not fit all ranks' memory
together, and places tables heaviest first
(largest of cost / lower bound and memory / cap) on the least-loaded rank with room. Local search
then repeatedly takes the slowest rank and tries, in order: moving one of its shards to the
least-loaded rank that has room, swapping one of its shards with a lighter one elsewhere,
re-sharding one of its tables with another option (re-placed greedily), and making room on a
light rank for a cheaper option of one of its tables. A change is kept only if it lowers (max
load, number of ranks at the max); the search stops at a local optimum, near the lower bound, on
a plateau, or at the time budget.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import numpy.typing as npt

from shardrec_planner.options import Option
from shardrec_planner.search_bound import cheapest_under_budget, fits_alone, lower_bound
from shardrec_planner.search_start import greedy, initial_choices

__all__ = ["SearchResult", "lower_bound", "search"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_REL_TOL = 1e-9
TARGET_GAP = 1e-3
"""The search stops once the slowest rank is within 0.1% of the lower bound."""
STALL_GAIN = 1e-4
STALL_STEPS = 30
"""...or after 30 steps that together lowered the slowest rank by less than 0.01%."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchResult:
    """Per table: the chosen option's index and the rank of each of its shards, and why."""

    choice: list[int]
    ranks: list[IntArray]
    reasons: list[str]
    loads: FloatArray
    memory: FloatArray
    host_memory: FloatArray
    lower_bound: float
    disk: FloatArray
    failed: list[int]  # tables that could not be placed (empty on success)


class SearchState:
    def __init__(
        self,
        options: list[list[Option]],
        world: int,
        local: int,
        cap: float,
        host_cap: float,
        disk_cap: float = np.inf,
    ) -> None:
        self.options = options
        self.world, self.local, self.cap, self.host_cap = world, local, cap, host_cap
        self.disk_cap = disk_cap
        self.disk: FloatArray = np.zeros(world)
        self.hosts = world // local
        self.loads: FloatArray = np.zeros(world)
        self.mem: FloatArray = np.zeros(world)
        self.host: FloatArray = np.zeros(world)
        self.choice = [-1] * len(options)
        self.ranks: list[IntArray] = [np.zeros(0, dtype=np.int64) for _ in options]
        # movable shards (table, shard) per rank, for moves and swaps; every table per rank
        self.on_rank: list[set[tuple[int, int]]] = [set() for _ in range(world)]
        self.tables_on: list[set[int]] = [set() for _ in range(world)]

    # -- bookkeeping -------------------------------------------------------------------------
    def add(self, t: int, oi: int, ranks: IntArray) -> None:
        opt = self.options[t][oi]
        np.add.at(self.loads, ranks, opt.cost)
        np.add.at(self.mem, ranks, opt.memory)
        np.add.at(self.host, ranks, opt.host_memory)
        np.add.at(self.disk, ranks, opt.disk_bytes)
        self.choice[t], self.ranks[t] = oi, ranks
        for r in set(ranks.tolist()):
            self.tables_on[r].add(t)
        if opt.kind in ("free", "host_free"):
            for s, r in enumerate(ranks.tolist()):
                self.on_rank[r].add((t, s))

    def remove(self, t: int) -> tuple[int, IntArray]:
        oi, ranks = self.choice[t], self.ranks[t]
        opt = self.options[t][oi]
        np.subtract.at(self.loads, ranks, opt.cost)
        np.subtract.at(self.mem, ranks, opt.memory)
        np.subtract.at(self.host, ranks, opt.host_memory)
        np.subtract.at(self.disk, ranks, opt.disk_bytes)
        for r in set(ranks.tolist()):
            self.tables_on[r].discard(t)
        if opt.kind in ("free", "host_free"):
            for s, r in enumerate(ranks.tolist()):
                self.on_rank[r].discard((t, s))
        self.choice[t] = -1
        return oi, ranks

    def potential(self) -> tuple[float, int]:
        top = float(self.loads.max())
        return top, int(np.count_nonzero(self.loads >= top * (1.0 - _REL_TOL)))

    def domain(self, t: int, s: int) -> tuple[int, int]:
        opt = self.options[t][self.choice[t]]
        if opt.kind == "host_free":
            host = int(self.ranks[t][0]) // self.local
            return host * self.local, (host + 1) * self.local
        return 0, self.world

    # -- greedy placement of one option (does not commit) --------------------------------------
    def place(self, t: int, oi: int) -> IntArray | None:
        opt = self.options[t][oi]
        if opt.kind == "fixed":
            n = len(opt.cost)
            if np.any(self.mem[:n] + opt.memory > self.cap):
                return None
            if np.any(self.host[:n] + opt.host_memory > self.host_cap):
                return None
            if np.any(self.disk[:n] + opt.disk_bytes > self.disk_cap):
                return None
            return np.arange(n, dtype=np.int64)
        if opt.kind == "free":
            return self._place_free(
                opt, 0, self.world, self.loads.copy(), self.mem.copy(), self.host.copy()
            )
        if opt.kind == "host_free":
            sums = self.loads.reshape(self.hosts, self.local).sum(axis=1)
            for host in np.argsort(sums, kind="stable").tolist():
                lo, hi = host * self.local, (host + 1) * self.local
                got = self._place_free(
                    opt, lo, hi, self.loads.copy(), self.mem.copy(), self.host.copy()
                )
                if got is not None:
                    return got
            return None
        # host / grid: blocks of `local` shards, each block on the ranks of one host
        loads, mem, host_mem = self.loads.copy(), self.mem.copy(), self.host.copy()
        disk = self.disk.copy()
        out = np.zeros(len(opt.cost), dtype=np.int64)
        for start in range(0, len(opt.cost), opt.block):
            c = opt.cost[start : start + opt.block]
            m = opt.memory[start : start + opt.block]
            h = opt.host_memory[start : start + opt.block]
            peak = (loads.reshape(self.hosts, self.local) + c).max(axis=1)
            d = opt.disk_bytes[start : start + opt.block]
            fits = (
                np.all(mem.reshape(self.hosts, self.local) + m <= self.cap, axis=1)
                & np.all(host_mem.reshape(self.hosts, self.local) + h <= self.host_cap, axis=1)
                & np.all(disk.reshape(self.hosts, self.local) + d <= self.disk_cap, axis=1)
            )
            if not fits.any():
                return None
            host = int(np.argmin(np.where(fits, peak, np.inf)))
            ranks = np.arange(host * self.local, (host + 1) * self.local, dtype=np.int64)
            loads[ranks] += c
            mem[ranks] += m
            host_mem[ranks] += h
            disk[ranks] += d
            out[start : start + opt.block] = ranks
        return out

    def _place_free(
        self,
        opt: Option,
        lo: int,
        hi: int,
        loads: FloatArray,
        mem: FloatArray,
        host_mem: FloatArray,
    ) -> IntArray | None:
        out = np.zeros(len(opt.cost), dtype=np.int64)
        disk = self.disk.copy()
        for s in np.argsort(-opt.cost, kind="stable").tolist():
            fits = (
                (mem[lo:hi] + opt.memory[s] <= self.cap)
                & (host_mem[lo:hi] + opt.host_memory[s] <= self.host_cap)
                & (disk[lo:hi] + opt.disk_bytes[s] <= self.disk_cap)
            )
            if not fits.any():
                return None
            r = lo + int(np.argmin(np.where(fits, loads[lo:hi], np.inf)))
            loads[r] += opt.cost[s]
            mem[r] += opt.memory[s]
            host_mem[r] += opt.host_memory[s]
            disk[r] += opt.disk_bytes[s]
            out[s] = r
        return out

    # -- local search moves ------------------------------------------------------------------
    def _shards_on(self, b: int) -> list[tuple[float, int, int]]:
        items = [(float(self.options[t][self.choice[t]].cost[s]), t, s) for t, s in self.on_rank[b]]
        items.sort(reverse=True)
        return items

    def _move_shard(self, t: int, s: int, dst: int) -> None:
        opt = self.options[t][self.choice[t]]
        src = int(self.ranks[t][s])
        self.loads[src] -= opt.cost[s]
        self.mem[src] -= opt.memory[s]
        self.host[src] -= opt.host_memory[s]
        self.disk[src] -= opt.disk_bytes[s]
        self.loads[dst] += opt.cost[s]
        self.mem[dst] += opt.memory[s]
        self.host[dst] += opt.host_memory[s]
        self.disk[dst] += opt.disk_bytes[s]
        self.on_rank[src].discard((t, s))
        self.on_rank[dst].add((t, s))
        self.ranks[t][s] = dst
        if not np.any(self.ranks[t] == src):
            self.tables_on[src].discard(t)
        self.tables_on[dst].add(t)

    def try_move(self, b: int, top: float) -> bool:
        tol = top * _REL_TOL
        for c, t, s in self._shards_on(b):
            if c <= 0.0:
                break
            lo, hi = self.domain(t, s)
            opt = self.options[t][self.choice[t]]
            m, h = float(opt.memory[s]), float(opt.host_memory[s])
            fits = (
                (self.mem[lo:hi] + m <= self.cap)
                & (self.host[lo:hi] + h <= self.host_cap)
                & (self.disk[lo:hi] + float(opt.disk_bytes[s]) <= self.disk_cap)
            )
            if lo <= b < hi:
                fits[b - lo] = False
            if not fits.any():
                continue
            r = lo + int(np.argmin(np.where(fits, self.loads[lo:hi], np.inf)))
            if r != b and self.loads[r] + c < top - tol:
                self._move_shard(t, s, r)
                return True
        return False

    def try_swap(self, b: int, top: float, fanout: int = 16) -> bool:
        tol = top * _REL_TOL
        k = min(fanout, self.world - 1)
        if k <= 0:
            return False
        light = np.argpartition(self.loads, k)[: k + 1].tolist()
        on: dict[int, list[tuple[float, int, int]]] = {}
        for cs, t, s in self._shards_on(b):
            ms = float(self.options[t][self.choice[t]].memory[s])
            hs = float(self.options[t][self.choice[t]].host_memory[s])
            ds = float(self.options[t][self.choice[t]].disk_bytes[s])
            slo, shi = self.domain(t, s)
            for r in light:
                if r == b or not slo <= r < shi:
                    continue
                if r not in on:
                    on[r] = self._shards_on(r)
                for ct, u, v in on[r]:
                    if ct >= cs:
                        continue
                    mt = float(self.options[u][self.choice[u]].memory[v])
                    ht = float(self.options[u][self.choice[u]].host_memory[v])
                    dt = float(self.options[u][self.choice[u]].disk_bytes[v])
                    ulo, uhi = self.domain(u, v)
                    if not ulo <= b < uhi:
                        continue
                    if self.mem[b] - ms + mt > self.cap or self.mem[r] - mt + ms > self.cap:
                        continue
                    if (
                        self.host[b] - hs + ht > self.host_cap
                        or self.host[r] - ht + hs > self.host_cap
                        or self.disk[b] - ds + dt > self.disk_cap
                        or self.disk[r] - dt + ds > self.disk_cap
                    ):
                        continue
                    if max(self.loads[b] - cs + ct, self.loads[r] - ct + cs) < top - tol:
                        self._move_shard(t, s, r)
                        self._move_shard(u, v, b)
                        return True
        return False

    def try_evict(self, b: int, reasons: list[str], max_tables: int = 3, fanout: int = 2) -> bool:
        """Make room for a cheaper option of one of b's tables on a light rank.

        When memory blocks every single move, a heavy table on the slowest rank (say, a UVM table
        that would be faster on the device) can only get faster if some other table on a light
        rank moves to a smaller option first. Tries: evict the light rank's tables with the
        least cost added per byte freed until the cheaper option fits there; kept only if
        (max load, ranks at max) drops, else every change is undone.
        """
        before = self.potential()
        top = before[0]
        cost_on_b = {
            t: float(self.options[t][self.choice[t]].cost[self.ranks[t] == b].sum())
            for t in self.tables_on[b]
        }
        light = np.argsort(self.loads, kind="stable")[:fanout].tolist()
        for t in sorted(cost_on_b, key=lambda k: -cost_on_b[k])[:max_tables]:
            opts, cur = self.options[t], self.options[t][self.choice[t]]
            for oi, o in enumerate(opts):
                if o.kind != "free" or len(o.cost) != 1 or o.total_cost >= cur.total_cost:
                    continue
                if not fits_alone(o, self.cap, self.host_cap, self.disk_cap):
                    continue
                for r in light:
                    if r == b or self.loads[r] + float(o.cost[0]) >= top:
                        continue
                    if self.disk[r] + float(o.disk_bytes[0]) > self.disk_cap:
                        continue
                    undo = self._evict_for(r, float(o.memory[0]), float(o.host_memory[0]), t)
                    if undo is None:
                        continue
                    old_oi, old_ranks = self.remove(t)
                    self.add(t, oi, np.array([r], dtype=np.int64))
                    after = self.potential()
                    if after < before:
                        reasons[t] = (
                            f"{o.label}: chosen over {cur.label} after moving smaller tables off "
                            f"rank {r}, as it lowers the slowest rank from {top * 1e3:.4g} to "
                            f"{after[0] * 1e3:.4g} ms"
                        )
                        return True
                    self.remove(t)
                    self.add(t, old_oi, old_ranks)
                    for u, u_oi, u_ranks in reversed(undo):
                        self.remove(u)
                        self.add(u, u_oi, u_ranks)
        return False

    def _evict_for(
        self, r: int, need: float, host_need: float, keep: int, max_evictions: int = 4
    ) -> list[tuple[int, int, IntArray]] | None:
        """Switch tables on rank r to smaller options until `need` bytes fit there; the undo log,
        or None (with everything undone) if that takes more than `max_evictions` tables."""
        undo: list[tuple[int, int, IntArray]] = []

        def fits() -> bool:
            return bool(
                self.mem[r] + need <= self.cap and self.host[r] + host_need <= self.host_cap
            )

        candidates: list[tuple[float, int, int]] = []
        for u in self.tables_on[r]:
            cur = self.options[u][self.choice[u]]
            if u == keep or cur.kind != "free":
                continue
            for oi, o in enumerate(self.options[u]):
                saved = cur.total_memory - o.total_memory
                if saved > 0:
                    candidates.append((max(o.total_cost - cur.total_cost, 0.0) / saved, u, oi))
        candidates.sort()
        done: set[int] = set()
        for _, u, oi in candidates:
            if fits() or len(done) >= max_evictions:
                break
            if u in done:
                continue
            old_oi, old_ranks = self.remove(u)
            placed = self.place(u, oi)
            if placed is None:
                self.add(u, old_oi, old_ranks)
                continue
            self.add(u, oi, placed)
            undo.append((u, old_oi, old_ranks))
            done.add(u)
        if fits():
            return undo
        for u, u_oi, u_ranks in reversed(undo):
            self.remove(u)
            self.add(u, u_oi, u_ranks)
        return None

    def try_reoption(self, b: int, reasons: list[str], max_tables: int = 8) -> bool:
        before = self.potential()
        on_b: dict[int, float] = {}
        for t in self.tables_on[b]:
            hit = self.ranks[t] == b
            on_b[t] = float(self.options[t][self.choice[t]].cost[hit].sum())
        for t in sorted(on_b, key=lambda k: -on_b[k])[:max_tables]:
            old_oi, old_ranks = self.remove(t)
            opts = self.options[t]
            order = sorted(range(len(opts)), key=lambda i: opts[i].total_cost)
            for oi in order:
                placed = self.place(t, oi)
                if placed is None:
                    continue
                self.add(t, oi, placed)
                after = self.potential()
                if after < before:
                    if oi != old_oi:
                        effect = (
                            f"lowers the slowest rank from {before[0] * 1e3:.4g} to "
                            f"{after[0] * 1e3:.4g} ms"
                            if after[0] < before[0]
                            else f"takes rank {b} off the slowest ranks ({before[0] * 1e3:.4g} ms)"
                        )
                        reasons[t] = (
                            f"{opts[oi].label}: chosen over {opts[old_oi].label}, as it {effect}"
                        )
                    return True
                self.remove(t)
            self.add(t, old_oi, old_ranks)
        return False


def search(
    options: list[list[Option]],
    *,
    world_size: int,
    local_world_size: int,
    memory_cap: float,
    host_memory_cap: float,
    time_budget_s: float,
    disk_cap: float = np.inf,
) -> SearchResult:
    """Place every table; `failed` lists tables that fit nowhere (the caller raises).
    `disk_cap`: each rank's disk for tiered tables' stores."""
    deadline = time.perf_counter() + time_budget_s
    full = cheapest_under_budget(
        options, memory_cap, host_memory_cap, memory_cap * world_size, disk_cap
    )
    lb = lower_bound(options, world_size, memory_cap, host_memory_cap, full, disk_cap)
    reasons = [""] * len(options)

    def fresh() -> SearchState:
        return SearchState(
            options, world_size, local_world_size, memory_cap, host_memory_cap, disk_cap
        )

    # Cost-first placement, then memory-first, each with less of the total memory planned in:
    # the first attempt that places every table wins.
    for fill in (1.0, 0.9, 0.75, 0.5):
        initial = initial_choices(fresh(), fill, reasons, full if fill == 1.0 else None)
        for by_memory in (False, True):
            state = fresh()
            failed = greedy(state, lb, initial, by_memory, reasons)
            if not failed:
                break
        if not failed:
            break
    if not failed and options:
        best, stalled = float("inf"), 0
        while time.perf_counter() < deadline:
            top, _ = state.potential()
            if top <= lb * (1.0 + TARGET_GAP):
                break
            # many small steps that do not move the maximum: a plateau, not worth the time
            if top < best * (1.0 - STALL_GAIN):
                best, stalled = top, 0
            else:
                stalled += 1
                if stalled > STALL_STEPS:
                    break
            b = int(np.argmax(state.loads))
            if state.try_move(b, top) or state.try_swap(b, top):
                continue
            if not (state.try_reoption(b, reasons) or state.try_evict(b, reasons)):
                break
    return SearchResult(
        choice=list(state.choice),
        ranks=[r.copy() for r in state.ranks],
        reasons=reasons,
        loads=state.loads.copy(),
        memory=state.mem.copy(),
        host_memory=state.host.copy(),
        lower_bound=lb,
        disk=state.disk.copy(),
        failed=failed,
    )
