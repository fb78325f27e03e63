"""TorchRec's `EmbeddingOffloadScaleupProposer`: grow the device caches of offloaded tables.

A table planned with the `fused_uvm_caching` kernel keeps all rows in host memory and a cache of
`cache_params.load_factor` (clf) of them on the device. The proposer starts from one option per
table (the first `fused_uvm_caching` option, else the best-scored one), then spends the device
memory the partitioner reports free on those caches:

- budget search: the extra bytes to spend are searched by Luus-Jaakola random search on
  [0, min(free HBM, what promoting every cache to a full table would need)], rated by the
  planner's performance model; a plan that cannot be placed shrinks the interval;
- storage model: each cache table's device bytes are affine in its clf, `bytes = A * clf + B`,
  fitted from the enumerator's estimates at clf 0.1 and 0.9; `fused` (whole table on the
  device) gives each table's ceiling;
- allocation (`allocate_budget`): the budget is shared in proportion to each table's priority
  (cacheability times expected lookups, from `cache_params.stats`), capped at the full table;
  a table whose cache would cost more than the whole table on the device is promoted to
  `fused` and the difference goes back into the budget; passes repeat until the budget is spent;
- promotion: a table whose clf reaches 1.0, or whose cached form already takes more device
  memory than the plain table (prefetch IO larger than the saved rows), becomes `fused`.

Only tables whose stats give a non-zero cacheability, expected lookups and clf are scaled.
Options are changed on copies; their `cache_params` are replaced, never mutated (a proposal's
cache settings may be shared with the user's constraints).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from shardrec_planner import proposers
from shardrec_planner.cache_params import CacheAlgorithm
from shardrec_planner.enums import EmbeddingComputeKernel
from shardrec_planner.planner_types import ShardingOption
from shardrec_planner.planner_utils import bytes_to_gb
from shardrec_planner.probe_search import LuusJaakolaSearch
from shardrec_planner.topology import Topology


def _logger() -> logging.Logger:
    """The proposers' logger, looked up when logging: TorchRec's users patch
    `torchrec.distributed.planner.proposers.logger`, which the umbrella forwards there."""
    return proposers.logger


_CACHING = EmbeddingComputeKernel.FUSED_UVM_CACHING.value
_FUSED = EmbeddingComputeKernel.FUSED.value
_SEARCH_STEPS = 16


def _score(option: ShardingOption, use_depth: bool) -> float:
    perfs = [s.perf.total if s.perf is not None else 0.0 for s in option.shards]
    return max(perfs) if use_depth else sum(perfs)


def _set_clf(option: ShardingOption, clf: float | None) -> None:
    if option.cache_params is not None:
        option.cache_params = dataclasses.replace(option.cache_params, load_factor=clf)


def _promote(option: ShardingOption) -> None:
    """Make a cached table a plain device table (`fused`, no load factor)."""
    _set_clf(option, None)
    option.compute_kernel = _FUSED


def _stat(option: ShardingOption, name: str) -> float | None:
    stats = None if option.cache_params is None else option.cache_params.stats
    return None if stats is None else float(getattr(stats, name))


def _hbm(options: Sequence[ShardingOption]) -> int:
    return int(sum(o.total_storage.hbm for o in options))


class EmbeddingOffloadScaleupProposer:
    """Proposes plans that scale up offloaded tables' device caches (module docstring)."""

    def __init__(self, use_depth: bool = True) -> None:
        self.use_depth = use_depth
        self.enumerator: Any = None
        self.starting_proposal: list[ShardingOption] = []
        self.proposal: list[ShardingOption] | None = None
        self.search: LuusJaakolaSearch | None = None
        self.best_perf_rating = float("inf")

    def _build_proposal_from_sharding_options(
        self, sharding_options_by_fqn: dict[str, list[ShardingOption]]
    ) -> list[ShardingOption]:
        """One option per table: its first `fused_uvm_caching` option, else its first."""
        proposal = []
        for options in sharding_options_by_fqn.values():
            if len(options) > 1:
                _logger().warning(
                    f"EmbeddingOffloadScaleupProposer - ignored {len(options) - 1} sharding "
                    f"options for table {options[0].name} in proposal"
                )
            chosen = next((o for o in options if o.compute_kernel == _CACHING), options[0])
            proposal.append(chosen)
            algorithm = None if chosen.cache_params is None else chosen.cache_params.algorithm
            if algorithm is not None and algorithm != CacheAlgorithm.LRU:
                # the miss-ratio statistics model an LRU cache
                _logger().error(
                    "EmbeddingOffloadScaleupProposer - proposer only supports LRU cache "
                    f"algorithm, but {algorithm} is used for {chosen}"
                )
        return proposal

    def load(self, search_space: list[ShardingOption], enumerator: Any = None) -> None:
        self.enumerator = enumerator
        by_fqn: dict[str, list[ShardingOption]] = {}
        for option in search_space:
            by_fqn.setdefault(option.fqn, []).append(option)
        for options in by_fqn.values():
            options.sort(key=lambda o: _score(o, self.use_depth))
        self.starting_proposal = copy.deepcopy(self._build_proposal_from_sharding_options(by_fqn))
        self.promote_high_prefetch_overheaad_table_to_hbm(enumerator, self.starting_proposal)
        self.proposal = copy.deepcopy(self.starting_proposal)

    def propose(self) -> list[ShardingOption] | None:
        return self.proposal

    def feedback(
        self,
        partitionable: bool,
        plan: list[ShardingOption] | None = None,
        perf_rating: float | None = None,
        storage_constraint: Topology | None = None,
    ) -> None:
        if self.enumerator is None or plan is None:
            self.proposal = None
            return
        used = _hbm(plan)
        if self.search is None:
            if not partitionable or storage_constraint is None:
                self.proposal = None
                return
            free = self.get_budget(plan, storage_constraint)
            peak = self.get_hbm_ceiling(plan, self.enumerator) - used
            budget = min(free, peak)
            _logger().info(
                f"EmbeddingOffloadScaleupProposer - unscaled plan={bytes_to_gb(used):.2f} GB, "
                f"free={bytes_to_gb(free):.2f} GB, full-table need={bytes_to_gb(peak):.2f} GB"
            )
            self.search = LuusJaakolaSearch(0, budget, _SEARCH_STEPS, left_cost=perf_rating)
        if perf_rating is not None and perf_rating < self.best_perf_rating:
            self.best_perf_rating = perf_rating
        if not partitionable:
            # plans at least this large are assumed not to fit either
            self.search.shrink_right(used - _hbm(self.starting_proposal))
        step = self.search.next(perf_rating if perf_rating is not None else 1e99)
        self.proposal = self.next_plan(
            self.starting_proposal, None if step is None else int(step), self.enumerator
        )

    @staticmethod
    def get_budget(proposal: list[ShardingOption], storage_constraint: Topology) -> int:
        """Device bytes the topology has beyond what `proposal` uses."""
        available = sum(d.storage.hbm for d in storage_constraint.devices)
        return int(available - _hbm(proposal))

    @staticmethod
    def get_hbm_ceiling(starting_proposal: list[ShardingOption], enumerator: Any) -> int:
        """Device bytes of the proposal with every scalable cache promoted to a full table."""
        proposal = copy.deepcopy(starting_proposal)
        scalable = EmbeddingOffloadScaleupProposer.get_scalable_sharding_options(proposal)
        for option in scalable:
            _promote(option)
        enumerator.populate_estimates(scalable)
        return _hbm(proposal)

    @staticmethod
    def get_cacheability(sharding_option: ShardingOption) -> float | None:
        return _stat(sharding_option, "cacheability")

    @staticmethod
    def get_expected_lookups(sharding_option: ShardingOption) -> float | None:
        return _stat(sharding_option, "expected_lookups")

    @staticmethod
    def _priority(option: ShardingOption) -> float:
        cls = EmbeddingOffloadScaleupProposer
        return (cls.get_cacheability(option) or 0.0) * (cls.get_expected_lookups(option) or 0.0)

    @staticmethod
    def get_scalable_sharding_options(proposal: list[ShardingOption]) -> list[ShardingOption]:
        """The cached tables whose caches can grow: stats and a load factor, all non-zero."""
        return [
            o
            for o in proposal
            if o.compute_kernel == _CACHING
            and EmbeddingOffloadScaleupProposer._priority(o) * (o.cache_load_factor or 0.0) > 0
        ]

    @staticmethod
    def promote_high_prefetch_overheaad_table_to_hbm(
        enumerator: Any, proposal: list[ShardingOption]
    ) -> None:
        """Promote (in place) each cached table whose device bytes exceed the plain table's."""
        if not enumerator:
            return
        cached = [o for o in proposal if o.compute_kernel == _CACHING]
        plain = copy.deepcopy(cached)
        for option in plain:
            _promote(option)
        enumerator.populate_estimates(plain)
        saved = 0
        for as_plain, option in zip(plain, cached, strict=True):
            if as_plain.total_storage.hbm < option.total_storage.hbm:
                saved += option.total_storage.hbm - as_plain.total_storage.hbm
                _promote(option)
        if saved:
            _logger().info(
                "EmbeddingOffloadScaleupProposer - promoted tables whose cache IO exceeds the "
                f"table, saving {saved // 1024 // 1024} MiB HBM"
            )
        enumerator.populate_estimates(cached)

    @staticmethod
    def next_plan(
        starting_proposal: list[ShardingOption], budget: int | None, enumerator: Any
    ) -> list[ShardingOption] | None:
        """The starting proposal with `budget` extra device bytes spent on its caches."""
        if budget is None or enumerator is None:
            return None
        proposal = copy.deepcopy(starting_proposal)
        scalable = EmbeddingOffloadScaleupProposer.get_scalable_sharding_options(proposal)
        if not scalable:
            return None
        model, ceiling = EmbeddingOffloadScaleupProposer.build_affine_storage_model(
            scalable, enumerator
        )
        clfs = torch.tensor([o.cache_load_factor for o in scalable])
        priority = torch.tensor([EmbeddingOffloadScaleupProposer._priority(o) for o in scalable])
        new = EmbeddingOffloadScaleupProposer.allocate_budget(
            model, ceiling, clfs, budget, priority
        )
        for option, clf in zip(scalable, new.tolist(), strict=True):
            if clf > 0.9999:  # a full cache is the whole table: keep it on the device
                _promote(option)
            else:
                _set_clf(option, clf)
        enumerator.populate_estimates(scalable)
        return proposal

    @staticmethod
    def build_affine_storage_model(
        uvm_caching_sharding_options: list[ShardingOption], enumerator: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(N x 2 tensor of each table's (A, B) in bytes = A * clf + B, each table's bytes
        as a plain device table), from the enumerator's estimates at clf 0.1, 0.9 and fused."""
        plan = copy.deepcopy(uvm_caching_sharding_options)

        def sizes(change: Callable[[ShardingOption], None]) -> torch.Tensor:
            for option in plan:
                change(option)
            enumerator.populate_estimates(plan)
            return torch.tensor([o.total_storage.hbm for o in plan])

        low, high = 0.1, 0.9
        at_low = sizes(lambda o: _set_clf(o, low))
        at_high = sizes(lambda o: _set_clf(o, high))
        fused = sizes(_promote)
        slope = (at_high - at_low) / (high - low)
        return torch.stack((slope, at_low - slope * low), dim=1), fused

    @staticmethod
    def clf_to_bytes(model: torch.Tensor, clfs: float | torch.Tensor) -> torch.Tensor:
        """Each table's device bytes at load factor `clfs` under the affine `model` (float64)."""
        return (model[:, 0] * clfs + model[:, 1]).to(torch.float64)

    @staticmethod
    def allocate_budget(
        model: torch.Tensor,
        fused_hbm_ceiling: torch.Tensor,
        clfs: torch.Tensor,
        budget: int,
        allocation_priority: torch.Tensor,
    ) -> torch.Tensor:
        """New load factors (>= `clfs`) after sharing `budget` extra bytes by priority."""
        to_bytes = EmbeddingOffloadScaleupProposer.clf_to_bytes
        base = to_bytes(model, 0)
        full = to_bytes(model, 1) - base
        cache = to_bytes(model, clfs) - base
        left = float(budget)
        for _ in range(128):
            if left <= 1:
                break
            growing = base + cache < base + full
            if not bool(growing.any()):
                break
            weight = (growing * allocation_priority).to(torch.float64)
            grown = torch.minimum(cache + left * weight / weight.sum(), full)
            left -= float((grown - cache).sum())
            cache = grown
            # a cache costing more than the plain table is promoted; the excess comes back
            over = growing & (base + cache > fused_hbm_ceiling)
            if bool(over.any()):
                left += float(((base + cache) - fused_hbm_ceiling)[over].sum())
                cache[over] = full[over]
        return (cache / full).to(clfs.dtype)
