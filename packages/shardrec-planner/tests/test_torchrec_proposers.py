"""TorchRec's proposers on hand-made sharding options (perf and storage set by hand).

Tables a and b each have options with a known slowest-shard perf and HBM; the expected
proposals follow from the documented rules (proposers.py docstring), worked out below.
"""

from __future__ import annotations

import pytest
from _planner_models import hand_option, hand_shard

from shardrec_planner import ShardingOption, Topology
from shardrec_planner.proposers import (
    DynamicProgrammingProposer,
    GreedyProposer,
    GridSearchProposer,
    UniformProposer,
    proposers_to_proposals_list,
)


def _option(name: str, sharding_type: str, perf: float, hbm: int) -> ShardingOption:
    shards = [hand_shard([4, 4], hbm, perf)]
    return hand_option(name, sharding_type, shards, (4, 4), is_pooled=True)


def _space() -> list[ShardingOption]:
    return [
        _option("a", "table_wise", perf=1.0, hbm=100),
        _option("a", "row_wise", perf=2.0, hbm=40),
        _option("b", "table_wise", perf=3.0, hbm=10),
        _option("b", "row_wise", perf=0.5, hbm=60),
    ]


def _names(proposal: list[ShardingOption] | None) -> list[tuple[str, str]]:
    assert proposal is not None
    return sorted((o.name, o.sharding_type) for o in proposal)


def _drain(proposer: UniformProposer | DynamicProgrammingProposer) -> list[list[tuple[str, str]]]:
    """Every proposal left, each fed back as partitionable."""
    seen = []
    while (proposal := proposer.propose()) is not None:
        seen.append(_names(proposal))
        proposer.feedback(partitionable=True)
    return seen


def test_greedy_moves_the_largest_table_on() -> None:
    proposer = GreedyProposer()
    proposer.load(_space())
    # start: each table's fastest option: a/table_wise (1.0), b/row_wise (0.5)
    assert _names(proposer.propose()) == [("a", "table_wise"), ("b", "row_wise")]
    # a's current option takes 100 bytes > b's 60: a moves to its next option
    proposer.feedback(partitionable=True)
    assert _names(proposer.propose()) == [("a", "row_wise"), ("b", "row_wise")]
    # a has no next option; b moves
    proposer.feedback(partitionable=True)
    assert _names(proposer.propose()) == [("a", "row_wise"), ("b", "table_wise")]
    proposer.feedback(partitionable=True)
    assert proposer.propose() is None


def test_greedy_threshold_stops_after_worse_ratings() -> None:
    space = [
        _option("a", t, perf=float(i + 1), hbm=100 - i)
        for i, t in enumerate(["table_wise", "row_wise", "column_wise", "table_row_wise"])
    ]
    proposer = GreedyProposer(threshold=1)
    proposer.load(space)
    proposer.feedback(partitionable=True, perf_rating=5.0)  # best so far
    proposer.feedback(partitionable=True, perf_rating=6.0)  # 1 worse: still going
    assert proposer.propose() is not None
    proposer.feedback(partitionable=True, perf_rating=7.0)  # 2 worse > threshold
    assert proposer.propose() is None


def test_uniform_one_proposal_per_common_type() -> None:
    space = [*_space(), _option("a", "column_wise", perf=1.0, hbm=1)]
    proposer = UniformProposer()
    proposer.load(space)
    seen = _drain(proposer)
    # column_wise is offered by a only, so it gives no proposal
    assert seen == [
        [("a", "table_wise"), ("b", "table_wise")],
        [("a", "row_wise"), ("b", "row_wise")],
    ]


def test_grid_search_every_combination_and_the_cap() -> None:
    proposals = proposers_to_proposals_list([GridSearchProposer()], _space())
    assert len(proposals) == 4
    assert {tuple(_names(p)) for p in proposals} == {
        (("a", x), ("b", y)) for x in ("table_wise", "row_wise") for y in ("table_wise", "row_wise")
    }
    capped = GridSearchProposer(max_proposals=3)
    capped.load(_space())
    assert capped.propose() is None
    with pytest.raises(ValueError, match="max_proposals"):
        GridSearchProposer(max_proposals=0)


def test_dynamic_programming_least_perf_within_memory() -> None:
    proposer = DynamicProgrammingProposer(mem_bins_per_device=100)
    proposer.load(_space())
    # first proposal: each table's smallest option (a/row_wise 40, b/table_wise 10)
    assert _names(proposer.propose()) == [("a", "row_wise"), ("b", "table_wise")]
    topo = Topology(world_size=2, compute_device="cuda", hbm_cap=100)  # 200 bytes, 1-byte bins
    proposer.feedback(partitionable=True, storage_constraint=topo)
    # combinations (memory, perf): tw+tw (110, 4.0), tw+rw (160, 1.5), rw+tw (50, 5.0),
    # rw+rw (100, 2.5); all fit 200. From the fullest bin down: 160, 110, 100, 50.
    assert _drain(proposer) == [
        [("a", "table_wise"), ("b", "row_wise")],
        [("a", "table_wise"), ("b", "table_wise")],
        [("a", "row_wise"), ("b", "row_wise")],
        [("a", "row_wise"), ("b", "table_wise")],
    ]


def test_dynamic_programming_needs_the_topology() -> None:
    proposer = DynamicProgrammingProposer()
    proposer.load(_space())
    with pytest.raises(ValueError, match="storage_constraint"):
        proposer.feedback(partitionable=True)
