"""The greedy start of the placement search: each table's first option (cheapest that fits,
switched to smaller ones while the model would not fit), then every table placed once,
heaviest first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardrec_planner.search_bound import Budgeted, cheapest_under_budget

if TYPE_CHECKING:
    from shardrec_planner.search import SearchState


def _bytes(n: float) -> str:
    return f"{n / 1024**3:.2f} GiB"


def initial_choices(
    state: SearchState,
    fill: float,
    reasons: list[str],
    budgeted: Budgeted | None = None,
) -> list[int]:
    """Each table's cheapest option that fits an empty rank, switched to smaller options (UVM
    kernels usually) where the model would otherwise need more than `fill` of all ranks' device
    memory together (see `cheapest_under_budget`)."""
    cap = state.cap
    picks, _, switches = budgeted or cheapest_under_budget(
        state.options, cap, state.host_cap, fill * cap * state.world, state.disk_cap
    )
    picks = list(picks)
    for t, opts in enumerate(state.options):
        cheapest = min(range(len(opts)), key=lambda i: opts[i].total_cost)
        o = opts[picks[t]]
        if len(opts) == 1:
            reasons[t] = f"{o.label}: the only choice the sharder and constraints allow"
        elif opts[cheapest].max_memory > cap:
            c = opts[cheapest]
            rows, cols = int(c.shards.rows[0]), int(c.shards.cols[0])
            reasons[t] = (
                f"{o.label}: {rows:,} rows x {cols} as {c.label} need "
                f"{_bytes(c.max_memory)} on one rank, more than its {_bytes(cap)}"
            )
        else:
            reasons[t] = (
                f"{o.label}: lowest total cost ({o.total_cost * 1e3:.4g} ms) of {len(opts)} options"
            )
    for t, old, new in switches:
        reasons[t] = (
            f"{state.options[t][new].label}: the cheaper {state.options[t][old].label} would push "
            f"the model past {fill:.0%} of the ranks' memory; this switch costs the least time "
            "per byte saved"
        )
    return picks


def greedy(
    state: SearchState, lb: float, initial: list[int], by_memory: bool, reasons: list[str]
) -> list[int]:
    """Place every table once, starting from `initial`; returns the tables that found no room.

    Tables are placed heaviest first: by max(cost / lower bound, memory / cap), or by memory
    alone (`by_memory`, first-fit-decreasing). A table that finds no room tries its other
    options, cheapest first.
    """
    cap = state.cap

    def weight(t: int) -> tuple[int, float]:
        o = state.options[t][initial[t]]
        fixed = 0 if o.kind == "fixed" else 1
        mem = o.max_memory / cap
        key = mem if by_memory else max(o.max_cost / max(lb, 1e-30), mem)
        return fixed, -key

    failed: list[int] = []
    for t in sorted(range(len(state.options)), key=weight):
        opts = state.options[t]
        others = sorted(
            (i for i in range(len(opts)) if i != initial[t]), key=lambda i: opts[i].total_cost
        )
        for n, oi in enumerate([initial[t], *others]):
            ranks = state.place(t, oi)
            if ranks is not None:
                state.add(t, oi, ranks)
                if n > 0:
                    first = opts[initial[t]]
                    reasons[t] = (
                        f"{opts[oi].label}: no rank had {_bytes(first.max_memory)} free for "
                        f"{first.label} once larger tables were placed"
                    )
                break
        else:
            failed.append(t)
    return failed
