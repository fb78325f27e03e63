"""ShardingEnv, agree_on_error and the small collectives."""

from __future__ import annotations

import pytest
import torch

from shardrec_collectives import (
    PeerError,
    ShardingEnv,
    agree_on_error,
    all_gather_ints,
    all_gather_object,
    all_reduce_sum,
    barrier,
    broadcast_,
    reduce_scatter_pooled,
    split_by_host,
)
from shardrec_testing import RankContext, RankPool, assert_close


def test_env_validates_fields() -> None:
    with pytest.raises(ValueError, match="world_size must be >= 1, got 0"):
        ShardingEnv(0, 0)
    with pytest.raises(ValueError, match=r"rank 3 is outside the world of 2 ranks \(valid: 0..1\)"):
        ShardingEnv(2, 3)
    with pytest.raises(ValueError, match="rank -1 is outside"):
        ShardingEnv.from_local(2, -1)
    with pytest.raises(TypeError, match=r"world_size must be an int, got 2\.0"):
        ShardingEnv(2.0, 0)  # type: ignore[arg-type]  # the wrong type under test


def test_from_local() -> None:
    env = ShardingEnv.from_local(4, 2)
    assert (env.world_size, env.rank, env.pg, env.device) == (4, 2, None, torch.device("cpu"))
    assert env.backend == "local"
    with pytest.raises(ValueError, match="rank 2 of 4\\) has no process group"):
        env.require_pg()
    assert ShardingEnv(1, 0, None, "cpu").device == torch.device("cpu")  # type: ignore[arg-type]  # str accepted at runtime


def env_fields(ctx: RankContext) -> tuple[int, int, str, str]:
    env = ShardingEnv.from_process_group(ctx.pg)
    assert env.pg is ctx.pg
    return env.world_size, env.rank, env.backend, str(env.device)


@pytest.mark.parametrize("rank_pool", [1, 3], indirect=True)
def test_from_process_group(rank_pool: RankPool) -> None:
    n = rank_pool.world_size
    assert rank_pool.run(env_fields) == [(n, r, "gloo", "cpu") for r in range(n)]


def agree(ctx: RankContext, bad: list[int]) -> str:
    env = ShardingEnv.from_process_group(ctx.pg)
    error = IndexError(f"id {100 + ctx.rank} out of range") if ctx.rank in bad else None
    agree_on_error(env, error)
    return "ok"


@pytest.mark.parametrize("rank_pool", [1, 2, 4], indirect=True)
def test_agree_on_error(rank_pool: RankPool) -> None:
    n = rank_pool.world_size
    assert rank_pool.run(agree, []) == ["ok"] * n
    bad = [0] if n == 1 else sorted({1, n - 1})
    outcomes = rank_pool.run_outcomes(agree, bad)
    for r, o in enumerate(outcomes):
        if r in bad:
            assert isinstance(o, IndexError) and f"id {100 + r}" in str(o)
        else:
            assert isinstance(o, PeerError) and o.ranks == bad
            assert f"rank {n - 1}: IndexError: id {100 + n - 1} out of range" in str(o)
    assert rank_pool.run(agree, []) == ["ok"] * n  # nothing left half-done


def small_collectives(ctx: RankContext) -> list[object]:
    env = ShardingEnv.from_process_group(ctx.pg)
    me = float(ctx.rank + 1)
    x = torch.tensor([me, 2 * me], requires_grad=True)
    total = all_reduce_sum(env, x).wait()
    (total * torch.tensor([1.0, 10.0])).sum().backward()
    n = ctx.world_size
    s = n * (n + 1) / 2
    assert_close(total, torch.tensor([s, 2 * s]))
    assert x.grad is not None
    assert_close(x.grad, torch.tensor([float(n), 10.0 * n]))  # every rank's gradient summed
    t = torch.full((3,), me)
    broadcast_(env, t, src=n - 1)
    assert_close(t, torch.full((3,), float(n)))
    barrier(env)
    assert all_gather_ints(env, 10 * ctx.rank) == [10 * r for r in range(ctx.world_size)]
    return all_gather_object(env, {"rank": ctx.rank})


@pytest.mark.parametrize("rank_pool", [1, 3], indirect=True)
def test_all_reduce_broadcast_barrier_gather_object(rank_pool: RankPool) -> None:
    n = rank_pool.world_size
    assert rank_pool.run(small_collectives) == [[{"rank": r} for r in range(n)]] * n


def test_broadcast_rejects_bad_source() -> None:
    with pytest.raises(ValueError, match="src rank 2 is outside the world of 1 ranks"):
        broadcast_(ShardingEnv.from_local(1, 0), torch.zeros(1), src=2)


def host_groups(ctx: RankContext) -> tuple[int, int, int, int, list[float]]:
    env = ShardingEnv.from_process_group(ctx.pg)
    groups = split_by_host(env, 2)
    # reduce-scatter within the host: each of the 2 local ranks gets one row of the host's sum
    partial = torch.full((2, 1), float(ctx.rank))
    summed = reduce_scatter_pooled(groups.intra, partial, [1, 1]).wait()
    return (
        groups.intra.rank,
        groups.intra.world_size,
        groups.cross.rank,
        groups.cross.world_size,
        summed.view(-1).tolist(),
    )


@pytest.mark.parametrize("rank_pool", [2, 4], indirect=True)
def test_split_by_host(rank_pool: RankPool) -> None:
    n = rank_pool.world_size
    results = rank_pool.run(host_groups)
    for r, (local, local_size, host, hosts, summed) in enumerate(results):
        assert (local, local_size, host, hosts) == (r % 2, 2, r // 2, n // 2)
        host_ranks = [r - r % 2, r - r % 2 + 1]
        assert summed == [float(sum(host_ranks))]


def test_split_by_host_rejects_bad_local_size() -> None:
    with pytest.raises(ValueError, match="local_world_size 3 must be >= 1 and divide world_size 4"):
        split_by_host(ShardingEnv.from_local(4, 0), 3)


def test_all_gather_ints_rejects_a_non_int() -> None:
    env = ShardingEnv.from_local(1, 0)
    assert all_gather_ints(env, 7) == [7]
    for bad in (1.5, "3", True):
        with pytest.raises(TypeError, match="must be an int"):
            all_gather_ints(env, bad)  # type: ignore[arg-type]
