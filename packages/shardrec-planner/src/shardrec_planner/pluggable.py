"""TorchRec's planning loop, for planners given TorchRec's parts (a proposer, partitioner, ...).

`EmbeddingShardingPlanner` runs our own search unless the user passes one of TorchRec's
pluggable parts; then `torchrec_search` runs TorchRec's loop with them:

  1. the enumerator lists every table's sharding options (with estimates)
  2. a plan loader's options are taken as the plan when it has some (`extract_plan`)
  3. otherwise each proposer proposes one option per table, the partitioner places the shards
     on the reserved topology, the performance model rates the placed plan, and the proposer
     hears back (`feedback`); the lowest rating wins
  4. the winner (a list of ShardingOption) becomes a ShardingPlan (`sharding_options_to_plan`)

Also here: the conversions between our plan and TorchRec's ShardingOption lists, and
`validate_modules_inclusion_in_sharding_plan`.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import inspect
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from torch import nn

from shardrec_planner.constraints import ParameterConstraints
from shardrec_planner.enums import ShardingType
from shardrec_planner.errors import PlannerError, PlannerErrorType
from shardrec_planner.parameter_sharding import ParameterSharding
from shardrec_planner.planner_types import Shard, ShardingOption, Storage
from shardrec_planner.planner_utils import reset_shard_rank
from shardrec_planner.shard_metadata import EnumerableShardingSpec, ShardMetadata, placement
from shardrec_planner.sharder import PlannerSharder
from shardrec_planner.topology import Topology

logger = logging.getLogger(__name__)


class Partitioner(Protocol):
    """What the loop asks of a partitioner (TorchRec's `Partitioner`)."""

    def partition(
        self, proposal: list[ShardingOption], storage_constraint: Topology
    ) -> list[ShardingOption]: ...


class PerfModel(Protocol):
    """What the loop asks of a performance model (TorchRec's `PerfModel`): lower is better."""

    def rate(self, plan: list[ShardingOption]) -> float: ...


class Enumerator(Protocol):
    """What the loop asks of an enumerator (TorchRec's `Enumerator`)."""

    def enumerate(self, module: nn.Module, sharders: Sequence[Any]) -> list[ShardingOption]: ...


@dataclasses.dataclass
class SearchCounts:
    """What one run of the loop did: TorchRec's `_num_proposals` and `_num_plans`."""

    proposals: int = 0
    plans: int = 0


def _accepts(method: Callable[..., object], name: str) -> bool:
    """Whether `method` takes a keyword argument `name` (or **kwargs)."""
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _proposal_storage(proposal: Sequence[ShardingOption]) -> Storage:
    total = Storage(hbm=0, ddr=0, ssd=0)
    for option in proposal:
        for shard in option.shards:
            if shard.storage is not None:
                total += shard.storage
    return total


def _global_storage(topology: Topology) -> Storage:
    total = Storage(hbm=0, ddr=0, ssd=0)
    for device in topology.devices:
        total += device.storage
    return total


def extract_plan(
    search_space: list[ShardingOption], loaded_sharding_options: Mapping[int, ShardingOption]
) -> list[ShardingOption]:
    """The options of `search_space` a loaded plan names, each with the loaded option's shards.

    Options are matched by `storage_hash()`. Raises PlannerError (PLAN_LOADING_FAILED) when two
    options of the search space share a hash, or when a loaded option matches none of them.
    """
    seen: set[int] = set()
    result: list[ShardingOption] = []
    for option in search_space:
        key = option.storage_hash()
        if key in seen:
            raise PlannerError(
                f"Found a duplicate storage hash {key} in the search space (table "
                f"{option.name!r}, {option.sharding_type}/{option.compute_kernel}); a loaded "
                "plan cannot be matched to it unambiguously",
                error_type=PlannerErrorType.PLAN_LOADING_FAILED,
            )
        seen.add(key)
        loaded = loaded_sharding_options.get(key)
        if loaded is not None:
            chosen = copy.deepcopy(option)
            chosen.shards = loaded.shards
            result.append(chosen)
    if len(result) != len(loaded_sharding_options):
        missing = sorted(set(loaded_sharding_options) - seen)
        raise PlannerError(
            f"loaded plan has {len(loaded_sharding_options)} option(s) but {len(result)} match "
            f"the search space: not all search space is covered (unmatched storage hashes "
            f"{missing[:10]}); plan again, or load a plan made for this model and topology",
            error_type=PlannerErrorType.PLAN_LOADING_FAILED,
        )
    return result


def context_hasher(name: str) -> Callable[..., Any] | None:
    """TorchRec's planner-context hash function `name` where shardrec_planner has it (in
    `planner_types` as TorchRec, or a `hashing` module), else None."""
    import importlib

    for module_name in ("shardrec_planner.planner_types", "shardrec_planner.hashing"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        fn = getattr(module, name, None)
        if callable(fn):
            return fn  # type: ignore[no-any-return]
    return None


def load_plan(
    loader: Any, context_hash: str | None, search_space: list[ShardingOption]
) -> list[ShardingOption] | None:
    """The loader's plan over `search_space` (None when it has none); PlannerError
    (PLANNER_INPUT_CONTEXT_MISMATCH) when the plan was made under another context hash."""
    if context_hash is None:
        raise PlannerError(
            "planner input mismatch cannot be ruled out: plan_loader needs the planner-context "
            "hash (hash_planner_context_inputs_str), which this shardrec_planner lacks; plan "
            "without a loader",
            error_type=PlannerErrorType.PLANNER_INPUT_CONTEXT_MISMATCH,
        )
    theirs = loader.plan_context_hash()
    if theirs != context_hash:
        raise PlannerError(
            f"planner input mismatch: the loaded plan was made for context hash {theirs!r}, "
            f"this planner's is {context_hash!r} (topology, batch size, enumerator, storage "
            "reservation or constraints differ); plan afresh or load a matching plan",
            error_type=PlannerErrorType.PLANNER_INPUT_CONTEXT_MISMATCH,
        )
    loaded = loader.load()
    return extract_plan(search_space, loaded) if loaded else None


_PLAN_CORE = {"sharding_type", "compute_kernel", "ranks", "sharding_spec"}


def _kernel_settings(option: ShardingOption) -> dict[str, Any]:
    """The option's per-table kernel settings (cache_params, enforce_hbm, ...) that a
    ParameterSharding carries: each ParameterSharding field beyond the placement that the
    option also has, when set."""
    names = {f.name for f in dataclasses.fields(ParameterSharding)} - _PLAN_CORE
    return {n: getattr(option, n) for n in names if getattr(option, n, None) is not None}


def sharding_options_to_plan(
    best_plan: Sequence[ShardingOption], topology: Topology
) -> dict[str, dict[str, ParameterSharding]]:
    """module path -> table -> ParameterSharding for placed sharding options."""
    plan: dict[str, dict[str, ParameterSharding]] = {}
    for option in best_plan:
        ranks: list[int] = []
        for shard in option.shards:
            if shard.rank is None:
                raise PlannerError(
                    f"table {option.name!r}: a shard has no rank; the partitioner must place "
                    "every shard",
                    error_type=PlannerErrorType.PARTITION,
                )
            ranks.append(shard.rank)
        spec = None
        if option.sharding_type != ShardingType.DATA_PARALLEL.value:
            spec = EnumerableShardingSpec(
                shards=tuple(
                    ShardMetadata(
                        shard_offsets=tuple(s.offset),
                        shard_sizes=tuple(s.size),
                        placement=placement(topology.compute_device, r, topology.local_size),
                    )
                    for s, r in zip(option.shards, ranks, strict=True)
                )
            )
        plan.setdefault(option.path, {})[option.name] = ParameterSharding(
            sharding_type=ShardingType(option.sharding_type),
            compute_kernel=option.compute_kernel,  # type: ignore[arg-type]
            ranks=ranks,
            sharding_spec=spec,
            **_kernel_settings(option),
        )
    return plan


def plan_to_sharding_options(
    plan: Mapping[str, Mapping[str, ParameterSharding]], search_space: Sequence[ShardingOption]
) -> list[ShardingOption]:
    """The options of `search_space` that `plan` chose, placed on the plan's ranks.

    An option whose shard geometry equals the plan's keeps its estimates; otherwise its shards
    are the plan's (sizes, offsets and ranks, no estimates).
    """
    chosen: list[ShardingOption] = []
    for option in search_space:
        ps = plan.get(option.path, {}).get(option.name)
        if ps is None or (
            ps.sharding_type.value != option.sharding_type
            or ps.compute_kernel.value != option.compute_kernel
        ):
            continue
        if any(c.name == option.name and c.path == option.path for c in chosen):
            continue
        placed = copy.deepcopy(option)
        if ps.sharding_spec is None:
            geometry = [(list(s.size), list(s.offset)) for s in option.shards]
        else:
            geometry = [(list(m.shard_sizes), list(m.shard_offsets)) for m in ps.shards]
        same = len(geometry) == len(option.shards) and all(
            (list(s.size), list(s.offset)) == g
            for s, g in zip(option.shards, geometry, strict=True)
        )
        if same:
            for shard, rank in zip(placed.shards, ps.ranks, strict=True):
                shard.rank = rank
        else:
            placed.shards = [
                Shard(size=size, offset=offset, rank=rank)
                for (size, offset), rank in zip(geometry, ps.ranks, strict=True)
            ]
        chosen.append(placed)
    return chosen


def torchrec_search(
    search_space: list[ShardingOption],
    proposers: Sequence[Any],
    partitioner: Partitioner,
    perf_model: PerfModel,
    storage_constraint: Topology,
    enumerator: object,
    counts: SearchCounts,
    deadline: float | None = None,
) -> list[ShardingOption]:
    """TorchRec's proposal loop: the placed plan with the lowest rating.

    Past `deadline` (a `time.perf_counter()` value) no further proposal is tried (TorchRec's
    `timeout_seconds`): the best so far wins.

    Raises PlannerError when no proposal could be placed, classified as TorchRec does:
    INSUFFICIENT_STORAGE when even the smallest proposal exceeds the cluster, else
    STRICT_CONSTRAINTS.
    """
    for proposer in proposers:
        if _accepts(proposer.load, "enumerator"):
            proposer.load(search_space, enumerator=enumerator)
        else:
            proposer.load(search_space)
    best: list[ShardingOption] | None = None
    best_rating = float("inf")
    lowest: Storage | None = None
    last_error: PlannerError | None = None
    seen: dict[tuple[int, ...], tuple[bool, list[ShardingOption], float | None]] = {}
    for proposer in proposers:
        with_constraint = _accepts(proposer.feedback, "storage_constraint")
        extra = {"storage_constraint": storage_constraint} if with_constraint else {}
        proposal = proposer.propose()
        while proposal:
            if deadline is not None and time.perf_counter() > deadline:
                logger.info("planner time limit reached: the best plan so far is kept")
                break
            key = tuple(sorted(hash(o) for o in proposal))
            if key in seen:
                ok, cached, rating = seen[key]
                proposer.feedback(partitionable=ok, plan=cached, perf_rating=rating, **extra)
                proposal = proposer.propose()
                continue
            counts.proposals += 1
            try:
                placed = partitioner.partition(
                    proposal=proposal, storage_constraint=storage_constraint
                )
            except PlannerError as err:
                last_error = err
                need = _proposal_storage(proposal)
                if lowest is None or need.hbm + need.ddr < lowest.hbm + lowest.ddr:
                    lowest = need
                seen[key] = (False, proposal, None)
                proposer.feedback(partitionable=False, plan=proposal, **extra)
            else:
                counts.plans += 1
                rating = float(perf_model.rate(plan=placed))
                if rating < best_rating:
                    best_rating, best = rating, copy.deepcopy(placed)
                seen[key] = (True, placed, rating)
                proposer.feedback(partitionable=True, plan=placed, perf_rating=rating, **extra)
            reset_shard_rank(proposal)
            proposal = proposer.propose()
    if best is not None:
        return best
    total = _global_storage(storage_constraint)
    exceeds = lowest is not None and (lowest.hbm > total.hbm or lowest.ddr > total.ddr)
    detail = f"; the last partitioner error: {last_error}" if last_error is not None else ""
    raise PlannerError(
        f"no proposal of {len(proposers)} proposer(s) could be placed: {counts.proposals} "
        f"proposal(s) tried, the smallest needs {lowest} against the cluster's {total}{detail}. "
        "Add ranks or memory, reserve less, or allow more sharding types and kernels",
        error_type=PlannerErrorType.INSUFFICIENT_STORAGE
        if exceeds or counts.proposals == 0
        else PlannerErrorType.STRICT_CONSTRAINTS,
    )


def _shardable_modules(
    module: nn.Module, sharders: Sequence[PlannerSharder]
) -> dict[str, list[str]]:
    """path -> table names for each module a sharder claims and finds shardable tables in."""
    by_type = {s.module_type: s for s in sharders}
    found: dict[str, list[str]] = {}

    def visit(path: str, mod: nn.Module) -> None:
        sharder = by_type.get(type(mod))
        if sharder is not None:
            tables = list(sharder.shardable_parameters(mod))
            if tables:
                found[path] = tables
            return
        for name, child in mod.named_children():
            visit(f"{path}.{name}" if path else name, child)

    visit("", module)
    return found


def validate_modules_inclusion_in_sharding_plan(
    sharding_plan: Any,
    module: nn.Module,
    sharders: Sequence[PlannerSharder],
    constraints: Mapping[str, ParameterConstraints] | None = None,
    device_group: str | None = None,
) -> None:
    """Raise PlannerError (MISSING_MODULE_IN_PLAN) if a shardable module is not in the plan.

    A module is shardable when a sharder's `module_type` is its type and the sharder finds
    shardable parameters in it. With `device_group`, only modules whose tables' constraints name
    that device group are checked (so `constraints` is required then).
    """
    if device_group is not None and constraints is None:
        raise ValueError(
            f"device_group is set but constraints is None (device_group={device_group!r}); "
            "pass the constraints that assign tables to device groups"
        )
    expected = _shardable_modules(module, sharders)
    if device_group is not None and constraints is not None:
        expected = {
            path: tables
            for path, tables in expected.items()
            if any(
                getattr(constraints.get(name), "device_group", None) == device_group
                for name in tables
            )
        }
    missing = sorted(set(expected) - set(sharding_plan.plan))
    if missing:
        raise PlannerError(
            f"shardable module(s) {missing} are not present in the sharding plan (it has "
            f"{sorted(sharding_plan.plan)}); plan the whole model with these sharders, or "
            "leave those modules out of the sharders",
            error_type=PlannerErrorType.MISSING_MODULE_IN_PLAN,
        )


class PlanLoader(abc.ABC):
    """Supplies a saved plan (TorchRec's `PlanLoader`): storage hash -> placed ShardingOption.

    `plan_context_hash` is the planner-context hash the plan was made under; a planner given
    this loader refuses it when its own context hash differs.
    """

    @abc.abstractmethod
    def load(self) -> dict[int, ShardingOption] | None:
        """The saved options by `storage_hash()`, or None to plan afresh."""

    @abc.abstractmethod
    def plan_context_hash(self) -> str | None:
        """The planner-context hash the saved plan was made under."""

    def get_plan_id(self) -> str:
        """An identifier of the saved plan, for messages (the class name by default)."""
        return type(self).__name__


@dataclasses.dataclass(frozen=True, kw_only=True)
class TorchRecParts:
    """The TorchRec parts a user gave the planner; None for a part left to the default."""

    enumerator: Any = None
    proposers: tuple[Any, ...] | None = None
    partitioner: Any = None
    performance_model: Any = None
    callbacks: tuple[Callable[[list[ShardingOption]], list[ShardingOption]], ...] = ()
    plan_loader: Any = None

    @staticmethod
    def of(
        *,
        enumerator: Any,
        proposer: Any,
        partitioner: Any,
        performance_model: Any,
        callbacks: Sequence[Callable[[list[ShardingOption]], list[ShardingOption]]] | None,
        plan_loader: Any,
    ) -> TorchRecParts | None:
        """The parts, checked, or None when none is given (the planner runs its own search)."""
        checks = (
            ("enumerator", enumerator, "enumerate"),
            ("partitioner", partitioner, "partition"),
            ("performance_model", performance_model, "rate"),
            ("plan_loader", plan_loader, "load"),
        )
        for name, part, method in checks:
            if part is not None and not callable(getattr(part, method, None)):
                raise TypeError(
                    f"{name} must have a {method}(...) method, got {type(part).__name__}"
                )
        proposers = None
        if proposer is not None:
            proposers = tuple(proposer) if isinstance(proposer, (list, tuple)) else (proposer,)
            for p in proposers:
                if not all(callable(getattr(p, m, None)) for m in ("load", "propose", "feedback")):
                    raise TypeError(
                        "proposer must have load, propose and feedback methods (TorchRec's "
                        f"Proposer), got {type(p).__name__}"
                    )
        for cb in callbacks or ():
            if not callable(cb):
                raise TypeError(f"callbacks must be callables, got {type(cb).__name__}")
        given = (enumerator, proposers, partitioner, performance_model, plan_loader)
        if all(p is None for p in given) and not callbacks:
            return None
        return TorchRecParts(
            enumerator=enumerator,
            proposers=proposers,
            partitioner=partitioner,
            performance_model=performance_model,
            callbacks=tuple(callbacks or ()),
            plan_loader=plan_loader,
        )


class LazyPlan(Sequence[ShardingOption]):
    """A list of ShardingOption computed on first use (our search's plan in TorchRec's form)."""

    def __init__(self, make: Callable[[], list[ShardingOption] | None]) -> None:
        self._make = make

    def _items(self) -> list[ShardingOption]:
        return self._make() or []

    def __len__(self) -> int:
        return len(self._items())

    def __getitem__(self, index: Any) -> Any:
        return self._items()[index]
