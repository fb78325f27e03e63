"""The rank pool: results in rank order, errors with their rank, hang recovery, reuse."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest
import torch
import torch.distributed as dist

from shardrec_testing import RankContext, RankError, RankPool, RankTimeoutError, RemoteTraceback


@dataclasses.dataclass(frozen=True)
class Echo:
    rank: int
    payload: str


def identify(ctx: RankContext, scale: int) -> tuple[int, int, int]:
    return (ctx.rank, ctx.world_size, scale * ctx.rank)


def all_reduce_rank(ctx: RankContext) -> torch.Tensor:
    t = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(t, group=ctx.pg)
    return t


def echo_dataclass(ctx: RankContext, item: Echo) -> Echo:
    return Echo(rank=ctx.rank, payload=item.payload * 2)


def raise_on(ctx: RankContext, bad_rank: int) -> int:
    if ctx.rank == bad_rank:
        raise ValueError(f"bad input 7 on rank {ctx.rank}")
    return ctx.rank


class Unpicklable(Exception):
    def __init__(self, a: int, b: int) -> None:  # two required args: pickle cannot rebuild it
        super().__init__(f"unpicklable {a}")


def raise_unpicklable(ctx: RankContext) -> None:
    raise Unpicklable(1, 2)


def sleep_on(ctx: RankContext, rank: int, seconds: float) -> int:
    if ctx.rank == rank:
        time.sleep(seconds)
    return ctx.rank


def pid(ctx: RankContext) -> int:
    return os.getpid()


@pytest.mark.parametrize("rank_pool", [1, 2, 3, 4], indirect=True)
def test_results_in_rank_order(rank_pool: RankPool) -> None:
    results = rank_pool.run(identify, 5)
    n = rank_pool.world_size
    assert results == [(r, n, 5 * r) for r in range(n)]


@pytest.mark.parametrize("rank_pool", [2, 3], indirect=True)
def test_collectives_work_and_tensors_come_back(rank_pool: RankPool) -> None:
    n = rank_pool.world_size
    results = rank_pool.run(all_reduce_rank)
    expected = torch.tensor([float(n * (n + 1) // 2)])
    for t in results:
        torch.testing.assert_close(t, expected)


def test_test_module_classes_cross_the_pipe(rank_pool: RankPool) -> None:
    assert rank_pool.run(echo_dataclass, Echo(rank=-1, payload="ab")) == [
        Echo(rank=0, payload="abab"),
        Echo(rank=1, payload="abab"),
    ]


@pytest.mark.parametrize("bad_rank", [0, 1])
def test_exception_is_reraised_with_rank_and_remote_traceback(
    pool_factory: object, bad_rank: int
) -> None:
    pool = pool_factory(2)  # type: ignore[operator]  # the fixture is a factory callable
    with pytest.raises(ValueError, match=f"bad input 7 on rank {bad_rank}") as info:
        pool.run(raise_on, bad_rank)
    assert f"raised on rank {bad_rank}" in "\n".join(info.value.__notes__)
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "raise_on" in cause.formatted and "ValueError" in cause.formatted
    # The pool survives an ordinary exception: same processes afterwards.
    before = pool.pids
    assert pool.run(identify, 1) == [(0, 2, 0), (1, 2, 1)]
    assert pool.pids == before


def test_run_outcomes_returns_each_ranks_exception(rank_pool: RankPool) -> None:
    outcomes = rank_pool.run_outcomes(raise_on, 1)
    assert outcomes[0] == 0
    assert isinstance(outcomes[1], ValueError)
    assert "bad input 7 on rank 1" in str(outcomes[1])


def test_unpicklable_exception_becomes_rank_error(rank_pool: RankPool) -> None:
    with pytest.raises(RankError, match="rank 0 raised Unpicklable") as info:
        rank_pool.run(raise_unpicklable)
    assert "unpicklable 1" in str(info.value)


def test_rejects_lambdas(rank_pool: RankPool) -> None:
    with pytest.raises(TypeError, match="top-level function"):
        rank_pool.run(lambda ctx: 0)


def test_pool_is_reused_across_jobs(pool_factory: object) -> None:
    pool = pool_factory(3)  # type: ignore[operator]  # the fixture is a factory callable
    first = pool.run(pid)
    starts = pool.starts
    for _ in range(5):
        assert pool.run(pid) == first
    assert pool.starts == starts
    assert pool_factory(3) is pool  # type: ignore[operator]  # same shared pool
    assert len(set(first)) == 3 and os.getpid() not in first


def test_hang_is_killed_and_pool_restarts() -> None:
    with RankPool(2, timeout_s=60.0) as pool:
        old = pool.pids
        with pytest.raises(RankTimeoutError, match=r"ranks \[1\] did not finish") as info:
            pool.run(
                sleep_on, 1, 600.0, timeout_s=5.0
            )  # rank 0 must answer in time on a loaded machine
        assert info.value.ranks == [1]
        assert not pool.running
        assert pool.run(identify, 2) == [(0, 2, 0), (1, 2, 2)]
        assert pool.starts == 2
        assert set(pool.pids).isdisjoint(old)


def test_constructor_validates_arguments() -> None:
    with pytest.raises(ValueError, match="world_size must be >= 1, got 0"):
        RankPool(0)
    with pytest.raises(ValueError, match="'mpi'"):
        RankPool(2, backend="mpi")
    with pytest.raises(TypeError):
        RankPool(2, "gloo")  # type: ignore[call-arg]  # everything after world_size is keyword-only
    pool = RankPool(3, timeout_s=5.0)  # not started: a record of its settings
    assert (pool.world_size, pool.backend, pool.timeout_s, pool.starts) == (3, "gloo", 5.0, 0)
    assert not pool.running and pool.pids == []
    assert pool != RankPool(3, timeout_s=5.0)  # pools compare by identity


def raise_then_peers_block(ctx: RankContext) -> None:
    if ctx.rank == 1:
        raise KeyError("rank 1 gave up before the collective")
    dist.barrier(group=ctx.pg)  # blocks: rank 1 never joins


def test_error_before_a_collective_is_reported_not_the_blocked_peers() -> None:
    with RankPool(2, timeout_s=60.0, error_grace_s=2.0) as pool:
        with pytest.raises(KeyError, match="gave up") as info:
            pool.run(raise_then_peers_block)
        assert "raised on rank 1" in "\n".join(info.value.__notes__)
        assert not pool.running  # the blocked peers were killed
        assert pool.run(identify, 1) == [(0, 2, 0), (1, 2, 1)]
