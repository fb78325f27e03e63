"""The quantized variable-batch pooled all-to-all (`VariableBatchPooledEmbeddingsAllToAll
(codecs=)`, TorchRec's rank-major layout, and `variable_batch_pooled_all_to_all(codecs=)`,
feature-major) on 2 gloo ranks.

Each rank sends every rank one segment (all its features' rows for that rank's samples),
encoded on its own, as the fixed-batch pooled all-to-all does. The reference: the exact
exchange with each segment passed through the codec (`through`, the codec applied locally),
forward (rows) and backward (gradients), bit for bit; and the exact exchange itself, which the
quantized one must match within the error bound docs/qcomm.md documents per precision. Uneven
batches, a zero batch, a rank without features; a no-op entry is the exact exchange.
"""

from __future__ import annotations

import pytest
import torch
from _qcomm_cases import PRECISIONS, bound, through

from shardrec_collectives import (
    ShardingEnv,
    VariableBatchPooledEmbeddingsAllToAll,
    variable_batch_pooled_all_to_all,
)
from shardrec_collectives.qcomm import CommType, QCommsConfig, QuantizedCommCodec, get_qcomm_codecs
from shardrec_testing import RankContext, RankPool, seeded_generator

DIMS = [3, 5, 33]  # widths of features 0, 1, 2
# (features each rank owns, B[s][f]: rank s's batch of feature f)
LAYOUTS = [
    ([[0, 1], [2]], [[2, 0, 3], [4, 1, 2]]),
    ([[0, 1, 2], []], [[1, 3, 0], [2, 2, 5]]),
]


def block(what: str, k: int, src: int, dst: int, f: int, n: int) -> torch.Tensor:
    """The values rank `src` sends rank `dst` for feature f (or a gradient block)."""
    return torch.randn(n, generator=seeded_generator("qvb", what, k, src, dst, f)) * 3


def cat(parts: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(parts) if parts else torch.zeros(0)


def assert_within_bound(
    codec: QuantizedCommCodec, is_fwd: bool, got: torch.Tensor, exact: torch.Tensor
) -> None:
    """|got - exact| within the codec's documented bound of one decoded value, `exact` being
    one encoded segment (its groups start at the segment's start)."""
    if codec.comm_precision is CommType.FP32:
        assert torch.equal(got, exact)
        return
    ctx = codec.create_context()
    row_dim = ctx.row_dim if ctx.row_dim > 0 else None
    limit = bound(codec.comm_precision, exact, row_dim, is_fwd)
    assert bool(((got - exact).abs() <= limit).all()), (got - exact).abs().max()


def check_case(ctx: RankContext, k: int, config: QCommsConfig, layout: int) -> None:
    env, world, me = ShardingEnv.from_process_group(ctx.pg), ctx.world_size, ctx.rank
    owned, batch = LAYOUTS[layout]
    codecs = get_qcomm_codecs(config)
    fwd, bwd = codecs.forward, codecs.backward
    assert isinstance(fwd, QuantizedCommCodec) and isinstance(bwd, QuantizedCommCodec)
    emb_dims = [[DIMS[f] for f in fs] for fs in owned]
    key = (k, layout)

    def sent(src: int, dst: int, what: str = "x") -> list[torch.Tensor]:
        return [block(what, k, src, dst, f, batch[dst][f] * DIMS[f]) for f in owned[src]]

    # TorchRec's module: rank-major input; the function: feature-major input
    rank_major = cat([x for d in range(world) for x in sent(me, d)]).requires_grad_(True)
    feature_major = cat(
        [sent(me, d)[j] for j in range(len(owned[me])) for d in range(world)]
    ).requires_grad_(True)
    module = VariableBatchPooledEmbeddingsAllToAll(ctx.pg, emb_dims, codecs=codecs)
    outs = [
        module(
            rank_major,
            [[batch[d][f] for f in owned[me]] for d in range(world)],
            [batch[me][f] for r in range(world) for f in owned[r]],
        ).wait(),
        variable_batch_pooled_all_to_all(
            env,
            feature_major,
            [[batch[s][f] for s in range(world)] for f in owned[me]],
            emb_dims,
            [[batch[me][f] for f in fs] for fs in owned],
            codecs,
        ).wait(),
    ]
    exact = [cat(sent(r, me)) for r in range(world)]
    expected = cat([through(fwd, x) for x in exact])
    for out in outs:
        torch.testing.assert_close(out, expected, rtol=0, atol=0, msg=lambda m: f"{key}: {m}")
    for r, piece in enumerate(torch.split(outs[0].detach(), [x.numel() for x in exact])):
        assert_within_bound(fwd, True, piece, exact[r])
    # backward: rank s's gradient for what it received (source-major, as its output)
    grads = {s: cat([x for r in range(world) for x in sent(r, s, "g")]) for s in range(world)}
    for out in outs:
        (out * grads[me]).sum().backward()
    # what rank d sends back to me: its gradient of my segment, through the backward codec
    back_exact, back = [], []
    for d in range(world):
        offset = sum(x.numel() for r in range(me) for x in sent(r, d))
        n = sum(x.numel() for x in sent(me, d))
        back_exact.append(grads[d][offset : offset + n])
        back.append(through(bwd, back_exact[-1]))
    assert rank_major.grad is not None and feature_major.grad is not None
    torch.testing.assert_close(rank_major.grad, cat(back), rtol=0, atol=0)
    per_feature = [torch.split(b, [x.numel() for x in sent(me, d)]) for d, b in enumerate(back)]
    torch.testing.assert_close(
        feature_major.grad,
        cat([per_feature[d][j] for j in range(len(owned[me])) for d in range(world)]),
        rtol=0,
        atol=0,
    )
    got_back = torch.split(rank_major.grad, [x.numel() for x in back_exact])
    for d in range(world):
        assert_within_bound(bwd, bool(config.fp8_bwd_uses_143), got_back[d], back_exact[d])


def check_all(ctx: RankContext) -> int:
    cases = 0
    for k, config in enumerate(PRECISIONS):
        for layout in range(len(LAYOUTS)):
            check_case(ctx, k, config, layout)
            cases += 1
    # a registry entry that quantizes nothing is the exact exchange, bit for bit
    env, me = ShardingEnv.from_process_group(ctx.pg), ctx.rank
    local = torch.randn(6, generator=seeded_generator("qvb-exact", me))
    # one feature of width 2 on each rank; rank s has 1 + s samples of each
    args = (env, local, [[1, 2]], [[2], [2]], [[1 + me], [1 + me]])
    exact = variable_batch_pooled_all_to_all(*args).wait()
    noop = variable_batch_pooled_all_to_all(*args, get_qcomm_codecs(QCommsConfig())).wait()
    assert torch.equal(exact, noop)
    with pytest.raises(TypeError, match=r"^variable_batch_pooled_all_to_all\(codecs=1\)"):
        variable_batch_pooled_all_to_all(*args, 1)  # type: ignore[arg-type]
    return cases


def test_quantized_variable_batch_pooled_all_to_all_on_two_ranks(pool_factory) -> None:  # type: ignore[no-untyped-def]
    pool: RankPool = pool_factory(2)
    assert pool.run(check_all) == [len(PRECISIONS) * len(LAYOUTS)] * 2
