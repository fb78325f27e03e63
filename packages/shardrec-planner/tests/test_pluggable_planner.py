"""EmbeddingShardingPlanner with TorchRec's parts plugged in, its stats, and the plan helpers.

References: a brute-force walk over every grid-search proposal (partitioned and rated by the
same parts), the plan's own per-rank estimates, and hand-built sharding options.
"""

from __future__ import annotations

import copy
import logging

import pytest
from _planner_models import make_ebc, sharder

from shardrec_planner import (
    EmbeddingShardingPlanner,
    NoopPerfModel,
    ParameterConstraints,
    ParameterSharding,
    PlannerError,
    PlannerErrorType,
    ShardingPlan,
    Topology,
)
from shardrec_planner.embedding_stats import EmbeddingStats, NoopEmbeddingStats
from shardrec_planner.enumerators import EmbeddingEnumerator
from shardrec_planner.partitioners import GreedyPerfPartitioner
from shardrec_planner.pluggable import extract_plan, validate_modules_inclusion_in_sharding_plan
from shardrec_planner.proposers import GridSearchProposer, proposers_to_proposals_list

SPEC = [("a", 1000, 16), ("b", 500, 8), ("c", 200, 32)]


def _topology() -> Topology:
    return Topology(world_size=2, compute_device="cuda", hbm_cap=1024**3)


def _tw_rw() -> object:
    return sharder(sharding_types=["table_wise", "row_wise"], compute_kernels=["fused"])


def test_grid_search_plan_is_the_best_rated_proposal() -> None:
    topo, module = _topology(), make_ebc(SPEC)
    planner = EmbeddingShardingPlanner(
        topo, 64, proposer=GridSearchProposer(), stats=NoopEmbeddingStats()
    )
    plan = planner.plan(module, [_tw_rw()])
    # reference: every distinct proposal, placed by the same partitioner and rated alike
    space = EmbeddingEnumerator(topology=topo, batch_size=64).enumerate(module, [_tw_rw()])
    proposals = proposers_to_proposals_list([GridSearchProposer()], space)
    model, ratings = NoopPerfModel(topology=topo), []
    for proposal in proposals:
        placed = GreedyPerfPartitioner().partition(copy.deepcopy(proposal), topo)
        ratings.append(model.rate(placed))
    best = planner._best_plan
    assert best is not None and planner._num_proposals == len(proposals) > 1
    assert planner._num_plans == len(proposals)
    assert model.rate(best) == pytest.approx(min(ratings))
    for option in best:
        ps = plan.plan[option.path][option.name]
        assert ps.ranks == [s.rank for s in option.shards]
        assert ps.sharding_type.value == option.sharding_type


class _OneProposal:
    """A user's proposer: one proposal, each table's first option; records the feedback."""

    def __init__(self) -> None:
        self.proposal: list[object] | None = None
        self.heard: list[tuple[bool, float | None]] = []

    def load(self, search_space: list[object]) -> None:
        first: dict[str, object] = {}
        for option in search_space:
            first.setdefault(option.fqn, option)  # type: ignore[attr-defined]
        self.proposal = list(first.values())

    def propose(self) -> list[object] | None:
        out, self.proposal = self.proposal, None
        return out

    def feedback(
        self, partitionable: bool, plan: object = None, perf_rating: object = None
    ) -> None:
        self.heard.append((partitionable, perf_rating))  # type: ignore[arg-type]


def test_user_proposer_is_asked_and_hears_back() -> None:
    proposer = _OneProposal()
    planner = EmbeddingShardingPlanner(_topology(), 64, proposer=proposer, stats=[])
    plan = planner.plan(make_ebc(SPEC), [_tw_rw()])
    assert planner._num_proposals == 1 and len(proposer.heard) == 1
    ok, rating = proposer.heard[0]
    assert ok and rating == pytest.approx(NoopPerfModel(_topology()).rate(planner._best_plan))
    assert sorted(plan.plan[""]) == ["a", "b", "c"]


def test_own_search_counts_and_best_plan_match_the_plan() -> None:
    planner = EmbeddingShardingPlanner(_topology(), 64)
    plan = planner.plan(make_ebc(SPEC), [_tw_rw()])
    assert (planner._num_proposals, planner._num_plans) == (1, 1)
    best = planner._best_plan
    assert best is not None and len(best) == 3
    for option in best:
        assert plan.plan[option.path][option.name].ranks == [s.rank for s in option.shards]
    assert planner._enumerator.last_stored_search_space
    never = EmbeddingShardingPlanner(Topology(world_size=2, hbm_cap=1000, compute_device="cuda"))
    with pytest.raises(PlannerError):
        never.plan(make_ebc(SPEC), [_tw_rw()])
    assert never._num_proposals == 0 and never._best_plan is None


def test_embedding_stats_table_reports_the_plans_estimates(
    caplog: pytest.LogCaptureFixture,
) -> None:
    constraints = {"a": ParameterConstraints(compute_kernels=["fused"])}
    planner = EmbeddingShardingPlanner(_topology(), 64, constraints)
    with caplog.at_level(logging.INFO, logger="shardrec_planner.embedding_stats"):
        plan = planner.plan(make_ebc(SPEC), [_tw_rw()])
    stats = planner._stats[0]
    assert isinstance(stats, EmbeddingStats) and stats._stats_table[0].startswith("####")
    assert plan.stats is not None
    top = max(r.memory_bytes for r in plan.stats.ranks) / 1024**3
    row = next(r for r in stats._stats_table if "Top HBM Memory Usage Estimation:" in r)
    assert float(row.split(" ")[6]) == pytest.approx(top, abs=5e-4)
    assert any("Hardcoded: 1, Auto-selected: 2" in r for r in stats._stats_table)
    assert len(caplog.records) == len(stats._stats_table)


def test_extract_plan_matches_by_storage_hash_and_refuses_bad_loads() -> None:
    planner = EmbeddingShardingPlanner(_topology(), 64, stats=[])
    planner.plan(make_ebc(SPEC), [_tw_rw()])
    space = planner._enumerator.last_stored_search_space
    best = planner._best_plan
    loaded = {so.storage_hash(): copy.deepcopy(so) for so in best}
    for so in loaded.values():
        for shard in so.shards:
            shard.rank = 1 - shard.rank
    got = extract_plan(space, loaded)
    assert [so.name for so in got] == [so.name for so in best]
    assert [[s.rank for s in so.shards] for so in got] == [
        [1 - s.rank for s in so.shards] for so in best
    ]
    assert extract_plan(space, {}) == []
    with pytest.raises(PlannerError, match="duplicate storage hash") as dup:
        extract_plan([space[0], space[0]], loaded)
    assert dup.value.error_type is PlannerErrorType.PLAN_LOADING_FAILED
    with pytest.raises(PlannerError, match="not all search space is covered"):
        extract_plan(space, {**loaded, 12345: best[0]})


def test_validate_modules_inclusion() -> None:
    module = make_ebc(SPEC)
    plan = EmbeddingShardingPlanner(_topology(), 64, stats=[]).plan(module, [_tw_rw()])
    validate_modules_inclusion_in_sharding_plan(plan, module, [_tw_rw()])
    validate_modules_inclusion_in_sharding_plan(ShardingPlan({}), module, [])
    with pytest.raises(PlannerError, match="not present in the sharding plan") as err:
        validate_modules_inclusion_in_sharding_plan(ShardingPlan({}), module, [_tw_rw()])
    assert err.value.error_type is PlannerErrorType.MISSING_MODULE_IN_PLAN
    with pytest.raises(ValueError, match="device_group is set but constraints is None"):
        validate_modules_inclusion_in_sharding_plan(plan, module, [_tw_rw()], device_group="g")


def test_parts_and_stats_are_checked() -> None:
    with pytest.raises(TypeError, match="proposer must have load, propose and feedback"):
        EmbeddingShardingPlanner(_topology(), proposer=object())
    with pytest.raises(TypeError, match="partitioner must have a partition"):
        EmbeddingShardingPlanner(_topology(), partitioner=object())
    with pytest.raises(TypeError, match="stats must have a log"):
        EmbeddingShardingPlanner(_topology(), stats=[object()])


def test_parameter_sharding_ranks_are_a_copied_list() -> None:
    given = [0]
    ps = ParameterSharding(sharding_type="data_parallel", compute_kernel="dense", ranks=given)
    given.append(1)
    assert ps.ranks == [0] and isinstance(ps.ranks, list)
    two = ParameterSharding(sharding_type="data_parallel", compute_kernel="dense", ranks=(0, 1))
    assert two.ranks == [0, 1]
    with pytest.raises(TypeError, match="ranks must be a list of ints"):
        ParameterSharding(sharding_type="data_parallel", compute_kernel="dense", ranks="01")  # type: ignore[arg-type]
    back = ShardingPlan.from_json(ShardingPlan({"m": {"t": two}}).to_json()).plan["m"]["t"]
    assert back == two and back.ranks == [0, 1]


class _Endless(_OneProposal):
    """Proposes the same proposal forever."""

    def propose(self) -> list[object] | None:
        if self.proposal is not None:
            self.kept = self.proposal
        return self.kept

    def load(self, search_space: list[object]) -> None:
        super().load(search_space)
        self.kept = self.proposal


def test_timeout_bounds_the_proposal_loop() -> None:
    import time

    proposer = _Endless()
    planner = EmbeddingShardingPlanner(
        _topology(), 64, proposer=proposer, stats=[], timeout_seconds=0.3
    )
    start = time.perf_counter()
    plan = planner.plan(make_ebc(SPEC), [_tw_rw()])
    assert time.perf_counter() - start < 10
    assert sorted(plan.plan[""]) == ["a", "b", "c"]
    assert planner._num_proposals == 1 and len(proposer.heard) > 1  # repeats answered from cache


class _Loader:
    """A plan loader holding a context hash and (optionally) a plan to load."""

    def __init__(self, context_hash: str, loaded: object = None) -> None:
        self._hash, self._loaded = context_hash, loaded

    def load(self) -> object:
        return self._loaded

    def plan_context_hash(self) -> str:
        return self._hash

    def get_plan_id(self) -> str:
        return "p"


@pytest.mark.parametrize("with_reservation", [False, True])
def test_context_hash_after_a_plan_matches_the_one_a_loader_sees(with_reservation: bool) -> None:
    """A planner's hash taken after its plan (own search, no parts) equals the hash a second
    planner with the same inputs computes mid-plan when a loader asks for it."""
    from shardrec_planner.storage_reservations import HeuristicalStorageReservation

    def make(loader: object = None) -> EmbeddingShardingPlanner:
        reservation = HeuristicalStorageReservation(percentage=0.2) if with_reservation else None
        return EmbeddingShardingPlanner(
            _topology(), 64, storage_reservation=reservation, plan_loader=loader
        )

    module = make_ebc(SPEC)
    first = make()
    plan = first.plan(module, [_tw_rw()])
    context = first.hash_planner_context_inputs_str()
    assert context == first.hash_planner_context_inputs_str()  # hashing changes nothing
    assert make(_Loader(context)).plan(module, [_tw_rw()]).plan.keys() == plan.plan.keys()
    other = EmbeddingShardingPlanner(_topology(), 128)
    other.plan(module, [_tw_rw()])
    assert other.hash_planner_context_inputs_str() != context  # the batch size is hashed
    with pytest.raises(PlannerError, match="planner input mismatch") as err:
        make(_Loader("not-" + context)).plan(module, [_tw_rw()])
    assert err.value.error_type is PlannerErrorType.PLANNER_INPUT_CONTEXT_MISMATCH
