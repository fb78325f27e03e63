"""SemisyncOptimizer + DiLoCo on 2 gloo ranks: the pseudo-gradients are averaged over real
processes; the reference simulates both replicas in one process with dense torch.optim."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import Tensor

from shardrec_optim import DiLoCo, KeyedOptimizerWrapper, SemisyncOptimizer
from shardrec_testing import RankPool
from shardrec_testing.context import RankContext

STEPS, N = 7, 3
LR, MOMENTUM = 0.7, 0.9


def _start() -> list[Tensor]:
    g = torch.Generator().manual_seed(11)
    return [
        torch.randn(5, 2, generator=g, dtype=torch.float64),
        torch.randn(2, generator=g, dtype=torch.float64),
    ]


def _grads(rank: int) -> list[list[Tensor]]:
    g = torch.Generator().manual_seed(100 + rank)
    return [
        [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in _start()] for _ in range(STEPS)
    ]


def _train_rank(ctx: RankContext) -> tuple[list[Tensor], list[Tensor]]:
    def all_reduce_mean(tensors: list[Tensor]) -> None:
        for t in tensors:
            dist.all_reduce(t, group=ctx.pg)
            t.div_(ctx.world_size)

    params = {f"p{i}": torch.nn.Parameter(t) for i, t in enumerate(_start())}
    opt = SemisyncOptimizer(
        list(params.values()),
        KeyedOptimizerWrapper(params, lambda ps: torch.optim.Adam(ps, lr=0.05)),
        KeyedOptimizerWrapper(
            params, lambda ps: DiLoCo(ps, all_reduce_mean=all_reduce_mean, lr=LR, momentum=MOMENTUM)
        ),
        num_local_steps=N,
        semi_sync_worker_shard_group=ctx.pg,
    )
    synced: list[Tensor] = []
    for t, step in enumerate(_grads(ctx.rank), start=1):
        for p, g in zip(params.values(), step, strict=True):
            p.grad = g
        opt.step()
        opt.zero_grad()
        if t == STEPS - 1:  # right after the last global step
            synced = [p.detach().clone() for p in params.values()]
    return synced, [p.detach() for p in params.values()]


def _reference(world: int) -> list[list[Tensor]]:
    """Both replicas in one process: Adam each; every N steps the mean of (global - local)
    over replicas is the grad of one outer torch SGD on the global copy, copied to all."""
    replicas = [[t.clone().requires_grad_(True) for t in _start()] for _ in range(world)]
    inner = [torch.optim.Adam(ps, lr=0.05) for ps in replicas]
    glob = [t.clone().requires_grad_(True) for t in _start()]
    outer = torch.optim.SGD(glob, lr=LR, momentum=MOMENTUM, nesterov=True)
    grads = [_grads(r) for r in range(world)]
    for t in range(STEPS):
        for r in range(world):
            for p, g in zip(replicas[r], grads[r][t], strict=True):
                p.grad = g
            inner[r].step()
        if (t + 1) % N == 0:
            with torch.no_grad():
                for i, gp in enumerate(glob):
                    gp.grad = torch.stack([gp - ps[i] for ps in replicas]).mean(0)
                outer.step()
                for ps in replicas:
                    for p, gp in zip(ps, glob, strict=True):
                        p.copy_(gp)
    return [[p.detach() for p in ps] for ps in replicas]


@pytest.mark.parametrize("rank_pool", [2], indirect=True)
def test_two_ranks_match_reference(rank_pool: RankPool) -> None:
    (synced0, final0), (synced1, final1) = rank_pool.run(_train_rank)
    want = _reference(2)
    for got, ref in ((final0, want[0]), (final1, want[1])):
        for a, b in zip(got, ref, strict=True):
            torch.testing.assert_close(a, b)
    # STEPS = 2 * N + 1: the replicas were identical after the global step at 2 * N, and one
    # local step on different data later they differ again.
    for a, b in zip(synced0, synced1, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(final0[0], final1[0])
