"""Row bucketization against a naive loop: the ordering of ids by destination rank (two ways)
and the whole split (two ways of finding an id's row block).

`_partition` (running counts per destination, up to `_PARTITION_MAX_WORLD` ranks) and `_sort`
(stable sort, any world) must give the same per (rank, bag) counts and the same sent order:
each rank's ids in (segment, bag) order. The reference walks the ids one by one.
"""

from __future__ import annotations

import itertools
import types
from typing import Any, cast

import pytest
import torch

from shardrec_collectives import ShardingEnv
from shardrec_jagged import KeyedJaggedTensor
from shardrec_sharding.layout import Segment, Shard
from shardrec_sharding.strategies._bucketize import (
    _PARTITION_MAX_WORLD,
    RowBucketizer,
    _partition,
    _scatter,
    _sort,
)
from shardrec_testing import random_lengths, seeded_generator


def _reference(dest: list[int], lengths: list[int], world: int) -> tuple[list[int], list[int]]:
    """(counts destination-major, order: segment-major positions in sent order)."""
    bags = len(lengths)
    counts = [0] * (world * bags)
    bag_of = [b for b, n in enumerate(lengths) for _ in range(n)]
    for d, b in zip(dest, bag_of, strict=True):
        counts[d * bags + b] += 1
    order = [i for d in range(world) for i, x in enumerate(dest) if x == d]
    return counts, order


CASES = [
    # (world, bags, max length, name)
    (1, 6, 4, "one rank"),
    (2, 0, 3, "no bags"),
    (2, 5, 0, "only empty bags"),
    (2, 40, 5, "two ranks"),
    (3, 33, 6, "three ranks"),
    (4, 57, 3, "four ranks"),
]


@pytest.mark.parametrize(("world", "bags", "max_length", "name"), CASES)
@pytest.mark.parametrize("seed", range(4))
def test_partition_and_sort_match_the_reference(
    world: int, bags: int, max_length: int, name: str, seed: int
) -> None:
    g = seeded_generator("bucketize", name, seed)
    lengths = random_lengths(bags, max_length, g) if bags else torch.zeros(0, dtype=torch.int64)
    n = int(lengths.sum())
    dest = torch.randint(0, world, (n,), generator=g)
    if seed == 3 and n:
        dest.fill_(world - 1)  # every id to the last rank
    counts, order = _reference(dest.tolist(), lengths.tolist(), world)
    values = torch.randint(0, 1000, (n,), generator=g)

    sort_counts, sort_order = _sort(dest, lengths, world)
    assert sort_counts.tolist() == counts
    assert sort_order.tolist() == order

    assert world <= _PARTITION_MAX_WORLD
    part_counts, place = _partition(dest, lengths, world)
    assert part_counts.tolist() == counts
    assert _scatter(values, place).tolist() == values[order].tolist()
    assert _scatter(torch.arange(n), place).tolist() == order


def _tables(world: int, rows: list[int], uniform: bool) -> list[Any]:
    """Tables split into row blocks over `world` ranks: TorchRec's row_wise blocks
    (`ceil(rows / world)`, the last shorter) or uneven ones (then `_blocks` is None)."""
    tables = []
    for i, n in enumerate(rows):
        if uniform:
            block = -(-n // world)
            bounds = [min(k * block, n) for k in range(world + 1)]
        else:  # quadratic cut points: blocks of growing size
            bounds = [0, *((n * k * k) // (world * world) for k in range(1, world)), n]
        shards = tuple(
            Shard(rank=(r + i) % world, row_offset=a, rows=b - a, col_offset=0, cols=4)
            for r, (a, b) in enumerate(itertools.pairwise(bounds))
        )
        tables.append(
            types.SimpleNamespace(
                name=f"t{i}",
                shards=shards,
                config=types.SimpleNamespace(num_embeddings=n),
            )
        )
    return tables


def _naive(
    tables: list[Any], segments: list[Segment], kjt: KeyedJaggedTensor, world: int
) -> list[tuple[list[int], list[int], list[float]]]:
    """Per rank (lengths segment-major, ids, weights) by walking every id."""
    table_of = {t.name: t for t in tables}
    batch = kjt.stride()
    per_key = kjt.to_dict()
    out: list[tuple[list[int], list[int], list[float]]] = [([], [], []) for _ in range(world)]
    for s in segments:
        jt = per_key[s.feature]
        ids, weights = jt.values().tolist(), jt.weights().tolist()
        offsets = jt.offsets().tolist()
        for b in range(batch):
            counts = [0] * world
            for i in range(offsets[b], offsets[b + 1]):
                shard = next(
                    x
                    for x in table_of[s.table].shards
                    if x.row_offset <= ids[i] < x.row_offset + x.rows
                )
                counts[shard.rank] += 1
                out[shard.rank][1].append(ids[i] - shard.row_offset)
                out[shard.rank][2].append(weights[i])
            for r in range(world):
                out[r][0].append(counts[r])
    return out


@pytest.mark.parametrize("uniform", [True, False])
@pytest.mark.parametrize("world", [1, 2, 3, 5])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_row_bucketizer_against_a_naive_walk(uniform: bool, world: int, dtype: torch.dtype) -> None:
    g = seeded_generator("row-bucketizer", uniform, world, str(dtype))
    rows = [7, 10, 3, 16]
    tables = _tables(world, rows, uniform)
    # a feature read by two tables (segments 2 and 3), and one key not read at all
    reads = [("t0", "f0"), ("t1", "f1"), ("t2", "f2"), ("t3", "f2")]
    segments = [
        Segment(index=j, table=t, feature=f, name=f"{f}@{t}", dim=4)
        for j, (t, f) in enumerate(reads)
    ]
    batch = 6
    keys = ["f0", "f1", "f2", "unread"]
    lengths = random_lengths(len(keys) * batch, 4, g)
    per_key = lengths.view(len(keys), batch).sum(1).tolist()
    limits = [7, 10, 3, 5]  # f2's ids index t2 (3 rows) and t3
    values = torch.cat(
        [torch.randint(0, m, (n,), generator=g) for m, n in zip(limits, per_key, strict=True)]
    ).to(dtype)
    weights = torch.rand(values.numel(), generator=g)
    kjt = KeyedJaggedTensor(keys, values, weights=weights, lengths=lengths, stride=batch)
    env = ShardingEnv.from_local(world, 0)
    bucketizer = RowBucketizer(segments, cast(Any, tables), env)
    assert (bucketizer._blocks is not None) == (uniform or world == 1)
    feature_pos = {k: i for i, k in enumerate(keys)}
    per_rank, order = bucketizer(kjt, feature_pos)
    expected = _naive(tables, segments, kjt, world)
    for got, (want_lengths, want_ids, want_weights) in zip(per_rank, expected, strict=True):
        assert got.keys() == [s.name for s in segments]
        assert got.lengths().tolist() == want_lengths
        assert got.values().dtype == dtype
        assert got.values().tolist() == want_ids
        assert torch.equal(got.weights(), torch.tensor(want_weights))
    # `order`: segment-major position of each sent id (weights tell the ids apart)
    offsets = kjt.offset_per_key()
    segment_major = torch.cat(
        [
            weights[offsets[feature_pos[s.feature]] : offsets[feature_pos[s.feature] + 1]]
            for s in segments
        ]
    )
    assert order is not None
    assert torch.equal(torch.cat([r.weights() for r in per_rank]), segment_major[order])
    _, without = bucketizer(kjt, feature_pos, with_order=False)
    assert without is None
