"""TorchRec's dist_data modules over real gloo ranks, against references every rank computes
locally from every rank's seeded inputs (the unsharded lookup, a naive gather or sum)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
import torch
import torch.distributed as dist

from shardrec_collectives.dist_data import (
    EmbeddingsAllToOne,
    EmbeddingsAllToOneReduce,
    KJTAllToAll,
    KJTOneToAll,
    PooledEmbeddingsAllGather,
    PooledEmbeddingsAllToAll,
    PooledEmbeddingsReduceScatter,
    SeqEmbeddingsAllToOne,
    SequenceEmbeddingsAllToAll,
)
from shardrec_collectives.dist_data_vb import (
    VariableBatchPooledEmbeddingsAllToAll,
    VariableBatchPooledEmbeddingsReduceScatter,
)
from shardrec_collectives.kjt_all_to_all import KJTAllToAllAwaitable
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import RankContext, assert_close, random_lengths, seeded_generator

WORLDS = [2, 3]
KEYS = ["a", "b", "c", "d", "e"]


def splits_of(world: int, case: int) -> list[int]:
    """Keys per rank summing to len(KEYS), with an empty rank in case 1."""
    if case == 1:
        return [len(KEYS)] + [0] * (world - 1)
    g = seeded_generator("splits", world, case)
    cuts = sorted(torch.randint(0, len(KEYS) + 1, (world - 1,), generator=g).tolist())
    bounds = [0, *cuts, len(KEYS)]
    return [bounds[i + 1] - bounds[i] for i in range(world)]


def batch_of(world: int, case: int, rank: int) -> int:
    return (
        2
        if case == 0
        else int(torch.randint(0, 4, (1,), generator=seeded_generator("b", world, case, rank)))
    )


def input_kjt(world: int, case: int, rank: int, weighted: bool = False) -> KeyedJaggedTensor:
    batch = batch_of(world, case, rank)
    g = seeded_generator("kjt", world, case, rank)
    lengths = random_lengths(len(KEYS) * batch, 3, g)
    values = torch.randint(0, 10, (int(lengths.sum()),), generator=g)
    weights = torch.rand(values.shape, generator=g) if weighted else None
    return KeyedJaggedTensor(KEYS, values, weights=weights, lengths=lengths)


def env_pg(ctx: RankContext) -> dist.ProcessGroup:
    assert ctx.pg is not None
    return ctx.pg


def check_kjt_all_to_all(ctx: RankContext) -> int:
    world, me = ctx.world_size, ctx.rank
    for case in range(3):
        splits = splits_of(world, case)
        a2a = KJTAllToAll(env_pg(ctx), splits)
        first = a2a(input_kjt(world, case, me, weighted=case == 2))
        second = first.wait()
        assert isinstance(second, KJTAllToAllAwaitable)
        out = second.wait()
        start = sum(splits[:me])
        mine = KEYS[start : start + splits[me]]
        assert out.keys() == mine
        inputs = [input_kjt(world, case, r, weighted=case == 2) for r in range(world)]
        assert out.stride() == sum(k.stride() for k in inputs)
        for key in mine:
            parts = [k[key] for k in inputs]
            assert torch.equal(out[key].lengths(), torch.cat([p.lengths() for p in parts]))
            assert torch.equal(out[key].values(), torch.cat([p.values() for p in parts]))
            if case == 2:
                assert_close(out[key].weights(), torch.cat([p.weights() for p in parts]))
    return 3


@pytest.mark.parametrize("world", WORLDS)
def test_kjt_all_to_all_module(pool_factory, world: int) -> None:  # type: ignore[no-untyped-def]
    assert pool_factory(world).run(check_kjt_all_to_all) == [3] * world


def table(key: str) -> torch.Tensor:
    return torch.randn(10, 4, generator=seeded_generator("table", key), dtype=torch.float64).float()


def check_sequence_round_trip(ctx: RankContext) -> int:
    """Ids out with KJTAllToAll, looked up where they landed, embeddings back: equals the
    unsharded lookup of this rank's own ids, in its own order; gradients reach the owners."""
    world, me = ctx.world_size, ctx.rank
    for case in range(3):
        splits = splits_of(world, case)
        kjt = input_kjt(world, case, me)
        received = KJTAllToAll(env_pg(ctx), splits)(kjt).wait()
        out_kjt = received.wait()
        landed = list(out_kjt.keys())
        weights = {k: table(k).requires_grad_(True) for k in landed}
        rows = [weights[k][out_kjt[k].values()] for k in landed]
        local = torch.cat(rows) if rows else torch.zeros(0, 4)
        layout = received.layout
        seq = SequenceEmbeddingsAllToAll(env_pg(ctx), splits)
        batches = [batch_of(world, case, r) for r in range(world)]
        perm = None
        if case == 2:  # a permutation callback, as row-wise bucketizing needs
            perm = torch.randperm(kjt.values().numel(), generator=seeded_generator("p", me))
        lengths = out_kjt.lengths()
        if case == 0 and landed:  # TorchRec passes them as (F_rank, sum_s B_s)
            lengths = lengths.view(len(landed), -1)
        got = seq(
            local,
            lengths,
            list(layout.sent_values_per_rank),  # the KJT all-to-all's input splits
            layout.recv_values_per_rank,  # and its output splits
            unbucketize_permute_tensor=perm,
            batch_size_per_rank=batches,
        ).wait()
        expected = torch.cat(
            [table(k)[kjt[k].values()] for k in KEYS]
            if kjt.values().numel()
            else [torch.zeros(0, 4)]
        )
        if perm is not None:
            expected = expected[perm]
        assert_close(got, expected)
        # Every rank sums its output; a table's gradient is the count of each id over ranks.
        got.sum().backward()
        for k, w in weights.items():
            ids = torch.cat([input_kjt(world, case, r)[k].values() for r in range(world)])
            counts = torch.bincount(ids, minlength=10).float()
            assert w.grad is not None
            assert_close(w.grad, counts[:, None].expand(10, 4))
    return 3


@pytest.mark.parametrize("world", WORLDS)
def test_sequence_embeddings_all_to_all(pool_factory, world: int) -> None:  # type: ignore[no-untyped-def]
    assert pool_factory(world).run(check_sequence_round_trip) == [3] * world


def rand(*parts: object, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.randn(shape, generator=seeded_generator(*parts), dtype=torch.float64).float()


def check_pooled(ctx: RankContext) -> int:
    world, me = ctx.world_size, ctx.rank
    pg = env_pg(ctx)
    dims = [1 + (r * 2) % 3 for r in range(world)]
    # even batches (inferred) and uneven ones (given), with a callback from the constructor
    for batches in ([2] * world, [(r + 1) % 3 for r in range(world)]):
        local = rand("emb", me, shape=(sum(batches), dims[me])).requires_grad_(True)
        a2a = PooledEmbeddingsAllToAll(pg, dims, callbacks=[lambda t: t * 2])
        given = None if len(set(batches)) == 1 else batches
        out = a2a(local, given).wait()
        start = sum(batches[:me])
        expected = torch.cat(
            [
                rand("emb", r, shape=(sum(batches), dims[r]))[start : start + batches[me]]
                for r in range(world)
            ],
            dim=1,
        )
        assert_close(out, expected * 2)
        out.sum().backward()
        assert local.grad is not None
        assert_close(local.grad, torch.full_like(local, 2.0))
        # reduce-scatter of a (sum B, D) partial sum
        partial = rand("part", me, shape=(sum(batches), 3))
        summed = PooledEmbeddingsReduceScatter(pg)(partial, given).wait()
        ref = sum(rand("part", r, shape=(sum(batches), 3)) for r in range(world))
        assert isinstance(ref, torch.Tensor)
        assert_close(summed, ref[start : start + batches[me]])
    gathered = PooledEmbeddingsAllGather(pg)(rand("g", me, shape=(2, 3))).wait()
    assert_close(gathered, torch.cat([rand("g", r, shape=(2, 3)) for r in range(world)]))
    return 1


@pytest.mark.parametrize("world", WORLDS)
def test_pooled_modules(pool_factory, world: int) -> None:  # type: ignore[no-untyped-def]
    assert pool_factory(world).run(check_pooled) == [1] * world


def check_errors(ctx: RankContext) -> int:
    """Bad constructor and call arguments raise before any communication."""
    pg = env_pg(ctx)
    world = ctx.world_size
    with pytest.raises(ValueError, match="one per rank"):
        KJTAllToAll(pg, [1] * (world + 1))
    with pytest.raises(ValueError, match="stagger=2"):
        KJTAllToAll(pg, [1] * world, stagger=2)
    with pytest.raises(ValueError, match="counts must agree"):
        KJTAllToAll(pg, [1] * world)(input_kjt(world, 0, ctx.rank))
    # The pooled all-to-alls, the reduce-scatters and the sequence all-to-all apply codecs
    # (test_qcomm.py, test_qcomm_rs_seq.py, test_qcomm_vb.py); they refuse what is not one.
    applying_codecs: list[tuple[type, Callable[[], object]]] = [
        (PooledEmbeddingsAllToAll, lambda: PooledEmbeddingsAllToAll(pg, [1] * world, codecs=1)),
        (PooledEmbeddingsReduceScatter, lambda: PooledEmbeddingsReduceScatter(pg, codecs=1)),
        (SequenceEmbeddingsAllToAll, lambda: SequenceEmbeddingsAllToAll(pg, [1] * world, codecs=1)),
        (
            VariableBatchPooledEmbeddingsReduceScatter,
            lambda: VariableBatchPooledEmbeddingsReduceScatter(pg, codecs=1),
        ),
        (
            VariableBatchPooledEmbeddingsAllToAll,
            lambda: VariableBatchPooledEmbeddingsAllToAll(pg, [[1]] * world, codecs=1),
        ),
    ]
    for cls, make in applying_codecs:
        with pytest.raises(TypeError, match=rf"^{cls.__name__}\(codecs=1\): expected Quan"):
            make()
    refusing_codecs: list[tuple[type, Callable[[], object]]] = [
        (PooledEmbeddingsAllGather, lambda: PooledEmbeddingsAllGather(pg, codecs=1)),
    ]
    for cls, make in refusing_codecs:
        with pytest.raises(ValueError, match=rf"^{cls.__name__}\(codecs=1\):.*pass codecs=None"):
            make()
    with pytest.raises(ValueError, match="cannot split evenly"):
        PooledEmbeddingsReduceScatter(pg)(torch.zeros(world * 2 + 1, 2))
    seq = SequenceEmbeddingsAllToAll(pg, [1] * world)
    lengths = torch.ones(world * 2, dtype=torch.long)
    with pytest.raises(ValueError, match="disagrees"):
        seq(torch.zeros(world * 2, 3), lengths, [2] * world, [1] * world)
    with pytest.raises(ValueError, match="bags"):
        seq(
            torch.zeros(world * 2, 3),
            lengths,
            [2] * world,
            [2] * world,
            batch_size_per_rank=[3] * world,
        )
    return 1


def test_errors(pool_factory) -> None:  # type: ignore[no-untyped-def]
    assert pool_factory(2).run(check_errors) == [1, 1]


def test_kjt_one_to_all_splits_keys() -> None:
    kjt = input_kjt(2, 0, 0)
    pieces = KJTOneToAll([2, 0, 3], 3, torch.device("cpu"))(kjt)
    assert [p.keys() for p in pieces] == [["a", "b"], [], ["c", "d", "e"]]
    for key in KEYS:
        piece = next(p for p in pieces if key in list(p.keys()))
        assert torch.equal(piece[key].values(), kjt[key].values())
    with pytest.raises(ValueError, match="world_size"):
        KJTOneToAll([1, 1], 3)
    with pytest.raises(ValueError, match="sum to"):
        KJTOneToAll([1, 1], 2)(kjt)


def test_all_to_one_merges() -> None:
    parts = [rand("m", i, shape=(2, i + 1)) for i in range(3)]
    cpu = torch.device("cpu")
    assert torch.equal(EmbeddingsAllToOne(cpu, 3, cat_dim=1)(parts), torch.cat(parts, 1))
    same = [rand("s", i, shape=(2, 3)) for i in range(3)]
    expected = same[0] + same[1] + same[2]
    assert_close(EmbeddingsAllToOneReduce(cpu, 3)(same), expected)
    assert all(
        torch.equal(a, b)
        for a, b in itertools.zip_longest(SeqEmbeddingsAllToOne(cpu, 3)(same), same)
    )
    with pytest.raises(ValueError, match="world_size"):
        EmbeddingsAllToOneReduce(cpu, 2)(same)
