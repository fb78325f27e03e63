"""TorchRec's variable-batch modules on 2 and 3 gloo ranks: every rank builds every rank's
seeded blocks and checks its received (or summed) values and gradients against them."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from shardrec_collectives import (
    VariableBatchPooledEmbeddingsAllToAll,
    VariableBatchPooledEmbeddingsReduceScatter,
)
from shardrec_testing import RankContext, assert_close, seeded_generator

FEATURES = 4


def setup(world: int) -> tuple[list[list[int]], list[int], list[list[int]]]:
    """Owned features per rank, widths per feature, B[s][f]: rank s's batch of feature f."""
    g = seeded_generator("vb-setup", world)
    owner = torch.randint(0, world, (FEATURES,), generator=g).tolist()
    owner[0] = world - 1  # some rank may own nothing, the last owns at least one
    dims = torch.randint(1, 4, (FEATURES,), generator=g).tolist()
    batch = torch.randint(0, 4, (world, FEATURES), generator=g).tolist()
    return [[f for f in range(FEATURES) if owner[f] == r] for r in range(world)], dims, batch


def block(what: str, src: int, dst: int, f: int, n: int) -> torch.Tensor:
    gen = seeded_generator(what, src, dst, f)
    return torch.randn(n, generator=gen, dtype=torch.float64).float()


def cat(parts: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(parts) if parts else torch.zeros(0)


def check_all_to_all(ctx: RankContext) -> int:
    assert ctx.pg is not None
    world, me = ctx.world_size, ctx.rank
    owned, dims, batch = setup(world)
    emb_dims = [[dims[f] for f in fs] for fs in owned]
    a2a = VariableBatchPooledEmbeddingsAllToAll(ctx.pg, emb_dims, callbacks=[lambda t: t + 1])
    local = cat(
        [block("x", me, d, f, batch[d][f] * dims[f]) for d in range(world) for f in owned[me]]
    ).requires_grad_(True)
    out = a2a(
        local,
        [[batch[d][f] for f in owned[me]] for d in range(world)],
        [batch[me][f] for r in range(world) for f in owned[r]],
    ).wait()
    expected = cat(
        [block("x", r, me, f, batch[me][f] * dims[f]) for r in range(world) for f in owned[r]]
    )
    assert_close(out, expected + 1)
    grads = {
        s: cat([block("g", s, r, f, batch[s][f] * dims[f]) for r in range(world) for f in owned[r]])
        for s in range(world)
    }
    (out * grads[me]).sum().backward()
    # rank d's gradient blocks, in the order d received them, are what `local` sent d
    sent_grad = []
    for d in range(world):
        offset = sum(batch[d][f] * dims[f] for r in range(me) for f in owned[r])
        n = sum(batch[d][f] * dims[f] for f in owned[me])
        sent_grad.append(grads[d][offset : offset + n])
    assert local.grad is not None
    assert_close(local.grad, cat(sent_grad))
    return 1


def check_reduce_scatter(ctx: RankContext) -> int:
    assert ctx.pg is not None
    world, me = ctx.world_size, ctx.rank
    _, dims, batch = setup(world)
    rs = VariableBatchPooledEmbeddingsReduceScatter(ctx.pg)

    def partial(s: int) -> torch.Tensor:
        return cat(
            [
                block("p", s, r, f, batch[r][f] * dims[f])
                for r in range(world)
                for f in range(FEATURES)
            ]
        )

    local = partial(me).requires_grad_(True)
    out = rs(local, batch, dims).wait()
    counts = [sum(batch[r][f] * dims[f] for f in range(FEATURES)) for r in range(world)]
    start = sum(counts[:me])
    expected = torch.stack([partial(s)[start : start + counts[me]] for s in range(world)]).sum(0)
    assert_close(out, expected)
    grads = [block("rg", r, 0, 0, counts[r]) for r in range(world)]
    (out * grads[me]).sum().backward()
    assert local.grad is not None
    assert_close(local.grad, cat(grads))
    return 1


def check_errors(ctx: RankContext) -> int:
    assert ctx.pg is not None
    with pytest.raises(ValueError, match="one per rank"):
        VariableBatchPooledEmbeddingsAllToAll(ctx.pg, [[1]])
    a2a = VariableBatchPooledEmbeddingsAllToAll(ctx.pg, [[2], [3]])
    with pytest.raises(ValueError, match="one per feature of every rank"):
        a2a(torch.zeros(2), [[1], [0]], [1])
    with pytest.raises(ValueError, match="shape"):
        a2a(torch.zeros(5), [[1], [1]], [1, 1])
    rs = VariableBatchPooledEmbeddingsReduceScatter(ctx.pg)
    with pytest.raises(ValueError, match="one batch size per feature"):
        rs(torch.zeros(4), [[1, 1], [1]], [1, 1])
    dist.barrier(group=ctx.pg)
    return 1


@pytest.mark.parametrize("world", [2, 3])
def test_variable_batch_modules(pool_factory, world: int) -> None:  # type: ignore[no-untyped-def]
    pool = pool_factory(world)
    assert pool.run(check_all_to_all) == [1] * world
    assert pool.run(check_reduce_scatter) == [1] * world


def test_variable_batch_errors(pool_factory) -> None:  # type: ignore[no-untyped-def]
    assert pool_factory(2).run(check_errors) == [1, 1]
