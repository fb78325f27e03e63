"""kjt_all_to_all of a KeySelection against kjt_all_to_all of permuted KJTs, bit for bit.

Every rank builds its own input from a seed and the shared key selection, runs both exchanges
and compares what it received: keys, lengths, values, weights, strides, layout and the weights'
gradient.
"""

from __future__ import annotations

import pytest
import torch

from shardrec_collectives import (
    KeySelection,
    PeerError,
    ShardingEnv,
    kjt_all_to_all,
)
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import RankContext, RankPool, random_lengths, seeded_generator

NAMES = [f"f{i}" for i in range(6)]


def selections(world: int, seed: int) -> list[list[list[int]]]:
    """Key positions per destination, the same on every rank: random subsets in random order
    (a key may go to several ranks), plus the named edges: all keys to rank 0, none anywhere."""
    g = seeded_generator("select", world, seed)
    out: list[list[list[int]]] = []
    for _ in range(4):
        picks = []
        for _ in range(world):
            n = int(torch.randint(0, 4, (1,), generator=g))
            picks.append(torch.randperm(len(NAMES), generator=g)[:n].tolist())
        out.append(picks)
    out.append([list(range(len(NAMES)))] + [[] for _ in range(world - 1)])
    out.append([[] for _ in range(world)])
    return out


def local_input(
    rank: int, seed: int, *, weighted: bool, lengths_dtype: torch.dtype, batch: int | None = None
) -> KeyedJaggedTensor:
    g = seeded_generator("input", rank, seed)
    stride = int(torch.randint(0, 4, (1,), generator=g)) if batch is None else batch
    lengths = random_lengths(len(NAMES) * stride, 3, g)
    n = int(lengths.sum())
    values = torch.randint(0, 1 << 40, (n,), generator=g)
    weights = torch.rand(n, generator=g, dtype=torch.float64) if weighted else None
    return KeyedJaggedTensor(NAMES, values, weights, lengths.to(lengths_dtype), stride=stride)


def _permuted(features: KeyedJaggedTensor, picked: list[int]) -> KeyedJaggedTensor:
    if not picked:
        w = features.weights_or_none()
        return KeyedJaggedTensor(
            [],
            features.values().new_empty(0),
            weights=None if w is None else w.new_empty(0),
            lengths=features.lengths().new_empty(0),
            stride=features.stride(),
        )
    return features.permute(picked)


def _same(a: KeyedJaggedTensor, b: KeyedJaggedTensor) -> None:
    assert a.keys() == b.keys()
    assert a.stride() == b.stride()
    assert a.length_per_key() == b.length_per_key()
    assert a.lengths().dtype == b.lengths().dtype
    assert torch.equal(a.lengths(), b.lengths())
    assert a.values().dtype == b.values().dtype
    assert torch.equal(a.values(), b.values())
    wa, wb = a.weights_or_none(), b.weights_or_none()
    assert (wa is None) == (wb is None)
    if wa is not None and wb is not None:
        assert torch.equal(wa, wb)


def check_against_permute(ctx: RankContext, seed: int) -> int:
    env = ShardingEnv.from_process_group(ctx.pg)
    checked = 0
    for i, keys_per_rank in enumerate(selections(ctx.world_size, seed)):
        for weighted, lengths_dtype in ((False, torch.int64), (True, torch.int32)):
            kjt = local_input(
                ctx.rank, seed * 10 + i, weighted=weighted, lengths_dtype=lengths_dtype
            )
            want_pending = kjt_all_to_all(env, [_permuted(kjt, k) for k in keys_per_rank])
            got_pending = kjt_all_to_all(
                env, KeySelection(features=kjt, keys_per_rank=keys_per_rank)
            )
            assert got_pending.layout == want_pending.layout
            _same(got_pending.wait(), want_pending.wait())
            checked += 1
    return checked


@pytest.mark.parametrize("rank_pool", [1, 2, 3], indirect=True)
def test_select_matches_kjt_all_to_all_of_permuted(rank_pool: RankPool) -> None:
    assert rank_pool.run(check_against_permute, 0) == [12] * rank_pool.world_size


def weight_grads(ctx: RankContext) -> bool:
    env = ShardingEnv.from_process_group(ctx.pg)
    kjt = local_input(ctx.rank, 7, weighted=True, lengths_dtype=torch.int64, batch=3)
    keys_per_rank = [[0, 2, 5], [1, 2]][: ctx.world_size]
    grads = []
    for use_select in (False, True):
        w = kjt.weights().detach().clone().requires_grad_(True)
        src = KeyedJaggedTensor(NAMES, kjt.values(), w, kjt.lengths(), stride=kjt.stride())
        if use_select:
            got = kjt_all_to_all(
                env, KeySelection(features=src, keys_per_rank=keys_per_rank)
            ).wait()
        else:
            got = kjt_all_to_all(env, [_permuted(src, k) for k in keys_per_rank]).wait()
        # d/dw of sum(w * id): the id each weight travelled with, summed over its copies.
        (got.weights() * got.values().double()).sum().backward()
        assert w.grad is not None
        grads.append(w.grad)
    return torch.equal(grads[0], grads[1])


@pytest.mark.parametrize("rank_pool", [1, 2], indirect=True)
def test_weights_gradient_matches(rank_pool: RankPool) -> None:
    assert rank_pool.run(weight_grads) == [True] * rank_pool.world_size


def mixed_weighting(ctx: RankContext) -> list[float]:
    """Rank 0's input is weighted, rank 1's is not: rank 1 sends weights of 1.0."""
    env = ShardingEnv.from_process_group(ctx.pg)
    weights = torch.tensor([0.5, 0.25]) if ctx.rank == 0 else None
    kjt = KeyedJaggedTensor(
        ["a", "b"], torch.tensor([1, 2]), weights, torch.tensor([1, 1]), stride=1
    )
    got = kjt_all_to_all(env, KeySelection(features=kjt, keys_per_rank=[[1], [0]])).wait()
    w = got.weights_or_none()
    assert w is not None
    return w.tolist()


def test_weights_default_to_one_for_unweighted_ranks(rank_pool: RankPool) -> None:
    assert rank_pool.run(mixed_weighting) == [[0.25, 1.0], [0.5, 1.0]]


def variable_batch(ctx: RankContext) -> bool:
    """A variable-batch input takes the permute path and still matches it."""
    env = ShardingEnv.from_process_group(ctx.pg)
    kjt = KeyedJaggedTensor(
        ["a", "b"],
        torch.arange(5) + 10 * ctx.rank,
        lengths=torch.tensor([2, 1, 2]),
        stride_per_key_per_rank=[[2], [1]],
    )
    keys_per_rank = [[1], [0, 1]]
    got = kjt_all_to_all(env, KeySelection(features=kjt, keys_per_rank=keys_per_rank)).wait()
    want = kjt_all_to_all(env, [kjt.permute(k) for k in keys_per_rank]).wait()
    assert got.variable_stride_per_key()
    assert got.stride_per_key_per_rank() == want.stride_per_key_per_rank()
    return torch.equal(got.values(), want.values()) and torch.equal(got.lengths(), want.lengths())


def test_variable_batch_input(rank_pool: RankPool) -> None:
    assert rank_pool.run(variable_batch) == [True, True]


def error_on(ctx: RankContext, bad_rank: int) -> str:
    env = ShardingEnv.from_process_group(ctx.pg)
    kjt = KeyedJaggedTensor(["a", "b"], torch.tensor([1, 2]), lengths=torch.tensor([1, 1]))
    error = ValueError("feature 'b' id 77 is out of range") if ctx.rank == bad_rank else None
    kjt_all_to_all(env, KeySelection(features=kjt, keys_per_rank=[[0], [1]]), error=error).wait()
    return "no error"


def test_error_reaches_every_rank(rank_pool: RankPool) -> None:
    outcomes = rank_pool.run_outcomes(error_on, 0)
    assert isinstance(outcomes[0], ValueError) and "id 77" in str(outcomes[0])
    assert isinstance(outcomes[1], PeerError) and outcomes[1].ranks == [0]
    assert rank_pool.run(error_on, -1) == ["no error", "no error"]


def test_bad_selection_is_rejected_locally() -> None:
    env = ShardingEnv.from_local(1, 0)
    kjt = KeyedJaggedTensor(["a", "b"], torch.tensor([1, 2]), lengths=torch.tensor([1, 1]))
    with pytest.raises(ValueError, match=r"one key list per rank \(1\), got 2"):
        kjt_all_to_all(env, KeySelection(features=kjt, keys_per_rank=[[0], [1]]))
    with pytest.raises(IndexError, match=r"keys_per_rank\[0\] names key position 2"):
        KeySelection(features=kjt, keys_per_rank=[[0, 2]])
    with pytest.raises(IndexError, match=r"key position -1"):
        KeySelection(features=kjt, keys_per_rank=[[-1]])
    with pytest.raises(ValueError, match=r"keys_per_rank\[0\] names key position 1 twice"):
        KeySelection(features=kjt, keys_per_rank=[[1, 0, 1]])


def test_world_of_one_is_the_permuted_input() -> None:
    env = ShardingEnv.from_local(1, 0)
    kjt = KeyedJaggedTensor(
        ["a", "b", "c"], torch.tensor([1, 2, 3, 4]), lengths=torch.tensor([1, 0, 2, 0, 1, 0])
    )
    got = kjt_all_to_all(env, KeySelection(features=kjt, keys_per_rank=[[2, 0]])).wait()
    _same(got, kjt.permute([2, 0]))


def wire_int32(ctx: RankContext, seed: int) -> int:
    """`wire_dtype=torch.int32`: the same ids and lengths arrive, as int32 (and lengths in
    their own dtype), with the same layout and weights."""
    env = ShardingEnv.from_process_group(ctx.pg)
    checked = 0
    for i, keys_per_rank in enumerate(selections(ctx.world_size, seed)):
        for weighted, lengths_dtype in ((False, torch.int64), (True, torch.int32)):
            kjt = local_input(
                ctx.rank, seed * 10 + i, weighted=weighted, lengths_dtype=lengths_dtype
            )
            small = KeyedJaggedTensor(
                NAMES,
                kjt.values() % (1 << 31),
                kjt.weights_or_none(),
                kjt.lengths(),
                stride=kjt.stride(),
            )
            want_pending = kjt_all_to_all(
                env, KeySelection(features=small, keys_per_rank=keys_per_rank)
            )
            got_pending = kjt_all_to_all(
                env,
                KeySelection(features=small, keys_per_rank=keys_per_rank, wire_dtype=torch.int32),
            )
            assert got_pending.layout == want_pending.layout
            got, want = got_pending.wait(), want_pending.wait()
            assert got.values().dtype == torch.int32
            assert got.lengths().dtype == lengths_dtype
            _same(
                KeyedJaggedTensor(
                    got.keys(),
                    got.values().long(),
                    got.weights_or_none(),
                    got.lengths(),
                    stride=got.stride(),
                ),
                want,
            )
            checked += 1
    return checked


@pytest.mark.parametrize("rank_pool", [1, 2], indirect=True)
def test_int32_wire_dtype_carries_the_same_ids(rank_pool: RankPool) -> None:
    assert rank_pool.run(wire_int32, 1) == [12] * rank_pool.world_size


def test_wire_dtype_must_be_an_integer_dtype() -> None:
    kjt = KeyedJaggedTensor(["a"], torch.tensor([1]), lengths=torch.tensor([1]))
    with pytest.raises(TypeError, match=r"wire_dtype must be an integer dtype, got torch\.float32"):
        KeySelection(features=kjt, keys_per_rank=[[0]], wire_dtype=torch.float32)
