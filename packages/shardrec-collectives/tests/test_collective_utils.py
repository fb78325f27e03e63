"""collective_utils: one rank runs a function, every rank gets its result (TorchRec's semantics)."""

from __future__ import annotations

import os
from unittest import mock

import pytest
import torch

from shardrec_collectives import PeerError
from shardrec_collectives import collective_utils as cu
from shardrec_testing import RankContext, RankPool


def leaders(ctx: RankContext) -> list[bool]:
    return [cu.is_leader(ctx.pg, r) for r in range(ctx.world_size)]


def test_is_leader_single_process() -> None:
    assert cu.is_leader(None) is True
    assert cu.is_leader(None, 1) is False


def invoke(ctx: RankContext) -> list[object]:
    calls: list[int] = []

    def func(x: int, *, y: int) -> tuple[int, int, int]:
        calls.append(ctx.rank)
        return (ctx.rank, x, y)

    out: list[object] = []
    for src in range(ctx.world_size):
        out.append(cu.invoke_on_rank_and_broadcast_result(ctx.pg, src, func, 7, y=src * 10))
        # `func` ran on `src` only.
        out.append(calls == ([src] if ctx.rank == src else []))
        calls.clear()

    @cu.run_on_leader(ctx.pg, ctx.world_size - 1)
    def last_rank_name() -> str:
        """Docstring kept by the decorator."""
        return f"rank{ctx.rank}"

    out.append(last_rank_name())
    out.append(last_rank_name.__doc__)
    return out


@pytest.mark.parametrize("rank_pool", [1, 3], indirect=True)
def test_invoke_and_run_on_leader(rank_pool: RankPool) -> None:
    n = rank_pool.world_size
    assert rank_pool.run(leaders) == [[r == me for r in range(n)] for me in range(n)]
    expected: list[object] = []
    for src in range(n):
        expected += [(src, 7, src * 10), True]
    expected += [f"rank{n - 1}", "Docstring kept by the decorator."]
    assert rank_pool.run(invoke) == [expected] * n


def failing(ctx: RankContext) -> object:
    def func() -> int:
        raise KeyError("no such table")

    return cu.invoke_on_rank_and_broadcast_result(ctx.pg, 1, func)


def bad_rank(ctx: RankContext) -> object:
    return cu.invoke_on_rank_and_broadcast_result(ctx.pg, ctx.world_size, int)


@pytest.mark.parametrize("rank_pool", [2], indirect=True)
def test_errors_reach_every_rank(rank_pool: RankPool) -> None:
    outcomes = rank_pool.run_outcomes(failing)
    assert isinstance(outcomes[1], KeyError)
    assert isinstance(outcomes[0], PeerError) and outcomes[0].ranks == [1]
    assert "KeyError: 'no such table'" in str(outcomes[0])
    for o in rank_pool.run_outcomes(bad_rank):
        assert isinstance(o, ValueError) and "rank 2 is not a rank of the process group" in str(o)
    assert rank_pool.run(leaders) == [[True, False], [False, True]]  # nothing left half-done


def share(ctx: RankContext, src: int) -> list[object]:
    out: list[object] = []
    for i in range(2):  # twice: no stale state between calls

        def create(fill: float) -> tuple[torch.Tensor, None, torch.Tensor]:
            return (
                torch.full((4, 3), fill),
                None,
                torch.arange(10, dtype=torch.int64)[2:8:2],  # a strided view into a storage
            )

        got = cu.create_on_rank_and_share_result(
            ctx.pg,
            src,
            create,
            lambda r: list(r),
            lambda ts: (ts[0], ts[1], ts[2]),
            float(i + 1),
        )
        a, none, c = got
        assert a is not None and c is not None
        out.append((a.tolist(), none, c.tolist(), c.dtype, ctx.rank == src or a.is_shared()))
    return out


@pytest.mark.parametrize("rank_pool", [1, 2], indirect=True)
def test_create_on_rank_and_share_result(rank_pool: RankPool) -> None:
    for src in range(rank_pool.world_size):
        expected = [
            ([[float(i + 1)] * 3] * 4, None, [2, 4, 6], torch.int64, True) for i in range(2)
        ]
        assert rank_pool.run(share, src) == [expected] * rank_pool.world_size


def test_share_refuses_a_non_cpu_tensor() -> None:
    meta = torch.empty(2, device="meta")
    with pytest.raises(ValueError, match="shares CPU tensors only, got one on meta"):
        cu._share(meta)


def validation(ctx: RankContext, setting: str) -> list[bool]:
    cu._INITIALIZED = False
    cu._USE_COLLECTIVE_VALIDATION = False
    if ctx.rank == 0:
        os.environ[cu.VALIDATE_ENV] = setting
    try:
        before = cu.validate_collectives_enabled()
        cu.init_collective_validation(ctx.pg)
        return [before, cu.validate_collectives_enabled()]
    finally:
        os.environ.pop(cu.VALIDATE_ENV, None)
        cu._INITIALIZED = False
        cu._USE_COLLECTIVE_VALIDATION = False


@pytest.mark.parametrize("rank_pool", [2], indirect=True)
def test_validation_switch_is_decided_on_rank_0(rank_pool: RankPool) -> None:
    # Only rank 0 reads the environment; rank 1 follows it.
    assert rank_pool.run(validation, "1") == [[False, True]] * 2
    assert rank_pool.run(validation, "0") == [[False, False]] * 2


def test_validation_switch_without_the_environment_variable() -> None:
    with mock.patch.dict(os.environ, {}, clear=False):
        os.environ.pop(cu.VALIDATE_ENV, None)
        with mock.patch("torch._utils_internal.justknobs_check", return_value=True) as jk:
            assert cu._resolve_enablement_on_leader() is True
        jk.assert_called_once_with("pytorch/torchrec:enable_collective_validation", default=False)
        with mock.patch("torch._utils_internal.justknobs_check", side_effect=RuntimeError("down")):
            assert cu._resolve_enablement_on_leader() is False
