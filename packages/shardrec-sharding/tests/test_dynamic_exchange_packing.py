"""The out buffer of the shared dynamic-table id exchange: the native pass equals the torch
fallback (same buffer, sizes and way-back positions), and both equal a plain per-id reference
of the layout, over partitioned (1-3 parts), replicated and empty tables, 1-3 ranks and
extreme int64 ids, hashed and bucketed (`total_num_buckets`) tables."""

from __future__ import annotations

import pytest
import torch

from shardrec_sharding import _dynamic_exchange as X
from shardrec_sharding.dynamic_routing import ROUTE_SALT, owner_part
from shardrec_sharding.id_buckets import bucket_part
from shardrec_testing import seeded_generator

ROUTES = [
    ([(False, (0, 1), ()), (False, (1,), ()), (True, (), ()), (False, (2, 0, 1), ())], 3),
    ([(False, (0, 1), ())] * 8, 2),
    ([(True, (), ()), (False, (1,), ())], 2),
    ([(False, (0,), ()), (True, (), ())], 1),
    # bucketed: 5 buckets of 8 ids over 3 parts (2, 2, 1), a hashed and a replicated table
    ([(False, (2, 0, 1), (0, 16, 32, 40)), (False, (0, 1), ()), (True, (), ())], 3),
    ([(False, (0, 1), (0, 1 << 40, 1 << 41)), (False, (1, 0), (0, 6, 9))], 2),
]


def reference(routes, world: int, ids: torch.Tensor, lens: list[int]) -> X.Packed:  # type: ignore[no-untyped-def]
    """The layout (module docstring of `_dynamic_exchange`) by a loop over ids."""
    tables = len(routes)
    runs = [[[] for _ in range(tables)] for _ in range(world)]
    homes: list[tuple[int, int, int]] = []  # per id: (rank, table, index in its run) or -1
    at = 0
    for t, ((replicated, owners, bounds), n) in enumerate(zip(routes, lens, strict=True)):
        for x in ids[at : at + n].tolist():
            if replicated:
                for d in range(world):
                    runs[d][t].append(x)
                homes.append((-1, t, 0))
            else:
                one = torch.tensor([x])
                part = bucket_part(one, bounds) if bounds else owner_part(one, len(owners))
                d = owners[int(part)]
                homes.append((d, t, len(runs[d][t])))
                runs[d][t].append(x)
        at += n
    send, sizes, back = [], [], []
    start: dict[tuple[int, int], int] = {}
    for d in range(world):
        block = [0] + [len(r) for r in runs[d]] + [x for r in runs[d] for x in r]
        send += block
        sizes.append(len(block))
        pos = sum(back) + 1
        for t, (replicated, _, _) in enumerate(routes):
            if not replicated:
                start[(d, t)] = pos
                pos += len(runs[d][t])
        back.append(pos - sum(back))
    where = [-1 if d < 0 else start[(d, t)] + i for d, t, i in homes]
    return X.Packed(
        send=torch.tensor(send, dtype=torch.int64),
        sizes=sizes,
        back=back,
        where=torch.tensor(where, dtype=torch.int64),
    )


def _same(a: X.Packed, b: X.Packed) -> bool:
    return (
        torch.equal(a.send, b.send)
        and a.sizes == b.sizes
        and a.back == b.back
        and torch.equal(a.where, b.where)
    )


@pytest.mark.parametrize(
    ("routes", "world"), ROUTES, ids=["mixed-3", "row-8", "rep-tw", "one", "bucket-3", "bucket-2"]
)
def test_packing_matches_reference_native_and_torch(routes, world):  # type: ignore[no-untyped-def]
    plan = X.RoutePlan.of(routes, world, ROUTE_SALT)
    g = seeded_generator("dyn-exchange-pack", world, len(routes))
    for trial in range(4):
        lens = torch.randint(0, 40, (len(routes),), generator=g).tolist()
        if trial == 0:
            lens[0] = 0  # an empty table
        ids = torch.randint(-(2**63), 2**63 - 1, (sum(lens),), generator=g, dtype=torch.int64)
        if trial % 2:  # mostly inside the bucketed tables' id spaces, some past them
            ids = torch.randint(-3, 48, (sum(lens),), generator=g, dtype=torch.int64)
        if ids.numel() > 2:
            ids[:2] = torch.tensor([-(2**63), 2**63 - 1])
        want = reference(routes, world, ids, lens)
        assert _same(X._pack_torch(plan, ids, lens), want)
        if X._native() is not None:
            assert _same(X.pack(plan, ids, lens), want)
