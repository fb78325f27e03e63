"""End-to-end sharded embedding lookups built from shardrec_collectives alone, over gloo.

Each scenario shards a few embedding tables over the ranks the way a sharding strategy would,
runs input distribution (KJT all-to-all), a local lookup, and output distribution (pooled
all-to-all, reduce-scatter or sequence all-to-all), then checks the forward result and the
table gradients against the unsharded computation of every rank's batch in one process.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from shardrec_collectives import (
    ShardingEnv,
    agree_on_error,
    kjt_all_to_all,
    pooled_all_to_all,
    reduce_scatter_pooled,
    sequence_all_to_all,
    split_by_host,
    variable_batch_pooled_all_to_all,
)
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import RankContext, RankPool, assert_close, random_lengths, seeded_generator

FEATURES = ["user", "item", "query"]
ROWS = {"user": 11, "item": 7, "query": 5}  # rows not divisible by most world sizes
DIMS = {"user": 4, "item": 2, "query": 3}


def tables() -> dict[str, torch.Tensor]:
    g = seeded_generator("tables")
    return {f: torch.randn(ROWS[f], DIMS[f], generator=g) for f in FEATURES}


def batch_of(rank: int, seed: int, weighted: bool) -> KeyedJaggedTensor:
    """Rank `rank`'s input batch: batch size differs per rank (rank 1 may be empty)."""
    g = seeded_generator("batch", seed, rank)
    b = (rank * 2 + seed) % 4
    lengths = random_lengths(len(FEATURES) * b, 3, g)
    per_key = lengths.view(len(FEATURES), b).sum(1).tolist() if b else [0] * len(FEATURES)
    values = torch.cat(
        [
            torch.randint(0, ROWS[f], (n,), generator=g)
            for f, n in zip(FEATURES, per_key, strict=True)
        ]
    )
    weights = torch.rand(values.numel(), generator=g) if weighted else None
    return KeyedJaggedTensor(FEATURES, values, weights, lengths, stride=b)


def pooled_reference(
    kjt: KeyedJaggedTensor, weights: dict[str, torch.Tensor], mode: str
) -> torch.Tensor:
    """The unsharded module: (B, sum D), features in FEATURES order."""
    outs = []
    for f in FEATURES:
        jt = kjt[f]
        outs.append(
            F.embedding_bag(
                jt.values(),
                weights[f],
                jt.offsets()[:-1],
                mode=mode,
                per_sample_weights=jt.weights_or_none(),
                include_last_offset=False,
            )
            if kjt.stride() > 0
            else torch.zeros(0, DIMS[f])
        )
    return torch.cat(outs, dim=1)


def lookup(kjt: KeyedJaggedTensor, weights: dict[str, torch.Tensor], mode: str) -> torch.Tensor:
    stride = kjt.stride()
    outs = []
    for f in kjt.keys()[:]:
        jt = kjt[f]
        if stride == 0:
            outs.append(weights[f].new_zeros(0, weights[f].shape[1]))
            continue
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), jt.lengths().cumsum(0)])
        outs.append(
            F.embedding_bag(
                jt.values(),
                weights[f],
                offsets,
                mode=mode,
                per_sample_weights=jt.weights_or_none(),
                include_last_offset=True,
            )
        )
    if not outs:
        return torch.zeros(stride, 0)
    return torch.cat(outs, dim=1)


def check_reference(
    ctx: RankContext,
    env: ShardingEnv,
    out: torch.Tensor,
    grads: dict[str, torch.Tensor],
    seed: int,
    weighted: bool,
    mode: str,
) -> None:
    """Compare this rank's output and the all-reduced table gradients with one process."""
    ref_tables = {f: t.clone().requires_grad_(True) for f, t in tables().items()}
    loss = sum((0 * t).sum() for t in ref_tables.values())  # a graph even for empty batches
    assert isinstance(loss, torch.Tensor)
    for r in range(ctx.world_size):
        ref = pooled_reference(batch_of(r, seed, weighted), ref_tables, mode)
        if r == ctx.rank:
            assert_close(out, ref.detach())
        loss = loss + (ref * torch.arange(ref.numel()).view_as(ref).float()).sum()
    loss.backward()
    for f in FEATURES:
        total = grads[f].clone()
        dist.all_reduce(total, group=ctx.pg)
        assert ref_tables[f].grad is not None
        assert_close(total, ref_tables[f].grad, scale=10.0)


def table_wise(ctx: RankContext, seed: int, weighted: bool, mode: str) -> None:
    """Feature i's table lives on rank i % world; pooled rows come back by all-to-all."""
    env = ShardingEnv.from_process_group(ctx.pg)
    world = ctx.world_size
    owner = {f: i % world for i, f in enumerate(FEATURES)}
    mine = {f: t.clone().requires_grad_(True) for f, t in tables().items() if owner[f] == ctx.rank}
    kjt = batch_of(ctx.rank, seed, weighted)
    order = [FEATURES.index(f) for r in range(world) for f in FEATURES if owner[f] == r]
    grouped = kjt.permute(order)
    per_rank = grouped.split([sum(1 for f in FEATURES if owner[f] == r) for r in range(world)])
    received = kjt_all_to_all(env, per_rank).wait()
    local = lookup(received, mine, mode)
    batch_sizes = [batch_of(r, seed, weighted).stride() for r in range(world)]
    dim_per_rank = [sum(DIMS[f] for f in FEATURES if owner[f] == r) for r in range(world)]
    out = pooled_all_to_all(env, local, batch_sizes, dim_per_rank).wait()
    # columns come back grouped by owner rank; restore the module's feature order
    col_of, start = {}, 0
    for f in [FEATURES[i] for i in order]:
        col_of[f] = (start, start + DIMS[f])
        start += DIMS[f]
    out = torch.cat([out[:, col_of[f][0] : col_of[f][1]] for f in FEATURES], dim=1)
    if out.requires_grad:  # not with one rank and an empty batch: nothing to differentiate
        (out * torch.arange(out.numel()).view_as(out).float()).sum().backward()
    grads = {
        f: (
            mine[f].grad
            if f in mine and mine[f].grad is not None
            else torch.zeros(ROWS[f], DIMS[f])
        )
        for f in FEATURES
    }
    check_reference(ctx, env, out.detach(), grads, seed, weighted, mode)


def row_wise(ctx: RankContext, seed: int, weighted: bool, mode: str) -> None:
    """Every table split in row blocks of ceil(rows / world); partial sums reduce-scattered."""
    env = ShardingEnv.from_process_group(ctx.pg)
    world, me = ctx.world_size, ctx.rank
    block = {f: -(-ROWS[f] // world) for f in FEATURES}
    full = tables()
    mine = {
        f: full[f][me * block[f] : (me + 1) * block[f]].clone().requires_grad_(True)
        for f in FEATURES
    }
    kjt = batch_of(me, seed, weighted)
    error = None
    try:
        if kjt.values().numel() and int(kjt.values().max()) >= max(ROWS.values()):
            raise IndexError("id out of range")
    except IndexError as exc:
        error = exc
    agree_on_error(env, error)
    # bucketize: per destination rank, every feature with only the ids in that rank's block
    per_rank = []
    for r in range(world):
        lengths, values, weights = [], [], []
        for f in FEATURES:
            jt = kjt[f]
            keep = (jt.values() // block[f]) == r
            bag = torch.repeat_interleave(torch.arange(kjt.stride()), jt.lengths())
            lengths.append(torch.bincount(bag[keep], minlength=kjt.stride()))
            values.append(jt.values()[keep] - r * block[f])
            if weighted:
                weights.append(jt.weights()[keep])
        per_rank.append(
            KeyedJaggedTensor(
                FEATURES,
                torch.cat(values),
                torch.cat(weights) if weighted else None,
                torch.cat(lengths),
                stride=kjt.stride(),
            )
        )
    received = kjt_all_to_all(env, per_rank).wait()
    partial = lookup(received, mine, "sum")
    batch_sizes = [batch_of(r, seed, weighted).stride() for r in range(world)]
    out = reduce_scatter_pooled(env, partial, batch_sizes).wait()
    if mode == "mean":  # MEAN divides after the reduce, by the full bag length
        counts = (
            kjt.lengths().view(len(FEATURES), -1).t().clamp(min=1).float()
            if kjt.stride()
            else torch.ones(0, len(FEATURES))
        )
        divisor = torch.cat(
            [counts[:, i : i + 1].expand(-1, DIMS[f]) for i, f in enumerate(FEATURES)], dim=1
        )
        out = out / divisor
    if out.requires_grad:  # not with one rank and an empty batch: nothing to differentiate
        (out * torch.arange(out.numel()).view_as(out).float()).sum().backward()
    grads = {}
    for f in FEATURES:
        g = torch.zeros(ROWS[f], DIMS[f])
        if mine[f].grad is not None:
            g[me * block[f] : me * block[f] + mine[f].shape[0]] = mine[f].grad
        grads[f] = g
    check_reference(ctx, env, out.detach(), grads, seed, weighted, mode)


def sequence_table_wise(ctx: RankContext, seed: int) -> None:
    """EmbeddingCollection-style: one embedding per id, returned in the sender's order."""
    env = ShardingEnv.from_process_group(ctx.pg)
    world = ctx.world_size
    owner = {f: (i + 1) % world for i, f in enumerate(FEATURES)}
    full = tables()
    kjt = batch_of(ctx.rank, seed, False)
    order = [FEATURES.index(f) for r in range(world) for f in FEATURES if owner[f] == r]
    per_rank = kjt.permute(order).split(
        [sum(1 for f in FEATURES if owner[f] == r) for r in range(world)]
    )
    a2a = kjt_all_to_all(env, per_rank)
    received = a2a.wait()
    dim = 2  # a common width so rows stack
    rows = [full[f][received[f].values(), :dim] for f in received.keys()[:]]
    embs = torch.cat(rows) if rows else torch.zeros(0, dim)
    out = sequence_all_to_all(env, embs, a2a.layout).wait()
    sent = kjt.permute(order)
    expected = torch.cat([full[f][sent[f].values(), :dim] for f in sent.keys()[:]])
    assert_close(out, expected)


SCENARIOS = [
    (seed, weighted, mode)
    for seed in (0, 1)
    for weighted in (False, True)
    for mode in ("sum", "mean")
]


def run_all_table_wise(ctx: RankContext) -> int:
    for seed, weighted, mode in SCENARIOS:
        if weighted and mode == "mean":
            continue  # per-sample weights need mode="sum" in torch.embedding_bag
        table_wise(ctx, seed, weighted, mode)
    return ctx.rank


def run_all_row_wise(ctx: RankContext) -> int:
    for seed, weighted, mode in SCENARIOS:
        if weighted and mode == "mean":
            continue
        row_wise(ctx, seed, weighted, mode)
    return ctx.rank


def run_all_sequence(ctx: RankContext) -> int:
    for seed in (0, 1, 2):
        sequence_table_wise(ctx, seed)
    return ctx.rank


@pytest.mark.parametrize("rank_pool", [1, 2, 3, 4], indirect=True)
def test_table_wise_pooled(rank_pool: RankPool) -> None:
    assert rank_pool.run(run_all_table_wise) == list(range(rank_pool.world_size))


@pytest.mark.parametrize("rank_pool", [1, 2, 3, 4], indirect=True)
def test_row_wise_reduce_scatter(rank_pool: RankPool) -> None:
    assert rank_pool.run(run_all_row_wise) == list(range(rank_pool.world_size))


@pytest.mark.parametrize("rank_pool", [2, 3], indirect=True)
def test_sequence_table_wise(rank_pool: RankPool) -> None:
    assert rank_pool.run(run_all_sequence) == list(range(rank_pool.world_size))


def bad_id_on_rank(ctx: RankContext, bad: int) -> str:
    env = ShardingEnv.from_process_group(ctx.pg)
    error = (
        IndexError("feature 'user' id 5012 is out of range for table 'user' with 11 rows")
        if ctx.rank == bad
        else None
    )
    agree_on_error(env, error)
    return "ok"


def test_out_of_range_id_reaches_every_rank(rank_pool: RankPool) -> None:
    outcomes = rank_pool.run_outcomes(bad_id_on_rank, 0, timeout_s=60)
    assert isinstance(outcomes[0], IndexError)
    assert all("id 5012" in str(o) for o in outcomes)


def nccl_pooled(ctx: RankContext) -> None:
    env = ShardingEnv.from_process_group(ctx.pg)
    local = torch.full((2 * ctx.world_size, 1), float(ctx.rank), device=env.device)
    out = pooled_all_to_all(env, local, [2] * ctx.world_size, [1] * ctx.world_size).wait()
    assert out.device == env.device
    expected = torch.arange(ctx.world_size, dtype=torch.float32, device=env.device).expand(2, -1)
    assert_close(out, expected)


def test_nccl_pooled_all_to_all(pool_factory: object) -> None:
    pool = pool_factory(2, "nccl")  # type: ignore[operator]  # skips without 2 GPUs
    pool.run(nccl_pooled)


# -- variable batch per feature ---------------------------------------------------------------


def vb_batch_of(rank: int, seed: int) -> KeyedJaggedTensor:
    """Rank `rank`'s batch where every feature has its own batch size (0 allowed)."""
    g = seeded_generator("vb-batch", seed, rank)
    strides = torch.randint(0, 4, (len(FEATURES),), generator=g).tolist()
    lengths = random_lengths(sum(strides), 3, g)
    per_key = [int(part.sum()) for part in torch.split(lengths, strides)]
    values = torch.cat(
        [
            torch.randint(0, ROWS[f], (n,), generator=g)
            for f, n in zip(FEATURES, per_key, strict=True)
        ]
    )
    return KeyedJaggedTensor(
        FEATURES, values, None, lengths, stride_per_key_per_rank=[[s] for s in strides]
    )


def bag_sums(
    jt_values: torch.Tensor, jt_lengths: torch.Tensor, table: torch.Tensor
) -> torch.Tensor:
    """(bags, D) sum pooling: the unsharded module's output for one feature."""
    bags = torch.repeat_interleave(torch.arange(jt_lengths.numel()), jt_lengths)
    out = table.new_zeros(jt_lengths.numel(), table.shape[1])
    return out.index_add(0, bags, table[jt_values])


def table_wise_variable_batch(ctx: RankContext, seed: int) -> None:
    env = ShardingEnv.from_process_group(ctx.pg)
    world, me = ctx.world_size, ctx.rank
    owner = {f: (i * 2) % world for i, f in enumerate(FEATURES)}
    features_of = [[f for f in FEATURES if owner[f] == r] for r in range(world)]
    full = tables()
    mine = {f: full[f].clone().requires_grad_(True) for f in features_of[me]}
    kjt = vb_batch_of(me, seed)
    order = [FEATURES.index(f) for fs in features_of for f in fs]
    per_rank = kjt.permute(order).split([len(fs) for fs in features_of])
    received = kjt_all_to_all(env, per_rank).wait()
    assert received.variable_stride_per_key()
    pooled = [
        bag_sums(received[f].values(), received[f].lengths(), mine[f]).reshape(-1)
        for f in features_of[me]
    ]
    local = torch.cat(pooled) if pooled else torch.zeros(0)
    my_strides = dict(zip(FEATURES, kjt.stride_per_key(), strict=True))
    out = variable_batch_pooled_all_to_all(
        env,
        local,
        received.stride_per_key_per_rank(),
        [[DIMS[f] for f in fs] for fs in features_of],
        [[my_strides[f] for f in fs] for fs in features_of],
    ).wait()
    # reference: this rank's own batch through the unsharded tables, in owner order
    expected = torch.cat(
        [
            bag_sums(kjt[f].values(), kjt[f].lengths(), full[f]).reshape(-1)
            for fs in features_of
            for f in fs
        ]
    )
    assert_close(out, expected)
    (out * torch.arange(out.numel()).float()).sum().backward()
    ref_tables = {f: t.clone().requires_grad_(True) for f, t in full.items()}
    loss = sum((0 * t).sum() for t in ref_tables.values())
    for r in range(world):
        batch = vb_batch_of(r, seed)
        ref = torch.cat(
            [
                bag_sums(batch[f].values(), batch[f].lengths(), ref_tables[f]).reshape(-1)
                for fs in features_of
                for f in fs
            ]
        )
        loss = loss + (ref * torch.arange(ref.numel()).float()).sum()
    assert isinstance(loss, torch.Tensor)
    loss.backward()
    for f in FEATURES:
        grad = (
            mine[f].grad
            if f in mine and mine[f].grad is not None
            else torch.zeros(ROWS[f], DIMS[f])
        )
        total = grad.clone()
        dist.all_reduce(total, group=ctx.pg)
        assert ref_tables[f].grad is not None
        assert_close(total, ref_tables[f].grad, scale=10.0)


def run_all_variable_batch(ctx: RankContext) -> int:
    for seed in (0, 1, 2):
        table_wise_variable_batch(ctx, seed)
    return ctx.rank


@pytest.mark.parametrize("rank_pool", [1, 2, 3, 4], indirect=True)
def test_table_wise_variable_batch_per_feature(rank_pool: RankPool) -> None:
    assert rank_pool.run(run_all_variable_batch) == list(range(rank_pool.world_size))


# -- table_row_wise: rows split within a host, two-level output ------------------------------

LOCAL = 2  # ranks per simulated host


def table_row_wise(ctx: RankContext, seed: int, weighted: bool) -> None:
    """Each table lives on one host, its rows split over that host's ranks. Output: intra-host
    reduce-scatter of partial sums, then a cross-host all-to-all to the samples' owners."""
    env = ShardingEnv.from_process_group(ctx.pg)
    world, me = ctx.world_size, ctx.rank
    groups = split_by_host(env, LOCAL)
    hosts, host, local_rank = world // LOCAL, me // LOCAL, me % LOCAL
    features_of_host = [[f for i, f in enumerate(FEATURES) if i % hosts == h] for h in range(hosts)]
    block = {f: -(-ROWS[f] // LOCAL) for f in FEATURES}
    full = tables()
    mine = {
        f: full[f][local_rank * block[f] : (local_rank + 1) * block[f]].clone().requires_grad_(True)
        for f in features_of_host[host]
    }
    kjt = batch_of(me, seed, weighted)
    per_rank = []
    for d in range(world):
        d_host, d_local = d // LOCAL, d % LOCAL
        lengths, values, weights = [], [], []
        for f in features_of_host[d_host]:
            jt = kjt[f]
            keep = (jt.values() // block[f]) == d_local
            bag = torch.repeat_interleave(torch.arange(kjt.stride()), jt.lengths())
            lengths.append(torch.bincount(bag[keep], minlength=kjt.stride()))
            values.append(jt.values()[keep] - d_local * block[f])
            if weighted:
                weights.append(jt.weights()[keep])
        per_rank.append(
            KeyedJaggedTensor(
                features_of_host[d_host],
                torch.cat(values) if values else torch.zeros(0, dtype=torch.int64),
                (torch.cat(weights) if weights else torch.zeros(0)) if weighted else None,
                torch.cat(lengths) if lengths else torch.zeros(0, dtype=torch.int64),
                stride=kjt.stride(),
            )
        )
    received = kjt_all_to_all(env, per_rank).wait()
    partial = lookup(received, mine, "sum")  # (sum_s B_s, D_host), rows by source rank
    b = [batch_of(r, seed, weighted).stride() for r in range(world)]
    # reduce-scatter chunk j must hold the rows of the ranks with local rank j, host by host
    starts = [sum(b[:s]) for s in range(world)]
    by_local = [s for j in range(LOCAL) for s in range(world) if s % LOCAL == j]
    reordered = torch.cat([partial[starts[s] : starts[s] + b[s]] for s in by_local])
    chunk = [sum(b[s] for s in range(world) if s % LOCAL == j) for j in range(LOCAL)]
    summed = reduce_scatter_pooled(groups.intra, reordered, chunk).wait()
    cross_batches = [b[h * LOCAL + local_rank] for h in range(hosts)]
    host_dims = [sum(DIMS[f] for f in fs) for fs in features_of_host]
    out = pooled_all_to_all(groups.cross, summed, cross_batches, host_dims).wait()
    col_of, start = {}, 0
    for fs in features_of_host:
        for f in fs:
            col_of[f] = (start, start + DIMS[f])
            start += DIMS[f]
    out = torch.cat([out[:, col_of[f][0] : col_of[f][1]] for f in FEATURES], dim=1)
    if out.requires_grad:
        (out * torch.arange(out.numel()).view_as(out).float()).sum().backward()
    grads = {}
    for f in FEATURES:
        g = torch.zeros(ROWS[f], DIMS[f])
        if f in mine and mine[f].grad is not None:
            g[local_rank * block[f] : local_rank * block[f] + mine[f].shape[0]] = mine[f].grad
        grads[f] = g
    check_reference(ctx, env, out.detach(), grads, seed, weighted, "sum")


def run_all_table_row_wise(ctx: RankContext) -> int:
    for seed in (0, 1):
        for weighted in (False, True):
            table_row_wise(ctx, seed, weighted)
    return ctx.rank


@pytest.mark.parametrize("rank_pool", [2, 4], indirect=True)
def test_table_row_wise_two_level(rank_pool: RankPool) -> None:
    assert rank_pool.run(run_all_table_row_wise) == list(range(rank_pool.world_size))
