"""Raw-id exchanges (dynamic tables): all_to_all_ids / return_ids / all_gather_ids against the
naive result, on 1 and 2 ranks, empty sends included."""

from __future__ import annotations

import pytest
import torch

from shardrec_collectives import ShardingEnv, all_gather_ids, all_to_all_ids, return_ids
from shardrec_testing import RankContext, seeded_generator


def sent(rank: int, world: int, case: int) -> tuple[torch.Tensor, list[int]]:
    g = seeded_generator("ids", rank, case)
    counts = [int(c) for c in torch.randint(0, 4, (world,), generator=g)]
    if case == 1:
        counts = [0] * world  # nothing to send
    ids = torch.randint(-(2**63), 2**63 - 1, (sum(counts),), generator=g)
    return ids, counts


def exchange(ctx: RankContext) -> list[tuple]:
    env = ShardingEnv.from_process_group(ctx.pg)
    out = []
    for case in range(2):
        ids, counts = sent(ctx.rank, ctx.world_size, case)
        got, recv = all_to_all_ids(env, ids, counts)
        back = return_ids(env, got * 3, recv, counts)  # the way back keeps the send order
        gathered, sizes = all_gather_ids(env, ids)
        out.append((got, recv, back, gathered, sizes))
    return out


@pytest.mark.parametrize("world", [1, 2])
def test_id_exchanges_match_the_naive_routing(pool_factory, world):  # type: ignore[no-untyped-def]
    results = pool_factory(world).run(exchange)
    for case in range(2):
        sends = [sent(r, world, case) for r in range(world)]
        for dest in range(world):
            got, recv, back, gathered, sizes = results[dest][case]
            pieces = []
            for ids, counts in sends:
                start = sum(counts[:dest])
                pieces.append(ids[start : start + counts[dest]])
            assert torch.equal(got, torch.cat(pieces))
            assert recv == [c[dest] for _, c in sends]
            assert torch.equal(back, sends[dest][0] * 3)
            assert torch.equal(gathered, torch.cat([ids for ids, _ in sends]))
            assert sizes == [ids.numel() for ids, _ in sends]


def test_counts_must_match_the_ids() -> None:
    with pytest.raises(ValueError, match="send_counts"):
        all_to_all_ids(ShardingEnv(world_size=1, rank=0), torch.zeros(3, dtype=torch.int64), [2])
