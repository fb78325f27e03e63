"""ShardingEnv: the process group, rank, world size and device a sharded module runs in."""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist

__all__ = ["ShardingEnv"]


@dataclasses.dataclass(frozen=True)
class ShardingEnv:
    """Where a sharded module runs: `rank` of `world_size` ranks joined by `pg`, on `device`.

    `pg` is `None` only for a local environment (`from_local`), which can run the collectives
    only when `world_size == 1`; collectives with one rank never communicate.
    """

    world_size: int
    rank: int
    pg: dist.ProcessGroup | None = None
    device: torch.device = dataclasses.field(default_factory=lambda: torch.device("cpu"))

    def __post_init__(self) -> None:
        if isinstance(self.world_size, bool) or not isinstance(self.world_size, int):
            raise TypeError(f"world_size must be an int, got {self.world_size!r}")
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise ValueError(
                f"rank {self.rank} is outside the world of {self.world_size} ranks "
                f"(valid: 0..{self.world_size - 1})"
            )
        device: object = self.device
        if not isinstance(device, torch.device):  # a string from an untyped caller
            object.__setattr__(self, "device", torch.device(str(device)))
        if self.pg is not None and self.pg.size() != self.world_size:
            raise ValueError(
                f"world_size {self.world_size} does not match the process group's size "
                f"{self.pg.size()}"
            )

    @classmethod
    def from_process_group(
        cls, pg: dist.ProcessGroup, device: torch.device | str | None = None
    ) -> ShardingEnv:
        """The environment of this process in `pg`.

        `device` defaults to the current CUDA device for an NCCL group and to CPU otherwise.
        """
        if device is None:
            backend = str(dist.get_backend(pg))
            device = (
                torch.device("cuda", torch.cuda.current_device())
                if backend == "nccl"
                else torch.device("cpu")
            )
        return cls(world_size=pg.size(), rank=dist.get_rank(pg), pg=pg, device=torch.device(device))

    @classmethod
    def from_local(
        cls, world_size: int, rank: int, device: torch.device | str = "cpu"
    ) -> ShardingEnv:
        """An environment without a process group (single-process use and planning)."""
        return cls(world_size=world_size, rank=rank, pg=None, device=torch.device(device))

    @property
    def process_group(self) -> dist.ProcessGroup | None:
        """`pg` under TorchRec's name (code written for TorchRec reads `env.process_group`)."""
        return self.pg

    @property
    def backend(self) -> str:
        """The process group's backend ("gloo", "nccl"), or "local" without one."""
        return "local" if self.pg is None else str(dist.get_backend(self.pg))

    def require_pg(self) -> dist.ProcessGroup:
        """The process group, or a `ValueError` explaining that collectives need one."""
        if self.pg is None:
            raise ValueError(
                f"this ShardingEnv (rank {self.rank} of {self.world_size}) has no process group; "
                "collectives across more than one rank need ShardingEnv.from_process_group(pg)"
            )
        return self.pg
