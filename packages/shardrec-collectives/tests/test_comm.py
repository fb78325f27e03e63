"""comm helpers: launcher facts from an explicit environment, per-host groups on real ranks."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from shardrec_collectives import (
    ShardingEnv,
    get_group_rank,
    get_local_rank,
    get_local_size,
    get_num_groups,
    intra_and_cross_node_pg,
)
from shardrec_testing import RankContext


@pytest.mark.parametrize(
    ("environ", "world", "rank", "expected"),
    [
        ({"LOCAL_WORLD_SIZE": "4"}, 8, 5, (4, 1, 1, 2)),
        ({"LOCAL_WORLD_SIZE": "4", "LOCAL_RANK": "3"}, 8, 7, (4, 3, 1, 2)),
        ({"OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, 6, 5, (2, 1, 2, 3)),
        ({}, 6, 5, (6, 5, 0, 1)),  # unset: one host
        ({"LOCAL_WORLD_SIZE": "4"}, 6, 5, (6, 5, 0, 1)),  # does not divide: one host
        ({"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "7"}, 4, 3, (2, 1, 1, 2)),  # rank too big
    ],
)
def test_launcher_facts(
    environ: dict[str, str], world: int, rank: int, expected: tuple[int, int, int, int]
) -> None:
    got = (
        get_local_size(world, environ=environ),
        get_local_rank(world, rank, environ=environ),
        get_group_rank(world, rank, environ=environ),
        get_num_groups(world, environ=environ),
    )
    # reference: the torchrun layout, hosts of `local` consecutive ranks
    local = expected[0]
    assert world % local == 0
    assert got == expected == (local, expected[1], rank // local, world // local)


def test_bad_environment_value() -> None:
    with pytest.raises(ValueError, match="LOCAL_WORLD_SIZE='two'"):
        get_local_size(4, environ={"LOCAL_WORLD_SIZE": "two"})


def test_sharding_env_has_torchrec_process_group_name() -> None:
    env = ShardingEnv.from_local(2, 1)
    assert env.process_group is env.pg is None


def check_groups(ctx: RankContext, local: int) -> tuple[int, int, float, float]:
    intra, cross = intra_and_cross_node_pg(environ={"LOCAL_WORLD_SIZE": str(local)})
    assert intra is not None and cross is not None
    a = torch.tensor([float(ctx.rank + 1)])
    b = a.clone()
    dist.all_reduce(a, group=intra)
    dist.all_reduce(b, group=cross)
    assert intra_and_cross_node_pg(torch.device("meta")) == (None, None)
    assert ShardingEnv.from_process_group(ctx.pg).process_group is ctx.pg
    return intra.size(), cross.size(), float(a), float(b)


@pytest.mark.parametrize("local", [1, 2])
def test_intra_and_cross_node_pg(pool_factory, local: int) -> None:  # type: ignore[no-untyped-def]
    results = pool_factory(2).run(check_groups, local)
    for rank, (n_intra, n_cross, s_intra, s_cross) in enumerate(results):
        host, lr = divmod(rank, local)
        intra_ranks = [host * local + i for i in range(local)]
        cross_ranks = list(range(lr, 2, local))
        assert (n_intra, n_cross) == (len(intra_ranks), len(cross_ranks))
        assert s_intra == sum(r + 1 for r in intra_ranks)
        assert s_cross == sum(r + 1 for r in cross_ranks)
