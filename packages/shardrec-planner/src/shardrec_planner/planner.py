"""EmbeddingShardingPlanner: from a model, a topology and constraints to a ShardingPlan.

plan(module, sharders)
  1. find the sharded modules and their tables     (sharder.shardable_parameters)
  2. list each table's options with estimates      (options.table_options, estimator)
  3. choose option and ranks for every table       (search.search)
  4. build the ShardingPlan and its stats          (ParameterSharding per table, PlanStats)
  5. call each `stats=` object with the plan        (EmbeddingStats prints the summary table)

Given one of TorchRec's pluggable parts (enumerator, proposer, partitioner, performance_model,
plan_loader, callbacks), steps 2-3 are TorchRec's loop with those parts instead (pluggable.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch.distributed as dist
from torch import nn

from shardrec_planner.constraints import ParameterConstraints
from shardrec_planner.default_sharders import default_sharders
from shardrec_planner.distributed import broadcast_plan_text
from shardrec_planner.enumerators import EmbeddingEnumerator
from shardrec_planner.environment_topology import topology_from_environment
from shardrec_planner.errors import PlannerError
from shardrec_planner.estimator import optimizer_state
from shardrec_planner.given_plan import given_result
from shardrec_planner.options import Option, table_options
from shardrec_planner.partitioners import GreedyPerfPartitioner
from shardrec_planner.perf_models import NoopPerfModel
from shardrec_planner.plan_build import build_plan
from shardrec_planner.planner_args import planner_args
from shardrec_planner.planner_types import ShardingOption
from shardrec_planner.pluggable import (
    LazyPlan,
    SearchCounts,
    TorchRecParts,
    context_hasher,
    load_plan,
    plan_to_sharding_options,
    sharding_options_to_plan,
    torchrec_search,
)
from shardrec_planner.proposers import default_proposers
from shardrec_planner.search import SearchResult, lower_bound, search
from shardrec_planner.sharder import PlannerSharder, TableInfo, table_infos
from shardrec_planner.sharding_plan import ShardingPlan
from shardrec_planner.storage_reservations import (
    HeuristicalStorageReservation,
    StorageReservation,
    describe_reservation,
    reserved_caps,
)
from shardrec_planner.topology import Topology
from shardrec_planner.unplaceable import unplaceable_error

_ERROR_PREFIX = "PlannerError:"


def _sharded_modules(
    module: nn.Module, sharders: Sequence[PlannerSharder]
) -> list[tuple[str, nn.Module, PlannerSharder]]:
    """(path, module, sharder) for each module some sharder handles; their children are skipped."""
    found: list[tuple[str, nn.Module, PlannerSharder]] = []

    def visit(path: str, mod: nn.Module) -> None:
        exact = [s for s in sharders if type(mod) is s.module_type]
        sub = [s for s in sharders if isinstance(mod, s.module_type)]
        if exact or sub:
            found.append((path, mod, (exact or sub)[0]))
            return
        for name, child in mod.named_children():
            visit(f"{path}.{name}" if path else name, child)

    visit("", module)
    return found


class EmbeddingShardingPlanner:
    """Plans how every table of a model is sharded (TorchRec's name and call signature).

    - `topology`: the cluster (default, as TorchRec: built from the environment, see
      `environment_topology`); `batch_size`: per-rank batch size the costs are estimated for
      (default 512).
    - `constraints`: table name -> ParameterConstraints (every name must be a table of the model).
    - `memory_reserve_fraction`: share of each rank's memory kept free for the dense model,
      activations and allocator slack (TorchRec reserves 15% too).
    - `auto_tier`: tables whose constraints leave the kernel open may also be placed tiered
      (`key_value`: rows and optimizer state on the rank's disk, `Topology.ssd_cap`, behind a
      cache in memory; disk_tier.py) where that runs tiered (table_wise, cpu). The search
      keeps a table in memory while the model fits and tiers the tables that cost the least
      time per byte saved when it does not, choosing each cache's size. Off by default: a
      model that does not fit raises PlannerError, naming this switch. A table may also opt in
      alone with `ParameterConstraints(compute_kernels=["fused", "key_value"])`.
      `tier_store_dir`: the store directory of tiered tables whose constraints set no
      `KeyValueParams` (written into their plan as `ssd_storage_directory`; None: the
      lookup's default, `./tier-store`); each rank adds `/rank-<r>`.
    - `time_budget_s`: the local search stops after this long (it usually converges sooner);
      `timeout_seconds` is TorchRec's name for it, and also bounds TorchRec's loop (below):
      no proposal is tried past it, the best so far wins.
    - `storage_reservation`: a TorchRec storage reservation (`HeuristicalStorageReservation`,
      `FixedPercentageStorageReservation`, ... or the user's own). When given, it replaces
      `memory_reserve_fraction`: each `plan` asks it to reserve, and the tables may use what
      the reserved topology's ranks have left (the smallest rank's HBM on accelerators, DDR on
      cpu).
    - TorchRec's parts, keyword arguments: `enumerator`, `proposer` (one or a list),
      `partitioner`, `performance_model`, `callbacks` (each maps the best list of
      ShardingOption to a new one) and `plan_loader`: given any of them, `plan` runs TorchRec's
      proposal loop with them (the missing parts are TorchRec's defaults: EmbeddingEnumerator,
      GridSearch + Greedy + Uniform proposers, GreedyPerfPartitioner, NoopPerfModel,
      HeuristicalStorageReservation(`heuristical_storage_reservation_percentage`)).
      `stats` (one or a list; default `[EmbeddingStats()]`, `[]` for none) are called with
      every plan; `debug` is passed on to them.
    - After `plan`: `_num_proposals`, `_num_plans` (our search counts as one proposal, placed
      or not; 0 when a table cannot fit anywhere), `_best_plan` (the plan as TorchRec's list of
      placed ShardingOption), `_enumerator` (its `last_stored_search_space`), `_stats`.
    """

    def __init__(
        self,
        topology: Topology | None = None,
        batch_size: int | None = None,
        constraints: Mapping[str, ParameterConstraints] | None = None,
        *,
        memory_reserve_fraction: float = 0.15,
        time_budget_s: float = 30.0,
        auto_tier: bool = False,
        tier_store_dir: str | None = None,
        storage_reservation: StorageReservation | None = None,
        timeout_seconds: float | None = None,
        enumerator: Any = None,
        proposer: Any = None,
        partitioner: Any = None,
        performance_model: Any = None,
        stats: Any = None,
        debug: bool = True,
        callbacks: Sequence[Callable[[list[ShardingOption]], list[ShardingOption]]] | None = None,
        heuristical_storage_reservation_percentage: float | None = None,
        plan_loader: Any = None,
    ) -> None:
        if topology is None:
            topology = topology_from_environment()
        args = planner_args(
            batch_size=batch_size,
            constraints=constraints,
            memory_reserve_fraction=memory_reserve_fraction,
            time_budget_s=time_budget_s,
            timeout_seconds=timeout_seconds,
            storage_reservation=storage_reservation,
            heuristical_storage_reservation_percentage=heuristical_storage_reservation_percentage,
            tier_store_dir=tier_store_dir,
            stats=stats,
        )
        self._timeout_seconds = timeout_seconds
        self.topology = topology
        self.batch_size = args.batch_size
        self.constraints = args.constraints
        self.memory_reserve_fraction = memory_reserve_fraction
        self.time_budget_s = args.time_budget_s
        self.auto_tier = bool(auto_tier)
        self.tier_store_dir = args.tier_store_dir
        self.storage_reservation = args.storage_reservation
        self._reserved_caps: tuple[float, float] | None = None
        self._optimizers: dict[str, tuple[float, float]] = {}
        self._parts = TorchRecParts.of(
            enumerator=enumerator,
            proposer=proposer,
            partitioner=partitioner,
            performance_model=performance_model,
            callbacks=callbacks,
            plan_loader=plan_loader,
        )
        self._stats: list[Any] = args.stats
        self._debug = debug
        self._num_proposals = 0
        self._num_plans = 0
        self._last: tuple[nn.Module, list[PlannerSharder], ShardingPlan] | None = None
        self._enumerated: Any = enumerator
        self._best: list[ShardingOption] | None = None
        self._default_reservation = HeuristicalStorageReservation(percentage=0.15)

    @property
    def memory_cap(self) -> float:
        """Bytes of device memory per rank the tables may use."""
        if self._reserved_caps is not None:
            return self._reserved_caps[0]
        return self.topology.device_memory * (1.0 - self.memory_reserve_fraction)

    @property
    def host_memory_cap(self) -> float:
        """Bytes of host memory per rank UVM kernels may use (0 on cpu)."""
        if self._reserved_caps is not None:
            return self._reserved_caps[1]
        return self.topology.host_memory * (1.0 - self.memory_reserve_fraction)

    def _reserve(self, module: nn.Module, sharders: Sequence[PlannerSharder]) -> None:
        """Ask the user's storage reservation what the ranks have left for tables."""
        if self.storage_reservation is None:
            return
        reserved = self.storage_reservation.reserve(
            self.topology, self.batch_size, module, list(sharders), self.constraints
        )
        self._reserved_caps = reserved_caps(reserved, self.storage_reservation)

    def plan(self, module: nn.Module, sharders: Sequence[PlannerSharder]) -> ShardingPlan:
        """The best plan found for `module`; raises PlannerError when none fits."""
        start = time.perf_counter()
        self._num_proposals = self._num_plans = 0
        self._last, self._best = None, None
        sharders = list(sharders)
        if self._parts is None:
            plan = self._plan_own(module, sharders, start)
        else:
            self._best, plan = self._plan_with_parts(self._parts, module, sharders, start)
        self._last = (module, sharders, plan)
        best = LazyPlan(lambda: self._best_plan)
        for stats in self._stats:
            # TorchRec's Stats.log arguments, in its order.
            stats.log(
                plan, self.topology, self.batch_size, self.storage_reservation,
                self._num_proposals, self._num_plans, time.perf_counter() - start, best,
                self.constraints, sharders, self._debug, self._enumerated,
            )  # fmt: skip
        return plan

    def _plan_own(
        self, module: nn.Module, sharders: Sequence[PlannerSharder], start: float
    ) -> ShardingPlan:
        self._reserve(module, sharders)
        tables, options = self._options(module, sharders)
        cap = self.memory_cap
        self._check_each_fits(tables, options)
        self._num_proposals = 1
        result = search(
            options,
            world_size=self.topology.world_size,
            local_world_size=self.topology.local_size,
            memory_cap=cap,
            host_memory_cap=self.host_memory_cap,
            time_budget_s=self.time_budget_s,
            disk_cap=self.topology.disk_cap,
        )
        if result.failed:
            self._raise_unplaceable(tables, options, [tables[t] for t in result.failed])
        self._num_plans = 1
        return self._build(tables, options, result, time.perf_counter() - start)

    def _plan_with_parts(
        self,
        parts: TorchRecParts,
        module: nn.Module,
        sharders: list[PlannerSharder],
        start: float,
    ) -> tuple[list[ShardingOption], ShardingPlan]:
        reservation = self.storage_reservation or self._default_reservation
        storage_constraint = reservation.reserve(
            self.topology, self.batch_size, module, sharders, self.constraints
        )
        enumerator = self._make_enumerator()
        search_space = enumerator.enumerate(module, sharders)
        if not search_space:
            return [], ShardingPlan({})
        best: list[ShardingOption] | None = None
        if parts.plan_loader is not None:
            has_hash = context_hasher("hash_planner_context_inputs_str") is not None
            ours = self._context_hash_str() if has_hash else None
            best = load_plan(parts.plan_loader, ours, search_space)
        if best is None:
            counts = SearchCounts()
            try:
                best = torchrec_search(
                    search_space,
                    parts.proposers or default_proposers(),
                    parts.partitioner or GreedyPerfPartitioner(),
                    parts.performance_model or NoopPerfModel(topology=self.topology),
                    storage_constraint,
                    enumerator,
                    counts,
                    None if self._timeout_seconds is None else start + self._timeout_seconds,
                )
            finally:
                self._num_proposals, self._num_plans = counts.proposals, counts.plans
        for callback in parts.callbacks:
            best = callback(best)
        return best, ShardingPlan(plan=sharding_options_to_plan(best, self.topology))

    def _context_hash_str(self) -> str:
        """TorchRec's planner-context hash (topology, batch size, enumerator, storage
        reservation, constraints), as text; present when shardrec_planner has the hashing."""
        hasher = context_hasher("hash_planner_context_inputs_str")
        assert hasher is not None  # the method is attached only when it is present
        return str(hasher(**self._context_inputs()))

    def _context_hash(self) -> int:
        hasher = context_hasher("hash_planner_context_inputs")
        assert hasher is not None  # the method is attached only when it is present
        return int(hasher(**self._context_inputs()))

    def _context_inputs(self) -> dict[str, Any]:
        # After a plan, the hash covers that model's search space and reserved topology, as
        # TorchRec's (whose plan always enumerates and reserves); mid-plan both are done.
        reservation = self.storage_reservation or self._default_reservation
        if self._last is not None:
            module, sharders, _ = self._last
            self._make_enumerator().enumerate(module, sharders)
            if reservation is self._default_reservation:
                reservation.reserve(
                    self.topology, self.batch_size, module, sharders, self.constraints
                )
        return {
            "topology": self.topology,
            "batch_size": self.batch_size,
            "enumerator": self._make_enumerator(),
            "storage_reservation": reservation,
            "constraints": self.constraints,
        }

    def _make_enumerator(self) -> Any:
        if self._enumerated is None:
            self._enumerated = EmbeddingEnumerator(
                topology=self.topology, batch_size=self.batch_size, constraints=self.constraints
            )
        return self._enumerated

    @property
    def _best_plan(self) -> list[ShardingOption] | None:
        """The last plan as TorchRec's placed ShardingOption list (None before a plan)."""
        if self._best is None and self._last is not None:
            module, sharders, plan = self._last
            space = self._make_enumerator().enumerate(module, sharders)
            self._best = plan_to_sharding_options(plan.plan, space)
        return self._best

    @property
    def _enumerator(self) -> Any:
        """TorchRec's enumerator; after a plan its `last_stored_search_space` is that model's."""
        if self._last is not None:
            self._best_plan  # noqa: B018 (enumerates the last model's search space)
        return self._make_enumerator()

    def collective_plan(
        self,
        module: nn.Module,
        sharders: Sequence[PlannerSharder] | None = None,
        pg: dist.ProcessGroup | None = None,
    ) -> ShardingPlan:
        """Rank 0 of `pg` plans and broadcasts the plan's JSON; every rank returns the same plan.

        As TorchRec: `sharders` default to the default sharders (EmbeddingBagCollection,
        EmbeddingCollection and their quantized forms), `pg` to the default process group.
        A PlannerError on rank 0 is raised on every rank (with rank 0's message).
        """
        if sharders is None:
            sharders = default_sharders()
        if pg is None and not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "collective_plan needs the default process group: call "
                "torch.distributed.init_process_group(...) first, pass pg=..., or call "
                "plan(module, sharders) for a single process"
            )
        text: str | None = None
        if dist.get_rank(pg) == 0:
            try:
                text = self.plan(module, sharders).to_json(indent=None)
            except PlannerError as err:
                text = _ERROR_PREFIX + str(err)
        received = broadcast_plan_text(text, pg)
        if received.startswith(_ERROR_PREFIX):
            raise PlannerError(received.removeprefix(_ERROR_PREFIX))
        return ShardingPlan.from_json(received)

    def estimate(
        self, module: nn.Module, sharders: Sequence[PlannerSharder], plan: ShardingPlan
    ) -> ShardingPlan:
        """`plan` (e.g. hand-written, or from another planner) with this cost model's stats.

        Each table's shards are costed as in planning; reasons read "given plan".
        """
        start = time.perf_counter()
        tables, options = self._options(module, sharders)
        given, result = given_result(
            tables,
            plan,
            topology=self.topology,
            constraints=self.constraints,
            batch_size=self.batch_size,
            optimizers=self._optimizers,
            lower_bound_s=lower_bound(
                options,
                self.topology.world_size,
                self.memory_cap,
                self.host_memory_cap,
                None,
                self.topology.disk_cap,
            ),
        )
        built = self._build(tables, given, result, time.perf_counter() - start)
        return ShardingPlan(plan=plan.plan, stats=built.stats)

    # -- steps ---------------------------------------------------------------------------------
    def _options(
        self, module: nn.Module, sharders: Sequence[PlannerSharder]
    ) -> tuple[list[TableInfo], list[list[Option]]]:
        device = self.topology.compute_device
        tables: list[TableInfo] = []
        options: list[list[Option]] = []
        for path, mod, sharder in _sharded_modules(module, sharders):
            types = sharder.sharding_types(device)
            kernels = {t: sharder.compute_kernels(t, device) for t in types}
            optimizer = optimizer_state(sharder.fused_params)
            self._optimizers[path] = optimizer
            for table in table_infos(path, mod, sharder):
                tables.append(table)
                options.append(
                    table_options(
                        table,
                        types,
                        kernels,
                        self.constraints.get(table.name),
                        self.topology,
                        self.batch_size,
                        optimizer,
                        auto_tier=self.auto_tier,
                    )
                )
        unknown = sorted(set(self.constraints) - {t.name for t in tables})
        if unknown:
            raise PlannerError(
                f"constraints name tables that are not in the model: {unknown}; "
                f"the model's tables are {sorted({t.name for t in tables})}"
            )
        return tables, options

    def _check_each_fits(self, tables: list[TableInfo], options: list[list[Option]]) -> None:
        cap, host_cap, disk_cap = self.memory_cap, self.host_memory_cap, self.topology.disk_cap
        too_big = [
            t
            for t, opts in zip(tables, options, strict=True)
            if not any(
                o.max_memory <= cap and o.max_host_memory <= host_cap and o.max_disk <= disk_cap
                for o in opts
            )
        ]
        if too_big:
            self._raise_unplaceable(tables, options, too_big)

    def _raise_unplaceable(
        self, tables: list[TableInfo], options: list[list[Option]], bad: list[TableInfo]
    ) -> None:
        if self.storage_reservation is None:
            reserve = f"{self.memory_reserve_fraction:.0%} reserved"
            knob = "memory_reserve_fraction"
        else:
            reserve = f"less {describe_reservation(self.storage_reservation)}"
            knob = "what the storage reservation reserves"
        raise unplaceable_error(tables, options, bad, self.memory_cap, self.topology, reserve, knob)

    def _build(
        self,
        tables: list[TableInfo],
        options: list[list[Option]],
        result: SearchResult,
        seconds: float,
    ) -> ShardingPlan:
        return build_plan(
            tables,
            options,
            result,
            seconds,
            topology=self.topology,
            constraints=self.constraints,
            tier_store_dir=self.tier_store_dir,
            memory_cap=self.memory_cap,
            batch_size=self.batch_size,
        )


# TorchRec's public names for the context hash, where shardrec_planner has the hashing.
if context_hasher("hash_planner_context_inputs_str") is not None:
    EmbeddingShardingPlanner.hash_planner_context_inputs_str = (  # type: ignore[attr-defined]
        EmbeddingShardingPlanner._context_hash_str
    )
if context_hasher("hash_planner_context_inputs") is not None:
    EmbeddingShardingPlanner.hash_planner_context_inputs = (  # type: ignore[attr-defined]
        EmbeddingShardingPlanner._context_hash
    )
