"""Quantized pooled reduce-scatter and sequence all-to-all (`qcomm.linked_reduce_scatter`,
`reduce_scatter_pooled(codecs=)`, `sequence_all_to_all_by_counts(codecs=)`) on 2 gloo ranks.

The reference of each is the exact exchange with every sent chunk passed through the codec on
its own (`through`, the codec applied locally): the reduce-scatter's output is the float32
sum, in rank order, of the decoded chunks; its gradient is every rank's gradient chunk
passed through the backward codec; the sequence all-to-all's output is each source's rows
for this rank passed through the forward codec as one segment, its gradient each
destination's gradient rows through the backward codec. Fixed, variable batch (per feature)
and the TorchRec module forms; a no-op registry entry is bitwise the exact exchange.
"""

from __future__ import annotations

import torch
from _qcomm_cases import PRECISIONS, through

from shardrec_collectives import (
    ShardingEnv,
    reduce_scatter_pooled,
    sequence_all_to_all_by_counts,
    variable_batch_reduce_scatter_pooled,
)
from shardrec_collectives.dist_data import (
    PooledEmbeddingsReduceScatter,
    SequenceEmbeddingsAllToAll,
)
from shardrec_collectives.dist_data_vb import VariableBatchPooledEmbeddingsReduceScatter
from shardrec_collectives.qcomm import (
    QCommsConfig,
    get_qcomm_codecs,
)
from shardrec_testing import RankContext, RankPool, seeded_generator


def rank_sum(parts: list[torch.Tensor]) -> torch.Tensor:
    out = parts[0].clone()
    for p in parts[1:]:
        out.add_(p)
    return out


def check_reduce_scatter(ctx: RankContext) -> int:
    env, world, me = ShardingEnv.from_process_group(ctx.pg), ctx.world_size, ctx.rank
    cases = 0
    for k, config in enumerate(PRECISIONS):
        codecs = get_qcomm_codecs(config)
        for case, (b, d) in enumerate([([3, 5], 6), ([0, 4], 3), ([2, 2], 33), ([1, 0], 5)]):

            def partial(
                r: int, b: list[int] = b, d: int = d, c: int = case, k: int = k
            ) -> torch.Tensor:
                return torch.randn(sum(b), d, generator=seeded_generator("rs", k, c, r)) * 3

            local = partial(me).requires_grad_(True)
            if case % 2:
                out = PooledEmbeddingsReduceScatter(ctx.pg, codecs=codecs)(local, b).wait()
            else:
                out = reduce_scatter_pooled(env, local, b, codecs).wait()
            start = sum(b[:me])
            expected = rank_sum(
                [through(codecs.forward, partial(r)[start : start + b[me]]) for r in range(world)]
            )
            torch.testing.assert_close(out, expected, rtol=0, atol=0)
            grads = [
                torch.randn(b[s], d, generator=seeded_generator("rsg", k, case, s))
                for s in range(world)
            ]
            (out * grads[me]).sum().backward()
            expected_grad = torch.cat([through(codecs.backward, g) for g in grads])
            assert local.grad is not None
            torch.testing.assert_close(local.grad, expected_grad, rtol=0, atol=0)
            cases += 1
    # a registry entry that quantizes nothing is the exact exchange, bit for bit
    local = torch.randn(5, 3, generator=seeded_generator("rs-exact", me))
    exact = reduce_scatter_pooled(env, local, [2, 3]).wait()
    noop = reduce_scatter_pooled(env, local, [2, 3], get_qcomm_codecs(QCommsConfig())).wait()
    assert torch.equal(exact, noop)
    return cases


def check_variable_batch_reduce_scatter(ctx: RankContext) -> int:
    env, world, me = ShardingEnv.from_process_group(ctx.pg), ctx.world_size, ctx.rank
    batches = [[2, 3], [0, 4]]  # B[f][s]
    dims = [5, 2]
    for k, config in enumerate(PRECISIONS):
        codecs = get_qcomm_codecs(config)

        def segs(r: int, k: int = k) -> list[list[torch.Tensor]]:
            """Rank r's partial rows, `[f][s]` blocks of `(B[f][s], D_f)`."""
            g = seeded_generator("vb", k, r)
            return [
                [torch.randn(n, d, generator=g) for n in row]
                for row, d in zip(batches, dims, strict=True)
            ]

        local = torch.cat([x.reshape(-1) for row in segs(me) for x in row]).requires_grad_(True)
        if k % 2:
            module = VariableBatchPooledEmbeddingsReduceScatter(ctx.pg, codecs=codecs)
            per_rank_feature = [[row[s] for row in batches] for s in range(world)]
            out = module(local, per_rank_feature, dims).wait()
        else:
            out = variable_batch_reduce_scatter_pooled(env, local, batches, dims, codecs).wait()

        def chunk(r: int, dest: int) -> torch.Tensor:
            return torch.cat([row[dest].reshape(-1) for row in segs(r)])

        expected = rank_sum([through(codecs.forward, chunk(r, me)) for r in range(world)])
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
        sizes = [[n * d for n in row] for row, d in zip(batches, dims, strict=True)]
        grads = [
            torch.randn(sum(row[s] for row in sizes), generator=seeded_generator("vbg", k, s))
            for s in range(world)
        ]
        (out * grads[me]).sum().backward()
        decoded = [
            list(torch.split(through(codecs.backward, g), [row[s] for row in sizes]))
            for s, g in enumerate(grads)
        ]
        expected_grad = torch.cat([decoded[s][f] for f in range(len(dims)) for s in range(world)])
        assert local.grad is not None
        torch.testing.assert_close(local.grad, expected_grad, rtol=0, atol=0)
    return len(PRECISIONS)


def check_sequence(ctx: RankContext) -> int:
    env, world, me = ShardingEnv.from_process_group(ctx.pg), ctx.world_size, ctx.rank
    cases = 0
    for k, config in enumerate(PRECISIONS):
        codecs = get_qcomm_codecs(config)
        for case, d in enumerate([4, 33, 1]):
            # recv[r][f][s]: ids of rank r's local key f that came from rank s
            recv = [
                [[(r + 2 * f + s + case) % 4 for s in range(world)] for f in range(2)]
                for r in range(world)
            ]

            def rows(
                r: int, d: int = d, c: int = case, k: int = k, recv: list[list[list[int]]] = recv
            ) -> list[list[torch.Tensor]]:
                g = seeded_generator("seq", k, c, r)
                return [[torch.randn(n, d, generator=g) * 2 for n in row] for row in recv[r]]

            sent = [sum(recv[s][f][me] for f in range(2)) for s in range(world)]
            local = torch.cat([x for row in rows(me) for x in row]).requires_grad_(True)
            out = sequence_all_to_all_by_counts(env, local, recv[me], sent, codecs).wait()
            expected = torch.cat(
                [
                    through(codecs.forward, torch.cat([row[me] for row in rows(s)]))
                    for s in range(world)
                ]
            )
            torch.testing.assert_close(out, expected, rtol=0, atol=0)
            sent_by = [
                [sum(recv[s][f][r] for f in range(2)) for s in range(world)] for r in range(world)
            ]
            grads = [
                torch.randn(sum(sent_by[r]), d, generator=seeded_generator("seqg", k, case, r))
                for r in range(world)
            ]
            (out * grads[me]).sum().backward()
            # rank r's gradient rows for me, decoded, split by my features
            back = []
            for r in range(world):
                start = sum(sent_by[r][:me])
                block = through(codecs.backward, grads[r][start : start + sent_by[r][me]])
                back.append(torch.split(block, [recv[me][f][r] for f in range(2)]))
            expected_grad = torch.cat([back[s][f] for f in range(2) for s in range(world)])
            assert local.grad is not None
            torch.testing.assert_close(local.grad, expected_grad, rtol=0, atol=0)
            cases += 1
    # TorchRec's module with codecs is the function; a no-op entry is the exact exchange
    batches = [2, 3]
    codecs = get_qcomm_codecs(PRECISIONS[0])
    local = torch.randn(sum(batches), 6, generator=seeded_generator("seqm", me))
    lengths = torch.ones(sum(batches), dtype=torch.long)
    module = SequenceEmbeddingsAllToAll(ctx.pg, [1] * world, codecs=codecs)
    got = module(local, lengths, [batches[me]] * world, batches, batch_size_per_rank=batches)
    direct = sequence_all_to_all_by_counts(env, local, [batches], [batches[me]] * world, codecs)
    assert torch.equal(got.wait(), direct.wait())
    exact = sequence_all_to_all_by_counts(env, local, [batches], [batches[me]] * world).wait()
    noop = sequence_all_to_all_by_counts(
        env, local, [batches], [batches[me]] * world, get_qcomm_codecs(QCommsConfig())
    ).wait()
    assert torch.equal(exact, noop)
    return cases


def check_all(ctx: RankContext) -> list[int]:
    return [
        check_reduce_scatter(ctx),
        check_variable_batch_reduce_scatter(ctx),
        check_sequence(ctx),
    ]


def test_quantized_reduce_scatter_and_sequence_on_two_ranks(pool_factory) -> None:  # type: ignore[no-untyped-def]
    pool: RankPool = pool_factory(2)
    n = len(PRECISIONS)
    assert pool.run(check_all) == [[n * 4, n, n * 3]] * 2
