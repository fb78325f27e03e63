"""Pooled all-to-all, reduce-scatter, all-gather and their variable-batch forms, forward and
backward, over real gloo ranks against references computed locally from every rank's inputs."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from shardrec_collectives import (
    ShardingEnv,
    _primitives,
    all_gather_pooled,
    pooled_all_to_all,
    pooled_all_to_all_flat,
    reduce_scatter_pooled,
    variable_batch_pooled_all_to_all,
    variable_batch_reduce_scatter_pooled,
)
from shardrec_collectives.reduce_scatter import GradientSink
from shardrec_testing import RankContext, RankPool, assert_close, seeded_generator

WORLD_SIZES = [1, 2, 3, 4]


def batches(world: int, case: int) -> list[int]:
    """Per-rank batch sizes: uneven, with an empty rank in some cases."""
    g = seeded_generator("batch", world, case)
    sizes = torch.randint(0, 4, (world,), generator=g).tolist()
    if case == 0:
        sizes = [2] * world
    return sizes


def dims(world: int, case: int) -> list[int]:
    g = seeded_generator("dims", world, case)
    out = torch.randint(1, 4, (world,), generator=g).tolist()
    if case == 2 and world > 1:
        out[0] = 0  # a rank without tables
    return out


def rand(*parts: object, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randn(shape, generator=seeded_generator(*parts), dtype=torch.float64).float()


def env_of(ctx: RankContext) -> ShardingEnv:
    return ShardingEnv.from_process_group(ctx.pg)


def check_pooled_all_to_all(ctx: RankContext) -> int:
    env, world, me = env_of(ctx), ctx.world_size, ctx.rank
    for case in range(4):
        b, d = batches(world, case), dims(world, case)
        local = rand("emb", case, me, shape=(sum(b), d[me])).requires_grad_(True)
        out = pooled_all_to_all(env, local, b, d).wait()
        start = sum(b[:me])
        expected = torch.cat(
            [
                rand("emb", case, r, shape=(sum(b), d[r]))[start : start + b[me]]
                for r in range(world)
            ],
            dim=1,
        )
        assert_close(out, expected)
        grads = [rand("grad", case, s, shape=(b[s], sum(d))) for s in range(world)]
        (out * grads[me]).sum().backward()
        col = sum(d[:me])
        expected_grad = torch.cat([g[:, col : col + d[me]] for g in grads], dim=0)
        assert local.grad is not None
        assert_close(local.grad, expected_grad)
    return 4


def check_reduce_scatter(ctx: RankContext) -> int:
    env, world, me = env_of(ctx), ctx.world_size, ctx.rank
    dim = 3
    for case in range(4):
        b = batches(world, case)
        partial = rand("part", case, me, shape=(sum(b), dim)).requires_grad_(True)
        out = reduce_scatter_pooled(env, partial, b).wait()
        start = sum(b[:me])
        expected = sum(
            rand("part", case, r, shape=(sum(b), dim))[start : start + b[me]] for r in range(world)
        )
        assert isinstance(expected, torch.Tensor)
        assert_close(out, expected)
        grads = [rand("grad", case, s, shape=(b[s], dim)) for s in range(world)]
        (out * grads[me]).sum().backward()
        assert partial.grad is not None
        assert_close(partial.grad, torch.cat(grads))
    return 4


def check_reduce_scatter_sink(ctx: RankContext) -> int:
    """`gradient_sink`: on two gloo ranks the gradient of `partial` comes in two row pieces
    (the whole one where the pair path does not run) and autograd gets zeros; the pieces
    together are exactly the gradient the sink-less reduce-scatter gives."""
    env, world, me = env_of(ctx), ctx.world_size, ctx.rank
    dim = 3
    pair = world == 2 and env.backend == "gloo"
    for case in range(4):
        b = batches(world, case)
        partial = rand("part", case, me, shape=(sum(b), dim)).requires_grad_(True)
        got: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        out = reduce_scatter_pooled(
            env, partial, b, gradient_sink=lambda *pieces, into=got: into.append(pieces)
        ).wait()
        plain = partial.detach().clone().requires_grad_(True)
        want = reduce_scatter_pooled(env, plain, b).wait()
        assert torch.equal(out, want)
        grads = [rand("grad", case, s, shape=(b[s], dim)) for s in range(world)]
        (out * grads[me]).sum().backward()
        (want * grads[me]).sum().backward()
        assert partial.grad is not None and plain.grad is not None
        if pair:
            assert len(got) == 1
            split, first, second = got[0]
            assert split == b[0] and first.shape == (b[0], dim) and second.shape == (b[1], dim)
            assert torch.equal(torch.cat([first, second]), plain.grad)
            assert torch.equal(partial.grad, torch.zeros_like(partial))
        else:
            assert got == []
            assert torch.equal(partial.grad, plain.grad)
    return 4


def check_reduce_scatter_backward_is_split(ctx: RankContext) -> int:
    """The gradient exchange is launched by the output's backward and waited for by
    `partial`'s (two autograd nodes, as the pooled all-to-all's): the backward of what the
    forward computed between the launch and the wait (a dense arch) runs before the wait, on
    the pair path (with and without a sink) and the general one."""
    env, world, me = env_of(ctx), ctx.world_size, ctx.rank
    dim = 2
    order: list[str] = []
    wait = _primitives.Pending.wait

    def recorded_wait(self: _primitives.Pending) -> torch.Tensor:
        order.append("wait")
        return wait(self)

    _primitives.Pending.wait = recorded_wait  # type: ignore[method-assign]  # observe the waits
    try:
        for case in range(4):
            b = batches(world, case)
            sinks: list[GradientSink | None] = [None, lambda *pieces: order.append("sink")]
            for sink in sinks:
                partial = rand("part", case, me, shape=(sum(b), dim)).requires_grad_(True)
                dense = rand("dense", case, me, shape=(b[me], dim)).requires_grad_(True)
                partial.register_hook(lambda g: order.append("partial"))
                dense.register_hook(lambda g: order.append("dense"))
                launched = reduce_scatter_pooled(env, partial, b, gradient_sink=sink)
                between = dense * 2.0
                total = (launched.wait() + between).sum()
                order.clear()
                total.backward()
                pair = sink is not None and world == 2 and env.backend == "gloo"
                want = (
                    ["dense", "wait", "sink", "partial"] if pair else ["dense", "wait", "partial"]
                )
                assert order == want, order
    finally:
        _primitives.Pending.wait = wait  # type: ignore[method-assign]  # restored
    return 4


def check_all_gather(ctx: RankContext) -> int:
    env, world, me = env_of(ctx), ctx.world_size, ctx.rank
    dim = 2
    for case in range(4):
        b = batches(world, case)
        local = rand("local", case, me, shape=(b[me], dim)).requires_grad_(True)
        out = all_gather_pooled(env, local, b).wait()
        assert_close(
            out, torch.cat([rand("local", case, r, shape=(b[r], dim)) for r in range(world)])
        )
        grads = [rand("grad", case, s, shape=(sum(b), dim)) for s in range(world)]
        (out * grads[me]).sum().backward()
        start = sum(b[:me])
        expected = sum(g[start : start + b[me]] for g in grads)
        assert local.grad is not None and isinstance(expected, torch.Tensor)
        assert_close(local.grad, expected)
    return 4


# -- variable batch per feature -------------------------------------------------------------


def vb_setup(world: int, case: int) -> tuple[list[list[int]], list[list[int]], list[list[int]]]:
    """Features per owner rank with dims, and B[r][f]: batch of feature f on rank r (global f)."""
    g = seeded_generator("vb", world, case)
    n_features = 5
    owner = torch.randint(0, world, (n_features,), generator=g).tolist()
    feature_dims = torch.randint(1, 4, (n_features,), generator=g).tolist()
    batch = torch.randint(0, 4, (world, n_features), generator=g).tolist()
    features_of = [[f for f in range(n_features) if owner[f] == r] for r in range(world)]
    emb_dims = [[feature_dims[f] for f in fs] for fs in features_of]
    return features_of, emb_dims, batch


def check_vb_pooled_all_to_all(ctx: RankContext) -> int:
    env, world, me = env_of(ctx), ctx.world_size, ctx.rank
    for case in range(4):
        features_of, emb_dims, batch = vb_setup(world, case)

        def local_rows(r: int, f: int, case: int = case) -> torch.Tensor:
            # rank r's pooled rows for its feature f over every source's samples
            _, dims_, batch_ = vb_setup(world, case)
            total = sum(batch_[s][f] for s in range(world))
            return rand(
                "vb", case, f, shape=(total, dims_[r][vb_setup(world, case)[0][r].index(f)])
            )

        mine = features_of[me]
        local = torch.cat([local_rows(me, f).reshape(-1) for f in mine] or [torch.zeros(0)])
        local.requires_grad_(True)
        out = variable_batch_pooled_all_to_all(
            env,
            local,
            [[batch[s][f] for s in range(world)] for f in mine],
            emb_dims,
            [[batch[me][f] for f in features_of[r]] for r in range(world)],
        ).wait()
        pieces = []
        for r in range(world):
            for f in features_of[r]:
                start = sum(batch[s][f] for s in range(me))
                pieces.append(local_rows(r, f)[start : start + batch[me][f]].reshape(-1))
        expected = torch.cat(pieces or [torch.zeros(0)])
        assert_close(out, expected)
        # backward: gradient of out as a seeded tensor per rank, routed back per feature
        grads = {
            s: rand(
                "vbgrad",
                case,
                s,
                shape=(
                    sum(
                        batch[s][f] * emb_dims[r][features_of[r].index(f)]
                        for r in range(world)
                        for f in features_of[r]
                    ),
                ),
            )
            for s in range(world)
        }
        (out * grads[me]).sum().backward()
        expected_grad = []
        for f in mine:
            dim = emb_dims[me][mine.index(f)]
            for s in range(world):
                offset = 0
                for r in range(world):
                    for f2 in features_of[r]:
                        size = batch[s][f2] * emb_dims[r][features_of[r].index(f2)]
                        if f2 == f:
                            expected_grad.append(grads[s][offset : offset + size])
                        offset += size
            del dim
        assert local.grad is not None
        assert_close(local.grad, torch.cat(expected_grad or [torch.zeros(0)]))
    return 4


def check_vb_reduce_scatter(ctx: RankContext) -> int:
    env, world, me = env_of(ctx), ctx.world_size, ctx.rank
    for case in range(4):
        _, _, batch = vb_setup(world, case)
        n_features = len(batch[0])
        feature_dims = [f % 3 + 1 for f in range(n_features)]
        spkpr = [[batch[s][f] for s in range(world)] for f in range(n_features)]

        def partial_of(
            r: int, case: int = case, spkpr: list[list[int]] = spkpr, dims: list[int] = feature_dims
        ) -> list[torch.Tensor]:
            return [
                rand("vbrs", case, r, f, shape=(sum(spkpr[f]), dims[f])) for f in range(len(dims))
            ]

        local = torch.cat([p.reshape(-1) for p in partial_of(me)]).requires_grad_(True)
        out = variable_batch_reduce_scatter_pooled(env, local, spkpr, feature_dims).wait()
        pieces = []
        for f in range(n_features):
            start = sum(spkpr[f][:me])
            summed = sum(partial_of(r)[f][start : start + spkpr[f][me]] for r in range(world))
            assert isinstance(summed, torch.Tensor)
            pieces.append(summed.reshape(-1))
        assert_close(out, torch.cat(pieces))
        grads = [
            rand(
                "vbrsg",
                case,
                s,
                shape=(sum(spkpr[f][s] * feature_dims[f] for f in range(n_features)),),
            )
            for s in range(world)
        ]
        (out * grads[me]).sum().backward()
        expected_grad = []
        for f in range(n_features):
            for s in range(world):
                offset = sum(spkpr[f2][s] * feature_dims[f2] for f2 in range(f))
                expected_grad.append(grads[s][offset : offset + spkpr[f][s] * feature_dims[f]])
        assert local.grad is not None
        assert_close(local.grad, torch.cat(expected_grad))
    return 4


@pytest.mark.parametrize(
    "check",
    [
        check_pooled_all_to_all,
        check_reduce_scatter,
        check_reduce_scatter_sink,
        check_reduce_scatter_backward_is_split,
        check_all_gather,
        check_vb_pooled_all_to_all,
        check_vb_reduce_scatter,
    ],
    ids=lambda check: check.__name__.removeprefix("check_"),
)
@pytest.mark.parametrize("rank_pool", WORLD_SIZES, indirect=True)
def test_pooled_collective_matches_the_reference(
    rank_pool: RankPool, check: Callable[[RankContext], int]
) -> None:
    """Each check runs four cases on every rank against a reference built from all ranks'
    inputs, and returns how many it ran."""
    assert rank_pool.run(check) == [4] * rank_pool.world_size


def check_dtypes(ctx: RankContext, dtype_name: str) -> None:
    dtype = getattr(torch, dtype_name)
    env, world, me = env_of(ctx), ctx.world_size, ctx.rank
    b = [2] * world
    local = torch.full((sum(b), 2), float(me + 1), dtype=dtype)
    out = pooled_all_to_all(env, local, b, [2] * world).wait()
    assert out.dtype == dtype
    expected = torch.cat([torch.full((2, 2), float(r + 1), dtype=dtype) for r in range(world)], 1)
    assert_close(out, expected)
    summed = reduce_scatter_pooled(env, local, b).wait()
    assert_close(summed, torch.full((2, 2), float(world * (world + 1) // 2), dtype=dtype))


@pytest.mark.parametrize("dtype_name", ["float32", "float16", "bfloat16", "float64"])
def test_half_and_double_precision(rank_pool: RankPool, dtype_name: str) -> None:
    rank_pool.run(check_dtypes, dtype_name)


# -- argument checks (local, no communication) ------------------------------------------


def test_pooled_all_to_all_rejects_bad_shapes() -> None:
    env = ShardingEnv.from_local(1, 0)
    with pytest.raises(ValueError, match=r"local_embs has shape \(3, 2\), expected \(4, 2\)"):
        pooled_all_to_all(env, torch.zeros(3, 2), [4], [2])
    with pytest.raises(
        ValueError, match=r"batch_size_per_rank needs one entry per rank \(1\), got 2"
    ):
        pooled_all_to_all(env, torch.zeros(3, 2), [1, 2], [2])
    with pytest.raises(ValueError, match=r"batch_size_per_rank must be >= 0, got \[-1\]"):
        pooled_all_to_all(env, torch.zeros(0, 2), [-1], [2])
    with pytest.raises(TypeError, match=r"floating-point tensor, got torch\.int64"):
        pooled_all_to_all(env, torch.zeros(3, 2, dtype=torch.int64), [3], [2])


def test_reduce_scatter_and_all_gather_reject_bad_shapes() -> None:
    env = ShardingEnv.from_local(1, 0)
    with pytest.raises(
        ValueError,
        match=r"partial has shape \(3, 2\), expected \(sum of batch_size_per_rank \[4\] = 4, D\)",
    ):
        reduce_scatter_pooled(env, torch.zeros(3, 2), [4])
    with pytest.raises(ValueError, match=r"local has shape \(3,\)"):
        all_gather_pooled(env, torch.zeros(3), [3])
    with pytest.raises(ValueError, match=r"partial has shape \(5,\), expected \(4,\)"):
        variable_batch_reduce_scatter_pooled(env, torch.zeros(5), [[2]], [2])
    with pytest.raises(ValueError, match="embedding_dims has 2 features"):
        variable_batch_reduce_scatter_pooled(env, torch.zeros(4), [[2]], [2, 1])


def test_local_env_needs_process_group_for_more_ranks() -> None:
    env = ShardingEnv.from_local(2, 0)
    with pytest.raises(ValueError, match="has no process group"):
        pooled_all_to_all(env, torch.zeros(2, 1), [1, 1], [1, 1])


def constant_on_rank_zero(ctx: RankContext) -> list[float]:
    """Rank 0's input is a constant (it owns no trainable tables): backward must still run the
    reverse collective there, or the other ranks would wait for it forever."""
    env, world, me = env_of(ctx), ctx.world_size, ctx.rank
    b = [1] * world
    local = torch.full((world, 1), float(me + 1))
    if me > 0:
        local.requires_grad_(True)
    out = pooled_all_to_all(env, local, b, [1] * world).wait()
    assert out.requires_grad  # on every rank, whatever its own input
    (out * torch.arange(1.0, world + 1)).sum().backward()
    with torch.no_grad():
        assert not pooled_all_to_all(env, local, b, [1] * world).wait().requires_grad
    return [] if local.grad is None else local.grad.view(-1).tolist()


@pytest.mark.parametrize("rank_pool", [2, 3], indirect=True)
def test_rank_with_constant_input_joins_backward(rank_pool: RankPool) -> None:
    n = rank_pool.world_size
    results = rank_pool.run(constant_on_rank_zero, timeout_s=60)
    assert results[0] == []
    for r in range(1, n):
        assert results[r] == [float(r + 1)] * n  # d/d(local[s]) = weight of column r on rank s


def inplace_on_outputs(ctx: RankContext) -> list[float]:
    """Sharding code divides pooled sums in place (MEAN): outputs must allow it, with correct
    gradients, and must not alias the input (one rank included)."""
    env, world = env_of(ctx), ctx.world_size
    partial = torch.ones(world, 1, requires_grad=True)
    source = partial * 4
    out = reduce_scatter_pooled(env, source, [1] * world).wait()
    out.div_(2)  # sum over ranks of 4, halved
    assert_close(out, torch.full((1, 1), 2.0 * world))
    assert_close(source.detach(), torch.full((world, 1), 4.0))  # input untouched
    out.sum().backward()
    assert partial.grad is not None
    return partial.grad.view(-1).tolist()


@pytest.mark.parametrize("rank_pool", [1, 2], indirect=True)
def test_outputs_can_be_modified_in_place(rank_pool: RankPool) -> None:
    n = rank_pool.world_size
    assert rank_pool.run(inplace_on_outputs) == [[2.0] * n] * n  # d/dpartial = 4 / 2


def flat_matches_blocks(ctx: RankContext) -> int:
    """`pooled_all_to_all_flat` is `pooled_all_to_all` before its column concatenation:
    rank r's `(B, D_r)` block at offset `B * sum(D_<r)`, and the same gradient."""
    env, world, me = env_of(ctx), ctx.world_size, ctx.rank
    checked = 0
    for case in range(4):
        b, d = batches(world, case), dims(world, case)
        base = rand("emb", case, me, shape=(sum(b), d[me]))
        local_a = base.clone().requires_grad_(True)
        local_b = base.clone().requires_grad_(True)
        wide = pooled_all_to_all(env, local_a, b, d).wait()
        flat = pooled_all_to_all_flat(env, local_b, b, d).wait()
        assert flat.shape == (b[me] * sum(d),)
        blocks = torch.split(flat, [b[me] * x for x in d])
        rebuilt = torch.cat([x.view(b[me], w) for x, w in zip(blocks, d, strict=True)], 1)
        assert torch.equal(rebuilt, wide)
        weight = rand("grad", case, me, shape=tuple(wide.shape))
        (wide * weight).sum().backward()  # type: ignore[no-untyped-call]  # torch's stubs
        (rebuilt * weight).sum().backward()  # type: ignore[no-untyped-call]  # same
        assert local_a.grad is not None and local_b.grad is not None
        assert torch.equal(local_a.grad, local_b.grad)
        checked += 1
    return checked


@pytest.mark.parametrize("rank_pool", [1, 2, 3], indirect=True)
def test_flat_pooled_all_to_all_is_the_receive_buffer(rank_pool: RankPool) -> None:
    assert rank_pool.run(flat_matches_blocks) == [4] * rank_pool.world_size
