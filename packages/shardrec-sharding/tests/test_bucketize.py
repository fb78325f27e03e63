"""Row bucketization's two ways of ordering ids by destination rank against a naive loop.

`_partition` (running counts per destination, up to `_PARTITION_MAX_WORLD` ranks) and `_sort`
(stable sort, any world) must give the same per (rank, bag) counts and the same sent order:
each rank's ids in (segment, bag) order. The reference walks the ids one by one.
"""

from __future__ import annotations

import pytest
import torch

from shardrec_sharding.strategies._bucketize import (
    _PARTITION_MAX_WORLD,
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
