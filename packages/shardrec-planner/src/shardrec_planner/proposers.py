"""TorchRec's proposers (`torchrec.distributed.planner.proposers`): static search strategies.

A proposer is loaded with the enumerator's search space (every estimated sharding option of
every table), then asked in turn for a proposal (one option per table) and told how it went
(`feedback(partitionable, plan, perf_rating)`); `propose()` returns None when it has no more.

- `GreedyProposer`: each table's options sorted by score (the slowest shard's perf total, or
  the sum with `use_depth=False`); starts from every table's best option and, after each
  proposal, moves the table whose current option takes the most storage (max then sum of
  HBM, then of DDR) to its next option. With `threshold`, it stops once that many
  consecutive proposals rated worse than the best one.
- `UniformProposer`: one proposal per sharding type that every table offers, each table at its
  best option of that type.
- `GridSearchProposer`: every combination of options (skipped, with a log line, past
  `max_proposals`).
- `DynamicProgrammingProposer`: the least total perf under the ranks' memory (its docstring).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterable, Sequence
from typing import Protocol

from shardrec_planner.planner_types import ShardingOption

logger = logging.getLogger(__name__)

MAX_PROPOSALS: int = 10_000


class Proposer(Protocol):
    """What a planner asks of a proposer (TorchRec's `Proposer`)."""

    def load(self, search_space: list[ShardingOption]) -> None: ...

    def propose(self) -> list[ShardingOption] | None: ...

    def feedback(
        self,
        partitionable: bool,
        plan: list[ShardingOption] | None = None,
        perf_rating: float | None = None,
    ) -> None: ...


def _no_estimate(option: ShardingOption, what: str) -> ValueError:
    return ValueError(
        f"table {option.name!r} ({option.sharding_type}): a shard has no {what} estimate; "
        f"enumerate with a {what} estimator before proposing"
    )


def _sharding_option_score(option: ShardingOption, use_depth: bool = True) -> float:
    """The slowest shard's perf total (`use_depth`), else the sum over shards."""
    totals = []
    for shard in option.shards:
        if shard.perf is None:
            raise _no_estimate(option, "perf")
        totals.append(shard.perf.total)
    return max(totals) if use_depth else sum(totals)


def _by_fqn(search_space: Sequence[ShardingOption]) -> dict[str, list[ShardingOption]]:
    grouped: dict[str, list[ShardingOption]] = {}
    for option in search_space:
        grouped.setdefault(option.fqn, []).append(option)
    return grouped


def _storage_key(option: ShardingOption) -> tuple[float, float, float, float]:
    hbm, ddr = [], []
    for shard in option.shards:
        if shard.storage is None:
            raise _no_estimate(option, "storage")
        hbm.append(shard.storage.hbm)
        ddr.append(shard.storage.ddr)
    return (max(hbm), sum(hbm), max(ddr), sum(ddr))


class GreedyProposer:
    """Greedy walk from every table's best option (module docstring)."""

    def __init__(self, use_depth: bool = True, threshold: int | None = None) -> None:
        self._use_depth = use_depth
        self._threshold = threshold if threshold else None
        self._sharding_options_by_fqn: dict[str, list[ShardingOption]] = {}
        self._current_proposal: dict[str, int] = {}
        self._best_perf_rating = math.inf
        self._num_inferior_perf = 0

    def load(self, search_space: list[ShardingOption]) -> None:
        self._sharding_options_by_fqn = _by_fqn(search_space)
        for options in self._sharding_options_by_fqn.values():
            options.sort(key=lambda o: _sharding_option_score(o, self._use_depth))
        self._current_proposal = dict.fromkeys(self._sharding_options_by_fqn, 0)

    def propose(self) -> list[ShardingOption] | None:
        if not self._current_proposal:
            return None
        return [self._sharding_options_by_fqn[f][i] for f, i in self._current_proposal.items()]

    def feedback(
        self,
        partitionable: bool,
        plan: list[ShardingOption] | None = None,
        perf_rating: float | None = None,
    ) -> None:
        if self._threshold and perf_rating:
            self._num_inferior_perf += 1
            if perf_rating < self._best_perf_rating:
                self._best_perf_rating = perf_rating
                self._num_inferior_perf = 0
            if self._num_inferior_perf > self._threshold:
                self._current_proposal = {}
                return
        largest: str | None = None
        largest_storage: tuple[float, float, float, float] = (0, 0, 0, 0)
        for fqn, options in self._sharding_options_by_fqn.items():
            index = self._current_proposal[fqn]
            if index + 1 < len(options):
                storage = _storage_key(options[index])
                if storage > largest_storage:
                    largest, largest_storage = fqn, storage
        if largest is None:
            self._current_proposal = {}
        else:
            self._current_proposal[largest] += 1


def _pick(indices: Sequence[int], groups: Iterable[list[ShardingOption]]) -> list[ShardingOption]:
    """Option `indices[i]` of each table's group `i`: one proposal."""
    return [options[i] for i, options in zip(indices, groups, strict=True)]


class _ListProposer:
    """What the uniform and grid-search proposers share: `load` makes the whole list of
    proposals; they are handed out in order, one per feedback (the ratings do not steer them)."""

    def __init__(self) -> None:
        self._proposals: list[list[ShardingOption]] = []
        self._proposal_index = 0

    def propose(self) -> list[ShardingOption] | None:
        if self._proposal_index < len(self._proposals):
            return self._proposals[self._proposal_index]
        return None

    def feedback(
        self,
        partitionable: bool,
        plan: list[ShardingOption] | None = None,
        perf_rating: float | None = None,
    ) -> None:
        self._proposal_index += 1


class UniformProposer(_ListProposer):
    """One proposal per sharding type every table offers (module docstring)."""

    def __init__(self, use_depth: bool = True) -> None:
        super().__init__()
        self._use_depth = use_depth

    def load(self, search_space: list[ShardingOption]) -> None:
        self._proposals = []
        self._proposal_index = 0
        all_fqns = {o.fqn for o in search_space}
        by_type: dict[str, dict[str, list[ShardingOption]]] = {}
        for option in search_space:
            by_type.setdefault(option.sharding_type, {}).setdefault(option.fqn, []).append(option)
        for by_fqn in by_type.values():
            if by_fqn.keys() != all_fqns:
                continue
            self._proposals.append(
                [
                    min(options, key=lambda o: _sharding_option_score(o, self._use_depth))
                    for options in by_fqn.values()
                ]
            )


class GridSearchProposer(_ListProposer):
    """Every combination of the tables' options, up to `max_proposals` (module docstring)."""

    def __init__(self, max_proposals: int = MAX_PROPOSALS) -> None:
        if max_proposals < 1:
            raise ValueError(f"max_proposals must be >= 1, got {max_proposals}")
        super().__init__()
        self._max_proposals = max_proposals
        self._sharding_options_by_fqn: dict[str, list[ShardingOption]] = {}

    def load(self, search_space: list[ShardingOption]) -> None:
        self._proposal_index = 0
        self._proposals = []
        self._sharding_options_by_fqn = _by_fqn(search_space)
        groups = list(self._sharding_options_by_fqn.values())
        for options in groups:
            options.sort(key=_sharding_option_score)
        total = math.prod(len(options) for options in groups)
        if total > self._max_proposals:
            logger.info(
                "grid search proposer skipped: %s proposals, at most %s allowed",
                total,
                self._max_proposals,
            )
            return
        combinations = itertools.product(*(range(len(options)) for options in groups))
        self._proposals = [_pick(indices, groups) for indices in combinations]


class DynamicProgrammingProposer:
    """Least total perf under a memory budget, by dynamic programming over memory bins.

    The memory of all ranks (HBM, or DDR when no option uses HBM, as on cpu) is cut into
    `mem_bins_per_device` bins per rank. For tables 0..i and each bin, it keeps the least
    summed `total_perf` of a choice of options whose summed memory falls in that bin. The
    first proposal is every table's smallest option; its feedback must carry the reserved
    topology (`storage_constraint`), from which the budget is read; later proposals are the
    best choice of each bin, from the fullest bin down.
    """

    def __init__(self, mem_bins_per_device: int = 100) -> None:
        self._mem_bins_per_device = max(mem_bins_per_device, 1)
        self._sharding_options_by_fqn: dict[str, list[ShardingOption]] = {}
        self._proposal_list: list[list[int]] = []
        self._current_proposal = -1
        self._inited = False
        self._plan_by_hbm = True

    def _mem(self, option: ShardingOption) -> int:
        storage = option.total_storage
        return storage.hbm if self._plan_by_hbm else storage.ddr

    def load(self, search_space: list[ShardingOption], enumerator: object | None = None) -> None:
        self._proposal_list = []
        self._current_proposal = -1
        self._inited = False
        self._plan_by_hbm = any(o.total_storage.hbm > 0 for o in search_space)
        self._sharding_options_by_fqn = _by_fqn(sorted(search_space, key=self._mem))

    def propose(self) -> list[ShardingOption] | None:
        if not self._inited:
            return [options[0] for options in self._sharding_options_by_fqn.values()]
        if self._current_proposal < 0:
            return None
        indices = self._proposal_list[self._current_proposal]
        return _pick(indices, self._sharding_options_by_fqn.values())

    def feedback(
        self,
        partitionable: bool,
        plan: list[ShardingOption] | None = None,
        perf_rating: float | None = None,
        storage_constraint: object | None = None,
    ) -> None:
        if self._inited:
            self._current_proposal += 1
            if self._current_proposal >= len(self._proposal_list):
                self._current_proposal = -1
            return
        self._inited = True
        devices = getattr(storage_constraint, "devices", None)
        if not devices:
            raise ValueError(
                "DynamicProgrammingProposer.feedback: the first feedback needs "
                "storage_constraint, the reserved topology whose devices give the memory budget"
            )
        budget = sum(d.storage.hbm if self._plan_by_hbm else d.storage.ddr for d in devices)
        bins = self._mem_bins_per_device * len(devices)
        self._proposal_list = self._solve(float(budget) / bins, bins)
        self._current_proposal = 0 if self._proposal_list else -1

    def _solve(self, bin_size: float, bins: int) -> list[list[int]]:
        groups = list(self._sharding_options_by_fqn.values())
        mems = [[self._mem(o) / bin_size for o in options] for options in groups]
        perfs = [[o.total_perf for o in options] for options in groups]
        inf = math.inf
        # best[i][b] = (perf, exact bins used); back[i][b] = (option, previous bin)
        best = [[(inf, inf)] * bins for _ in groups]
        back = [[(-1, -1)] * bins for _ in groups]
        for j, mem in enumerate(mems[0]):
            if mem < bins and best[0][int(mem)][0] > perfs[0][j]:
                best[0][int(mem)] = (perfs[0][j], mem)
                back[0][int(mem)] = (j, -1)
        for i in range(1, len(groups)):
            for j, mem in enumerate(mems[i]):
                for b in range(bins):
                    prev_perf, prev_mem = best[i - 1][b]
                    total = prev_mem + mem
                    if prev_perf == inf or total >= bins:
                        continue
                    if best[i][int(total)][0] > prev_perf + perfs[i][j]:
                        best[i][int(total)] = (prev_perf + perfs[i][j], total)
                        back[i][int(total)] = (j, b)
        proposals = []
        last = len(groups) - 1
        for b in range(bins - 1, -1, -1):
            option, prev = back[last][b]
            if option < 0:
                continue
            indices = [0] * len(groups)
            indices[last] = option
            for i in range(last - 1, -1, -1):
                indices[i], prev = back[i][prev]
            proposals.append(indices)
        return proposals


def proposers_to_proposals_list(
    proposers_list: list[Proposer], search_space: list[ShardingOption]
) -> list[list[ShardingOption]]:
    """Every distinct proposal of static proposers (whose walk ignores the ratings), in order."""
    proposals: list[list[ShardingOption]] = []
    seen: set[tuple[int, ...]] = set()
    for proposer in proposers_list:
        proposer.load(search_space=search_space)
    for proposer in proposers_list:
        proposal = proposer.propose()
        while proposal:
            key = tuple(sorted(hash(option) for option in proposal))
            proposer.feedback(partitionable=True)
            if key not in seen:
                proposals.append(proposal)
                seen.add(key)
            proposal = proposer.propose()
    return proposals


def default_proposers() -> list[Proposer]:
    """TorchRec's default proposers, in TorchRec's order: grid search, greedy by the slowest
    shard, greedy by the shard sum, uniform."""
    return [
        GridSearchProposer(),
        GreedyProposer(),
        GreedyProposer(use_depth=False),
        UniformProposer(),
    ]
