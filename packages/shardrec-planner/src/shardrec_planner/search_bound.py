"""Bounds for the placement search: which options fit an empty rank, the cheapest options under
a total memory budget (the LP relaxation of a multiple-choice knapsack), and the lower bound on
the slowest rank that no plan beats."""

from __future__ import annotations

import heapq

import numpy as np

from shardrec_planner.options import Option

Budgeted = tuple[list[int], float, list[tuple[int, int, int]]]
"""`cheapest_under_budget`'s (picks, bound, switches)."""


def fits_alone(o: Option, cap: float, host_cap: float, disk_cap: float = np.inf) -> bool:
    return o.max_memory <= cap and o.max_host_memory <= host_cap and o.max_disk <= disk_cap


def cheapest_under_budget(
    options: list[list[Option]],
    cap: float,
    host_cap: float,
    budget: float,
    disk_cap: float = np.inf,
) -> Budgeted:
    """Cheapest option per table under a total device-memory budget, by the ratio greedy.

    Starts from each table's cheapest option that fits an empty rank; while the total exceeds
    `budget`, takes the switch (over all tables) that costs the least time per byte saved. Walking
    each table's lower convex hull this way solves the LP relaxation of this multiple-choice
    knapsack, so the returned `bound` (the total cost with the last switch taken fractionally) is
    a lower bound on the total cost of any plan that fits. Returns (picks, bound, switches).
    """
    picks: list[int] = []
    for opts in options:
        fitting = [i for i, o in enumerate(opts) if fits_alone(o, cap, host_cap, disk_cap)]
        picks.append(min(fitting or range(len(opts)), key=lambda i: opts[i].total_cost))
    cost = sum(options[t][p].total_cost for t, p in enumerate(picks))
    used = sum(options[t][p].total_memory for t, p in enumerate(picks))

    def best_switch(t: int) -> tuple[float, int, int] | None:
        cur = options[t][picks[t]]
        found: tuple[float, int, int] | None = None
        for i, o in enumerate(options[t]):
            saved = cur.total_memory - o.total_memory
            if saved > 0 and fits_alone(o, cap, host_cap, disk_cap):
                key = (max(o.total_cost - cur.total_cost, 0.0) / saved, t, i)
                found = key if found is None or key < found else found
        return found

    heap = [k for k in (best_switch(t) for t in range(len(picks))) if k is not None]
    heapq.heapify(heap)
    bound = cost
    switches: list[tuple[int, int, int]] = []
    while used > budget and heap:
        ratio, t, i = heapq.heappop(heap)
        cur, new = options[t][picks[t]], options[t][i]
        saved = cur.total_memory - new.total_memory
        if used - saved <= budget:  # LP: only the fraction of this switch that is needed
            bound = cost + ratio * (used - budget)
        cost += max(new.total_cost - cur.total_cost, 0.0)
        used -= saved
        switches.append((t, picks[t], i))
        picks[t] = i
        nxt = best_switch(t)
        if nxt is not None:
            heapq.heappush(heap, nxt)
        if used <= budget:
            break
    else:
        bound = cost
    return picks, bound, switches


def lower_bound(
    options: list[list[Option]],
    world_size: int,
    cap: float,
    host_cap: float,
    budgeted: Budgeted | None = None,
    disk_cap: float = np.inf,
) -> float:
    """No plan beats the larger of: the least total cost that fits the ranks' memory together
    (LP relaxation, see `cheapest_under_budget`; pass its result for a full budget to reuse it)
    spread evenly, and the heaviest unavoidable shard."""
    biggest = 0.0
    for opts in options:
        fitting = [o for o in opts if fits_alone(o, cap, host_cap, disk_cap)] or opts
        biggest = max(biggest, min(o.max_cost for o in fitting))
    _, total, _ = budgeted or cheapest_under_budget(
        options, cap, host_cap, cap * world_size, disk_cap
    )
    return max(total / world_size, biggest)
