"""MultiProcessTestBase / MultiProcessContext: TorchRec-style tests on the shared gloo pools."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from shardrec_testing import MultiProcessContext, MultiProcessTestBase, free_port


def _sum_of_ranks(rank: int, world_size: int, backend: str, scale: float) -> None:
    with MultiProcessContext(rank, world_size, backend, local_size=1) as ctx:
        assert ctx.pg is not None and ctx.device == torch.device("cpu")
        t = torch.tensor([scale * (rank + 1)])
        dist.all_reduce(t, group=ctx.pg)
        # reference: the arithmetic series 1..world_size, scaled
        assert float(t) == scale * world_size * (world_size + 1) / 2, float(t)
        assert os.environ["LOCAL_WORLD_SIZE"] == "1" and os.environ["LOCAL_RANK"] == "0"
        assert torch.are_deterministic_algorithms_enabled()
    assert not torch.are_deterministic_algorithms_enabled()  # restored
    assert dist.is_initialized()  # the pool's group stays up


def _per_rank(rank: int, world_size: int, value: int) -> None:
    with MultiProcessContext(rank, world_size) as ctx:
        t = torch.tensor([value])
        dist.all_reduce(t, group=ctx.pg)
        assert int(t) == sum(10 * (r + 1) for r in range(world_size)), int(t)
        assert value == 10 * (rank + 1)


def _fails_on_rank_one(rank: int, world_size: int) -> None:
    if rank == 1:
        raise KeyError(f"rank {rank} of {world_size}")


def _wrong_world(rank: int, world_size: int) -> None:
    with MultiProcessContext(rank, world_size + 1):
        pass


class TorchRecStyleTest(MultiProcessTestBase):
    def test_callable_runs_on_every_rank(self) -> None:
        for world in (2, 3):
            self._run_multi_process_test(
                callable=_sum_of_ranks, world_size=world, backend="gloo", scale=2.0
            )

    def test_kwargs_per_rank(self) -> None:
        self._run_multi_process_test_per_rank(
            callable=_per_rank,
            world_size=2,
            kwargs_per_rank=[{"value": 10}, {"value": 20}],
        )

    def test_failure_names_the_rank(self) -> None:
        with pytest.raises(KeyError, match="rank 1 of 2"):
            self._run_multi_process_test(callable=_fails_on_rank_one, world_size=2)

    def test_bad_arguments(self) -> None:
        with pytest.raises(ValueError, match="one per rank"):
            self._run_multi_process_test_per_rank(
                callable=_per_rank, world_size=2, kwargs_per_rank=[{"value": 1}]
            )
        with pytest.raises(ValueError, match="world_size=2"):
            self._run_multi_process_test(callable=_wrong_world, world_size=2)


def test_context_creates_and_destroys_a_group(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not dist.is_initialized()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    with MultiProcessContext(0, 1, use_deterministic_algorithms=False) as ctx:
        assert dist.is_initialized() and ctx.pg is not None and ctx.pg.size() == 1
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="rank 2 is outside"):
        MultiProcessContext(2, 2)
    with pytest.raises(ValueError, match="local_size 3 must be >= 1 and divide 4"):
        MultiProcessContext(0, 4, "gloo", 3)
    ctx = MultiProcessContext(1, 4, "gloo", 2, False, False)  # TorchRec's positional order
    assert (ctx.local_size, ctx.use_deterministic_algorithms, ctx.disable_cuda_tf_32) == (
        2,
        False,
        False,
    )
    assert ctx.device == torch.device("cpu") and ctx.pg is None
    assert MultiProcessContext(0, 2, "nccl").device == torch.device("cuda", 0)
