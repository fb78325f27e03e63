"""Launcher facts and per-host process groups (TorchRec's `torchrec.distributed.comm`).

These are entry-point helpers: they read the launcher's environment (`torchrun` sets
`LOCAL_WORLD_SIZE` and `LOCAL_RANK`; MPI launchers their own names), which is why they, unlike
the rest of this package, look at environment variables. Pass `environ` to read another mapping.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch
import torch.distributed as dist

from shardrec_collectives.env import ShardingEnv
from shardrec_collectives.misc import split_by_host

__all__ = [
    "get_group_rank",
    "get_local_rank",
    "get_local_size",
    "get_num_groups",
    "intra_and_cross_node_pg",
]

_LOCAL_SIZE_VARS = (
    "LOCAL_WORLD_SIZE",
    "MPI_LOCALNRANKS",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MV2_COMM_WORLD_LOCAL_SIZE",
)
_LOCAL_RANK_VARS = (
    "LOCAL_RANK",
    "MPI_LOCALRANKID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
)


def _first_int(environ: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    for name in names:
        raw = environ.get(name)
        if raw is None or raw.strip() == "":
            continue
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(
                f"environment variable {name}={raw!r} is not an integer; the launcher sets it "
                "to a count of processes or a rank"
            ) from None
        if value >= 0:
            return value
    return None


def get_local_size(
    world_size: int | None = None, *, environ: Mapping[str, str] | None = None
) -> int:
    """Processes per host: `LOCAL_WORLD_SIZE` (or an MPI launcher's equivalent) when it is set
    and divides `world_size` (default: the default group's size), else `world_size` (one host).
    """
    if world_size is None:
        world_size = dist.get_world_size()
    local = _first_int(os.environ if environ is None else environ, _LOCAL_SIZE_VARS)
    if local is None or local == 0 or world_size % local != 0:
        return world_size
    return local


def get_local_rank(
    world_size: int | None = None,
    rank: int | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> int:
    """This process's rank on its host: `LOCAL_RANK` when set and below the local size, else
    `rank % get_local_size(world_size)` (`rank` default: this process's rank)."""
    env = os.environ if environ is None else environ
    local_size = get_local_size(world_size, environ=env)
    local_rank = _first_int(env, _LOCAL_RANK_VARS)
    if local_rank is not None and local_rank < local_size:
        return local_rank
    return (dist.get_rank() if rank is None else rank) % local_size


def get_group_rank(
    world_size: int | None = None,
    rank: int | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> int:
    """The index of this process's host: `rank // get_local_size(world_size)`."""
    if rank is None:
        rank = dist.get_rank()
    return rank // get_local_size(world_size, environ=environ)


def get_num_groups(
    world_size: int | None = None, *, environ: Mapping[str, str] | None = None
) -> int:
    """The number of hosts: `world_size // get_local_size(world_size)`."""
    if world_size is None:
        world_size = dist.get_world_size()
    return world_size // get_local_size(world_size, environ=environ)


def intra_and_cross_node_pg(
    device: torch.device | None = None,
    backend: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> tuple[dist.ProcessGroup | None, dist.ProcessGroup | None]:
    """This rank's (intra-host, cross-host) process groups of the default group.

    A collective: every rank calls it, and every call creates new groups (keep the result;
    TorchRec caches it in module globals, we do not). Host h is ranks
    `h * L .. (h + 1) * L - 1` with `L = get_local_size()`; the cross group of local rank l is
    ranks `l, l + L, l + 2L, ...`. On a `meta` device returns `(None, None)`. With one process
    there are no groups to create: the default group is both.
    """
    if device is not None and device.type == "meta":
        return None, None
    world = dist.group.WORLD
    if world is None:
        raise ValueError(
            "intra_and_cross_node_pg needs torch.distributed: call dist.init_process_group first"
        )
    env = ShardingEnv.from_process_group(world, torch.device("cpu") if device is None else device)
    local_size = get_local_size(env.world_size, environ=environ)
    if env.world_size == 1:
        return world, world
    groups = split_by_host(env, local_size, backend=backend)
    return groups.intra.require_pg(), groups.cross.require_pg()
