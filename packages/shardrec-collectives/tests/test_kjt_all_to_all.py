"""kjt_all_to_all and sequence_all_to_all over real gloo ranks, against a local reference.

Every rank builds every rank's inputs from the same seeds, so each rank computes the expected
result of the whole exchange by itself and checks its own share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist

from shardrec_collectives import (
    ExchangeCapacity,
    KJTAllToAllAwaitable,
    KJTAllToAllLayout,
    PeerError,
    ShardingEnv,
    kjt_all_to_all,
    sequence_all_to_all,
)
from shardrec_collectives._kjt_wire import new_capacity
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import RankContext, RankPool, assert_close, random_lengths, seeded_generator

WORLD_SIZES = [1, 2, 3, 4]


@dataclasses.dataclass(frozen=True)
class Case:
    seed: int
    keys_per_rank: tuple[tuple[str, ...], ...]  # keys sent to (owned by) each rank
    batch_per_rank: tuple[int, ...]
    weighted: bool
    variable_batch: bool


def make_cases(world: int, seed: int) -> list[Case]:
    g = seeded_generator("cases", world, seed)
    cases = []
    names = [f"f{i}" for i in range(7)]
    for i in range(6):
        # uneven: some ranks own several features, some none (i == 1: everything on rank 0)
        owner = torch.randint(0, world, (len(names),), generator=g).tolist()
        if i == 1:
            owner = [0] * len(names)
        keys = tuple(
            tuple(n for n, o in zip(names, owner, strict=True) if o == r) for r in range(world)
        )
        batch = tuple(int(b) for b in torch.randint(0, 4, (world,), generator=g))
        if i == 2:
            batch = (0,) * world  # empty batch everywhere
        cases.append(Case(seed * 100 + i, keys, batch, weighted=i % 2 == 0, variable_batch=i >= 3))
    return cases


def sent_kjt(case: Case, src: int, dst: int) -> KeyedJaggedTensor:
    """What rank `src` sends rank `dst` in `case` (deterministic from the seed)."""
    g = seeded_generator("kjt", case.seed, src, dst)
    keys = list(case.keys_per_rank[dst])
    if case.variable_batch:
        strides = [int(torch.randint(0, 4, (1,), generator=g)) for _ in keys]
    else:
        strides = [case.batch_per_rank[src]] * len(keys)
    lengths = random_lengths(sum(strides), 3, g)
    n = int(lengths.sum())
    values = torch.randint(0, 1000, (n,), generator=g)
    weights = torch.rand(n, generator=g) if case.weighted else None
    if case.variable_batch:
        return KeyedJaggedTensor(
            keys, values, weights, lengths, stride_per_key_per_rank=[[s] for s in strides]
        )
    return KeyedJaggedTensor(keys, values, weights, lengths, stride=case.batch_per_rank[src])


def expected_received(
    case: Case, world: int, dst: int
) -> dict[str, list[tuple[list[int], list[int], list[float]]]]:
    out: dict[str, list[tuple[list[int], list[int], list[float]]]] = {}
    for key in case.keys_per_rank[dst]:
        out[key] = []
        for src in range(world):
            jt = sent_kjt(case, src, dst)[key]
            w = jt.weights_or_none()
            out[key].append(
                (
                    jt.lengths().tolist(),
                    jt.values().tolist(),
                    [] if w is None else w.tolist(),
                )
            )
    return out


def exchanges(
    ctx: RankContext, seed: int, capacity: ExchangeCapacity | None = None
) -> Iterator[tuple[ShardingEnv, Case, list[KeyedJaggedTensor], KJTAllToAllAwaitable]]:
    """Each case of `make_cases`: this rank's KJTs for every rank, and their all-to-all."""
    env = ShardingEnv.from_process_group(ctx.pg)
    for case in make_cases(ctx.world_size, seed):
        per_rank = [sent_kjt(case, ctx.rank, d) for d in range(ctx.world_size)]
        yield env, case, per_rank, kjt_all_to_all(env, per_rank, capacity=capacity)


def check_kjt_cases(ctx: RankContext, seed: int, capacity: ExchangeCapacity | None = None) -> int:
    checked = 0
    for _, case, per_rank, awaitable in exchanges(ctx, seed, capacity):
        check_received(ctx, case, per_rank, awaitable)
        checked += 1
    return checked


def check_received(
    ctx: RankContext, case: Case, per_rank: list[KeyedJaggedTensor], awaitable: KJTAllToAllAwaitable
) -> None:
    """The awaitable's layout and KJT against the reference of `case`."""
    world = ctx.world_size
    layout = awaitable.layout
    got = awaitable.wait()
    expected = expected_received(case, world, ctx.rank)
    assert got.keys() == list(case.keys_per_rank[ctx.rank])
    assert (got.weights_or_none() is not None) == case.weighted
    strides = [
        [sent_kjt(case, s, ctx.rank).stride_per_key()[f] for s in range(world)]
        for f in range(len(got.keys()))
    ]
    if case.variable_batch:
        assert got.variable_stride_per_key()
        assert got.stride_per_key_per_rank() == strides
    else:
        assert not got.variable_stride_per_key()
        assert got.stride() == sum(case.batch_per_rank)
    assert [list(r) for r in layout.recv_stride_per_key_per_rank] == strides
    assert list(layout.sent_values_per_rank) == [k.values().numel() for k in per_rank]
    for key, parts in expected.items():
        jt = got[key]
        assert jt.lengths().tolist() == [x for p in parts for x in p[0]], (case, key)
        assert jt.values().tolist() == [x for p in parts for x in p[1]], (case, key)
        if case.weighted:
            w = jt.weights()
            assert_close(w, torch.tensor([x for p in parts for x in p[2]]))
    assert got.length_per_key() == [sum(len(p[1]) for p in parts) for parts in expected.values()]


@pytest.mark.parametrize("rank_pool", WORLD_SIZES, indirect=True)
def test_kjt_all_to_all_matches_reference(rank_pool: RankPool) -> None:
    assert rank_pool.run(check_kjt_cases, 0) == [6] * rank_pool.world_size


def check_weight_gradient(ctx: RankContext) -> None:
    env = ShardingEnv.from_process_group(ctx.pg)
    world = ctx.world_size
    case = make_cases(world, 1)[0]
    assert case.weighted
    sent = [sent_kjt(case, ctx.rank, d) for d in range(world)]
    weights = [k.weights().clone().requires_grad_(True) for k in sent]
    per_rank = [
        KeyedJaggedTensor(k.keys(), k.values(), w, k.lengths(), stride=k.stride())
        for k, w in zip(sent, weights, strict=True)
    ]
    got = kjt_all_to_all(env, per_rank).wait()
    # d/dw of sum(w * id) is the id the weight travelled with.
    (got.weights() * got.values().float()).sum().backward()
    for k, w in zip(sent, weights, strict=True):
        assert w.grad is not None
        assert_close(w.grad, k.values().float())


@pytest.mark.parametrize("rank_pool", [1, 3], indirect=True)
def test_kjt_weights_gradient_is_reverse_all_to_all(rank_pool: RankPool) -> None:
    rank_pool.run(check_weight_gradient)


def mixed_weights(ctx: RankContext) -> list[float]:
    env = ShardingEnv.from_process_group(ctx.pg)
    values = torch.tensor([ctx.rank * 10 + 1])
    weights = torch.tensor([0.5]) if ctx.rank == 0 else None
    kjt = KeyedJaggedTensor(["a"], values, weights, torch.tensor([1]))
    got = kjt_all_to_all(
        env,
        [
            kjt
            if d == 0
            else KeyedJaggedTensor(["b"], torch.tensor([7]), weights, torch.tensor([1]))
            for d in range(ctx.world_size)
        ],
    ).wait()
    w = got.weights_or_none()
    assert w is not None
    return w.tolist()


def test_weights_default_to_one_for_ranks_that_send_none(rank_pool: RankPool) -> None:
    assert rank_pool.run(mixed_weights) == [[0.5, 1.0], [0.5, 1.0]]


def report_error_on(ctx: RankContext, bad_rank: int) -> str:
    env = ShardingEnv.from_process_group(ctx.pg)
    kjt = KeyedJaggedTensor(["a"], torch.tensor([1]), lengths=torch.tensor([1]))
    error = ValueError("feature 'a' id 99 is out of range") if ctx.rank == bad_rank else None
    kjt_all_to_all(env, [kjt] * ctx.world_size, error=error).wait()
    return "no error"


@pytest.mark.parametrize("rank_pool", [2, 4], indirect=True)
def test_error_flag_makes_every_rank_raise(rank_pool: RankPool) -> None:
    outcomes = rank_pool.run_outcomes(report_error_on, 1)
    assert isinstance(outcomes[1], ValueError) and "id 99" in str(outcomes[1])
    for r, o in enumerate(outcomes):
        if r != 1:
            assert isinstance(o, PeerError), o
            assert o.ranks == [1] and "id 99" in str(o)
    # the pool (and its process group) is still usable afterwards
    assert rank_pool.run(report_error_on, -1) == ["no error"] * rank_pool.world_size


def send_dtype_by_rank(ctx: RankContext) -> str:
    env = ShardingEnv.from_process_group(ctx.pg)
    dtype = torch.int32 if ctx.rank == 1 else torch.int64
    kjt = KeyedJaggedTensor(["a"], torch.tensor([1], dtype=dtype), lengths=torch.tensor([1]))
    kjt_all_to_all(env, [kjt] * ctx.world_size).wait()
    return "no error"


def test_dtype_disagreement_raises_on_every_rank(rank_pool: RankPool) -> None:
    outcomes = rank_pool.run_outcomes(send_dtype_by_rank)
    for o in outcomes:
        assert isinstance(o, TypeError) and "torch.int32" in str(o), o


def test_wrong_number_of_kjts_is_rejected_locally() -> None:
    env = ShardingEnv.from_local(1, 0)
    kjt = KeyedJaggedTensor(["a"], torch.tensor([1]), lengths=torch.tensor([1]))
    with pytest.raises(ValueError, match=r"one KJT per rank \(1\), got 2"):
        kjt_all_to_all(env, [kjt, kjt])
    with pytest.raises(TypeError, match="per_rank\\[0\\] must be a KeyedJaggedTensor, got dict"):
        kjt_all_to_all(env, [{}])  # type: ignore[list-item]  # the wrong type under test


def test_local_world_of_one_needs_no_process_group() -> None:
    env = ShardingEnv.from_local(1, 0)
    kjt = KeyedJaggedTensor(["a", "b"], torch.tensor([1, 2, 3]), lengths=torch.tensor([1, 0, 2, 0]))
    got = kjt_all_to_all(env, [kjt]).wait()
    assert got.keys() == ["a", "b"] and got.values().tolist() == [1, 2, 3]
    assert got.lengths().tolist() == [1, 0, 2, 0] and got.stride() == 2


# -- sequence embeddings ------------------------------------------------------------------

ROWS, DIM = 13, 3


def table(device: torch.device) -> torch.Tensor:
    return torch.randn(ROWS, DIM, generator=seeded_generator("table")).to(device)


def check_sequence_cases(ctx: RankContext, seed: int) -> int:
    world = ctx.world_size
    checked = 0
    for env, case, per_rank, awaitable in exchanges(ctx, seed):
        received = awaitable.wait()
        weight = table(env.device).requires_grad_(True)
        embs = weight[received.values() % ROWS]
        out = sequence_all_to_all(env, embs, awaitable.layout).wait()
        sent_ids = torch.cat([k.values() for k in per_rank])
        assert_close(out, table(env.device)[sent_ids % ROWS])
        # backward: the gradient of every rank's lookup, summed, equals the reference's.
        grads = [
            torch.randn(
                k.values().numel(), DIM, generator=seeded_generator("g", case.seed, ctx.rank)
            )
            for k in [per_rank[0]]
        ]
        g = torch.randn(out.shape, generator=seeded_generator("g", case.seed, ctx.rank))
        (out * g).sum().backward()
        assert weight.grad is not None
        total = weight.grad.clone()
        dist.all_reduce(total, group=ctx.pg)
        reference = table(env.device).requires_grad_(True)
        loss = torch.zeros(())
        for s in range(world):
            ids = torch.cat([sent_kjt(case, s, d).values() for d in range(world)])
            gs = torch.randn((ids.numel(), DIM), generator=seeded_generator("g", case.seed, s))
            loss = loss + (reference[ids % ROWS] * gs).sum()
        loss.backward()
        assert reference.grad is not None
        assert_close(total, reference.grad)
        del grads
        checked += 1
    return checked


@pytest.mark.parametrize("rank_pool", WORLD_SIZES, indirect=True)
def test_sequence_all_to_all_forward_and_backward(rank_pool: RankPool) -> None:
    assert rank_pool.run(check_sequence_cases, 2) == [6] * rank_pool.world_size


def test_sequence_all_to_all_checks_row_count() -> None:
    env = ShardingEnv.from_local(1, 0)
    layout = KJTAllToAllLayout(
        keys=("a",),
        recv_stride_per_key_per_rank=((2,),),
        recv_values_per_key_per_rank=((3,),),
        sent_values_per_rank=(3,),
        sent_stride_per_rank=(2,),
        variable_batch=False,
    )
    with pytest.raises(ValueError, match=r"embeddings has 4 rows but the all-to-all delivered 3"):
        sequence_all_to_all(env, torch.zeros(4, 2), layout)


def weights_dtype_by_rank(ctx: RankContext) -> str:
    """Rank 0 weights only what it sends rank 0 (float32); rank 1 only what it sends rank 1
    (float64): each receiver alone would see one dtype, yet every rank must refuse."""
    env = ShardingEnv.from_process_group(ctx.pg)
    dtype = torch.float32 if ctx.rank == 0 else torch.float64
    per_rank = [
        KeyedJaggedTensor(
            ["a"],
            torch.tensor([1]),
            torch.ones(1, dtype=dtype) if d == ctx.rank else None,
            torch.tensor([1]),
        )
        for d in range(ctx.world_size)
    ]
    kjt_all_to_all(env, per_rank).wait()
    return "no error"


def test_weights_dtype_disagreement_raises_on_every_rank(rank_pool: RankPool) -> None:
    for o in rank_pool.run_outcomes(weights_dtype_by_rank):
        assert isinstance(o, TypeError) and "weights dtype" in str(o), o


def mixed_local_dtypes(ctx: RankContext) -> str:
    """Rank 1 sends int32 ids to one rank and int64 to the other: a local mistake that is
    reported through the header, so every rank raises."""
    env = ShardingEnv.from_process_group(ctx.pg)
    per_rank = [
        KeyedJaggedTensor(
            ["a"],
            torch.tensor([1], dtype=torch.int32 if (ctx.rank == 1 and d == 1) else torch.int64),
            lengths=torch.tensor([1]),
        )
        for d in range(ctx.world_size)
    ]
    kjt_all_to_all(env, per_rank).wait()
    return "no error"


@pytest.mark.parametrize("rank_pool", [2, 3], indirect=True)
def test_local_check_failure_reaches_every_rank(rank_pool: RankPool) -> None:
    outcomes = rank_pool.run_outcomes(mixed_local_dtypes)
    assert isinstance(outcomes[1], TypeError) and "per_rank[1] values have dtype" in str(
        outcomes[1]
    )
    for r, o in enumerate(outcomes):
        if r != 1:
            assert isinstance(o, PeerError) and "per_rank[1] values have dtype" in str(o), o


# -- one exchange per call: the capacity learned from earlier calls -------------------------


def check_cases_with_capacity(ctx: RankContext) -> list[list[int]]:
    """The reference cases three times through one capacity: payloads that fit, grow past
    their capacity (a second exchange) and shrink below a quarter of it. Returns this rank's
    capacities (sent, received)."""
    capacity = ExchangeCapacity()
    for seed in (0, 0, 3):
        assert check_kjt_cases(ctx, seed, capacity) == 6
    return [capacity.sent, capacity.received]


@pytest.mark.parametrize("rank_pool", WORLD_SIZES, indirect=True)
def test_capacity_gives_the_same_result_and_agrees_between_ranks(rank_pool: RankPool) -> None:
    world = rank_pool.world_size
    caps = rank_pool.run(check_cases_with_capacity)
    for s in range(world):
        for d in range(world):
            assert caps[s][0][d] == caps[d][1][s] > 0  # both ends of a pair learned alike


def count_exchanges(ctx: RankContext, with_capacity: bool, weighted: bool) -> list[int]:
    """Data all-to-alls per call, for 3 calls of one batch size (same site)."""
    env = ShardingEnv.from_process_group(ctx.pg)
    capacity = ExchangeCapacity() if with_capacity else None
    calls: list[int] = []
    original = dist.all_to_all_single

    def counted(*args: object, **kwargs: object) -> object:
        calls[-1] += 1
        return original(*args, **kwargs)  # type: ignore[arg-type]  # forwarded as given

    dist.all_to_all_single = counted
    try:
        for step in range(3):
            calls.append(0)
            g = seeded_generator("count", step, ctx.rank)
            # the same bag sizes every step (a steady stream), other ids
            sizes = seeded_generator("sizes", ctx.rank)
            per_rank = []
            for d in range(ctx.world_size):
                lengths = random_lengths(8, 3, sizes)
                n = int(lengths.sum())
                w = torch.rand(n, generator=g) if weighted else None
                values = torch.randint(0, 100, (n,), generator=g)
                per_rank.append(KeyedJaggedTensor([f"k{d}"], values, w, lengths, stride=8))
            got = kjt_all_to_all(env, per_rank, capacity=capacity).wait()
            assert got.stride() == 8 * ctx.world_size
    finally:
        dist.all_to_all_single = original
    return calls


@pytest.mark.parametrize("weighted", [False, True])
def test_capacity_makes_one_exchange_per_call(rank_pool: RankPool, weighted: bool) -> None:
    # The first call learns the sizes (header exchange, then the data); later calls of a
    # similar size move header and data in one exchange. Without a capacity: always two.
    assert rank_pool.run(count_exchanges, False, weighted) == [[2, 2, 2]] * 2
    assert rank_pool.run(count_exchanges, True, weighted)[0][1:] == [1, 1]


def test_new_capacity_grows_and_shrinks() -> None:
    assert new_capacity(0, 100) == 176  # 100 + 100 // 8 + 64 = 176, 8-aligned
    assert new_capacity(176, 176) == 176
    assert new_capacity(176, 44) == 176  # a quarter: kept
    assert new_capacity(176, 43) == 112  # under a quarter: 43 + 5 + 64 = 112
    assert new_capacity(176, 177) == 264  # 177 + 22 + 64 = 263, 8-aligned


def error_after_learning(ctx: RankContext) -> list[str]:
    """With a learned capacity (one exchange), an error on rank 1 still raises on every rank,
    and the site keeps working afterwards (both ends of each pair still agree)."""
    env = ShardingEnv.from_process_group(ctx.pg)
    capacity = ExchangeCapacity()
    kjt = KeyedJaggedTensor(["a"], torch.arange(6), lengths=torch.tensor([2, 4]))
    outcomes: list[str] = []
    for step in range(4):
        error = ValueError("id 99 is out of range") if step == 2 and ctx.rank == 1 else None
        try:
            got = kjt_all_to_all(env, [kjt] * ctx.world_size, error=error, capacity=capacity)
            outcomes.append(str(got.wait().values().tolist()))
        except (ValueError, PeerError) as exc:
            outcomes.append(type(exc).__name__)
    return outcomes


@pytest.mark.parametrize("rank_pool", [2, 3], indirect=True)
def test_error_with_a_learned_capacity_raises_on_every_rank(rank_pool: RankPool) -> None:
    world = rank_pool.world_size
    ok = str(list(range(6)) * world)
    for rank, got in enumerate(rank_pool.run(error_after_learning)):
        raised = "ValueError" if rank == 1 else "PeerError"
        assert got == [ok, ok, raised, ok], (rank, got)


# -- deferred header reads (the pipeline's input dist): same results, capacities, order ------


def deferred_cases(ctx: RankContext, order: str) -> list[list[int]]:
    """The reference cases of seeds 0, 0, 3 through one capacity with `defer=True` (payloads
    that fit, grow past their capacity and shrink), the waits in `order`:
    "pipeline": call k+1 before waiting k; "reversed": every call first, then the waits from
    the last (the earlier headers are read by the later calls); "layout": every call, then
    every `.layout` from the last, then the waits. Returns the capacities."""
    env = ShardingEnv.from_process_group(ctx.pg)
    capacity = ExchangeCapacity()
    calls: list[tuple[Case, list[KeyedJaggedTensor], KJTAllToAllAwaitable]] = []
    for seed in (0, 0, 3):
        for case in make_cases(ctx.world_size, seed):
            per_rank = [sent_kjt(case, ctx.rank, d) for d in range(ctx.world_size)]
            pending = kjt_all_to_all(env, per_rank, capacity=capacity, defer=True)
            calls.append((case, per_rank, pending))
            if order == "pipeline" and len(calls) >= 2:
                calls[-2][2].wait()  # batch k's result is used after batch k+1 was launched
    if order == "reversed":
        for _, _, pending in reversed(calls):
            pending.wait()
    if order == "layout":
        for _, _, pending in reversed(calls):
            assert pending.layout.keys is not None  # read before any wait
    for case, per_rank, pending in calls:
        check_received(ctx, case, per_rank, pending)
    capacity.settle()
    return [capacity.sent, capacity.received]


@pytest.mark.parametrize("rank_pool", [1, 2, 3], indirect=True)
@pytest.mark.parametrize("order", ["pipeline", "reversed", "layout"])
def test_deferred_reads_give_the_same_results_and_capacities(
    rank_pool: RankPool, order: str
) -> None:
    world = rank_pool.world_size
    caps = rank_pool.run(deferred_cases, order)
    eager = rank_pool.run(check_cases_with_capacity)
    for s in range(world):
        for d in range(world):
            assert caps[s][0][d] == caps[d][1][s] > 0  # both ends of a pair learned alike
    assert caps == eager  # the same capacities as calls waited one by one


def deferred_exchanges(ctx: RankContext) -> list[int]:
    """All-to-alls launched by each of 3 deferred calls of one size, waited one call late,
    and what is in flight when each call returns (a deferred call waits for nothing)."""
    env = ShardingEnv.from_process_group(ctx.pg)
    capacity = ExchangeCapacity()
    kjt = KeyedJaggedTensor(["a"], torch.arange(6), lengths=torch.tensor([2, 4]))
    calls: list[int] = []
    original = dist.all_to_all_single

    def counted(*args: object, **kwargs: object) -> object:
        calls[-1] += 1
        return original(*args, **kwargs)  # type: ignore[arg-type]  # forwarded as given

    dist.all_to_all_single = counted
    pending: list[KJTAllToAllAwaitable] = []
    try:
        for _ in range(3):
            calls.append(0)
            pending.append(
                kjt_all_to_all(env, [kjt] * ctx.world_size, capacity=capacity, defer=True)
            )
        calls.append(0)
        for p in pending:
            assert p.wait().values().tolist() == list(range(6)) * ctx.world_size
    finally:
        dist.all_to_all_single = original
    return calls


@pytest.mark.parametrize("rank_pool", [2], indirect=True)
def test_deferred_call_launches_only_the_first_exchange(rank_pool: RankPool) -> None:
    # Call 1 has no capacity yet: headers only; its data moves when call 2 reads its headers.
    # Calls 2 and 3 carry their data in their first exchange (the capacity call 1 taught).
    assert rank_pool.run(deferred_exchanges) == [[1, 2, 1, 0]] * 2


def deferred_error(ctx: RankContext, wait_first: bool) -> list[str]:
    """An input error on rank 1 in a deferred call raises on every rank at its wait (not at the
    next call, which reads its headers), again on a second wait, and the site keeps working."""
    env = ShardingEnv.from_process_group(ctx.pg)
    capacity = ExchangeCapacity()
    kjt = KeyedJaggedTensor(["a"], torch.arange(6), lengths=torch.tensor([2, 4]))
    outcomes: list[str] = []

    def call(error: BaseException | None) -> KJTAllToAllAwaitable:
        return kjt_all_to_all(
            env, [kjt] * ctx.world_size, error=error, capacity=capacity, defer=True
        )

    def wait(p: KJTAllToAllAwaitable) -> None:
        try:
            outcomes.append(str(p.wait().stride()))
        except (ValueError, PeerError) as exc:
            outcomes.append(type(exc).__name__)

    wait(call(None))
    bad = call(ValueError("id 99 is out of range") if ctx.rank == 1 else None)
    if wait_first:
        wait(bad)
    after = call(None)
    wait(bad)
    wait(after)
    wait(call(None))
    return outcomes


@pytest.mark.parametrize("rank_pool", [2], indirect=True)
@pytest.mark.parametrize("wait_first", [True, False])
def test_deferred_error_raises_on_every_rank_at_its_wait(
    rank_pool: RankPool, wait_first: bool
) -> None:
    for rank, got in enumerate(rank_pool.run(deferred_error, wait_first)):
        raised = "ValueError" if rank == 1 else "PeerError"
        expected = ["4", raised, raised, "4", "4"] if wait_first else ["4", raised, "4", "4"]
        assert got == expected, (rank, got)
