"""pytest fixtures over the shared rank pools.

A test package opts in from its `conftest.py`:

    from shardrec_testing.fixtures import pool_factory, rank_pool  # noqa: F401

and then either asks for a pool by world size,

    def test_x(pool_factory): pool_factory(3).run(fn)

or parametrizes the world size indirectly,

    @pytest.mark.parametrize("rank_pool", [1, 2, 3, 4], indirect=True)
    def test_y(rank_pool): rank_pool.run(fn)

Pools are started lazily, once per (world size, backend) per test process, and shared by every
test; `nccl` pools skip the test when fewer GPUs than ranks are visible.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

from shardrec_testing.pool import RankPool, close_shared_pools, shared_pool


def _get(world_size: int, backend: str = "gloo") -> RankPool:
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        pytest.skip(f"nccl with {world_size} ranks needs >= {world_size} GPUs (one per rank)")
    return shared_pool(world_size, backend)


@pytest.fixture(scope="session")
def pool_factory() -> Iterator[Callable[..., RankPool]]:
    """`pool_factory(world_size, backend="gloo")` -> the shared, started pool."""
    yield _get
    close_shared_pools()


@pytest.fixture
def rank_pool(request: pytest.FixtureRequest) -> RankPool:
    """The shared gloo pool whose world size is the (indirect) parameter, default 2.

    A parameter may also be a `(world_size, backend)` pair.
    """
    param = getattr(request, "param", 2)
    if isinstance(param, tuple):
        return _get(int(param[0]), str(param[1]))
    return _get(int(param))
