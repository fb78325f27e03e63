"""The C bucketization pass (`_bucketize_native`) against the torch path of `RowBucketizer`:
the same ids per rank in the same order, the same counts, weights and `order`, for both id
dtypes, both wire dtypes, uniform and uneven row blocks, 1-5 ranks, a key read by two tables
and empty bags; and where it must step aside (an id outside its table: the torch path runs)."""

from __future__ import annotations

from typing import Any, cast

import pytest
import torch
from test_bucketize import _tables  # uniform / uneven row blocks over `world` ranks

from shardrec_collectives import ShardingEnv
from shardrec_jagged import KeyedJaggedTensor
from shardrec_sharding.layout import Segment
from shardrec_sharding.strategies import _bucketize_native
from shardrec_sharding.strategies._bucketize import RowBucketizer
from shardrec_testing import random_lengths, seeded_generator

pytestmark = pytest.mark.skipif(
    _bucketize_native._lib() is None, reason="the C pass does not build here"
)


def _case(
    world: int, uniform: bool, dtype: torch.dtype, weighted: bool, seed: int
) -> tuple[RowBucketizer, KeyedJaggedTensor, dict[str, int]]:
    g = seeded_generator("bucketize-native", world, uniform, str(dtype), weighted, seed)
    rows = [7, 1000, 3, 16, 250]
    reads = [("t0", "f0"), ("t1", "f1"), ("t2", "f2"), ("t3", "f2"), ("t4", "f3")]
    segments = [
        Segment(index=j, table=t, feature=f, name=f"{f}@{t}", dim=4)
        for j, (t, f) in enumerate(reads)
    ]
    batch = 9
    keys = ["f0", "f1", "f2", "unread", "f3"]
    lengths = random_lengths(len(keys) * batch, 6, g)
    per_key = lengths.view(len(keys), batch).sum(1).tolist()
    limits = [7, 1000, 3, 50, 250]
    values = torch.cat(
        [torch.randint(0, m, (n,), generator=g) for m, n in zip(limits, per_key, strict=True)]
    ).to(dtype)
    weights = torch.rand(values.numel(), generator=g) if weighted else None
    kjt = KeyedJaggedTensor(keys, values, weights=weights, lengths=lengths, stride=batch)
    env = ShardingEnv.from_local(world, 0)
    bucketizer = RowBucketizer(segments, cast(Any, _tables(world, rows, uniform)), env)
    return bucketizer, kjt, {k: i for i, k in enumerate(keys)}


def _spy_on(calls: list[bool]) -> Any:
    """`native_bucketize` recording in `calls` whether it applied."""
    real = _bucketize_native.native_bucketize

    def spy(*args: Any, **kwargs: Any) -> Any:
        got = real(*args, **kwargs)
        calls.append(got is not None)
        return got

    return spy


@pytest.mark.parametrize("world", [1, 2, 3, 5])
@pytest.mark.parametrize("uniform", [True, False])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("wire", [None, torch.int32, torch.int64])
@pytest.mark.parametrize("weighted", [False, True])
def test_native_pass_equals_the_torch_path(
    world: int, uniform: bool, dtype: torch.dtype, wire: torch.dtype | None, weighted: bool
) -> None:
    for seed in range(2):
        bucketizer, kjt, pos = _case(world, uniform, dtype, weighted, seed)
        keys = [pos[s.feature] for s in bucketizer.segments]
        lengths = kjt.lengths().view(len(kjt.keys()), kjt.stride())[torch.tensor(keys)]
        want, want_order = bucketizer._torch(kjt, keys, lengths, True, wire or dtype)
        calls: list[bool] = []
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("shardrec_sharding.strategies._bucketize.native_bucketize", _spy_on(calls))
            per_rank, order = bucketizer(kjt, pos, wire_dtype=wire)
        assert calls == [True]  # the C pass ran
        sizes = want.totals.sum(1).tolist()
        want_ids = torch.split(want.ids, sizes)
        for d, got in enumerate(per_rank):
            assert got.values().dtype == (wire or dtype)
            assert torch.equal(got.values(), want_ids[d])
            assert torch.equal(got.lengths(), want.counts[d])
            assert got.length_per_key() == want.totals[d].tolist()
            if weighted:
                assert want.weights is not None
                assert torch.equal(got.weights(), torch.split(want.weights, sizes)[d])
            else:
                assert got.weights_or_none() is None
        assert order is not None and want_order is not None
        assert torch.equal(order, want_order)


@pytest.mark.parametrize("wire", [torch.int64, torch.int32])
@pytest.mark.parametrize("bad_id", [10**6, 7, -1])
def test_an_id_outside_its_table_takes_the_torch_path(wire: torch.dtype, bad_id: int) -> None:
    # int32 wire, 2 ranks, no weights: t0's blocks [0, 4) on rank 0 and [4, 7) on rank 1 take
    # the C pass's two-block loop, which checks the id against the table's rows once
    bucketizer, kjt, pos = _case(2, True, torch.int64, False, 0)
    table = bucketizer._native
    assert table is not None
    values = kjt.values().clone()
    values[0] = bad_id  # f0 reads t0 (7 rows)
    bad = KeyedJaggedTensor(kjt.keys(), values, lengths=kjt.lengths(), stride=kjt.stride())
    keys = [pos[s.feature] for s in bucketizer.segments]
    lengths = bad.lengths().view(len(bad.keys()), bad.stride())[torch.tensor(keys)]
    offsets = bad.offset_per_key()
    got = _bucketize_native.native_bucketize(
        values,
        [offsets[k] for k in keys],
        [offsets[k + 1] - offsets[k] for k in keys],
        lengths.long(),
        table,
        2,
        wire,
        None,
        False,
    )
    assert got is None
    # bags that do not cover their segment: refused too, nothing written out of bounds
    assert (
        _bucketize_native.native_bucketize(
            kjt.values(),
            [offsets[k] for k in keys],
            [offsets[k + 1] - offsets[k] + 1 for k in keys],
            lengths.long(),
            table,
            2,
            torch.int64,
            None,
            False,
        )
        is None
    )
