"""Small collectives the sharding and training layers need besides the embedding exchanges:
dense all-reduce, broadcast of initial weights, barriers, object exchange, per-host groups."""

from __future__ import annotations

import dataclasses
import time

import torch
import torch.distributed as dist

from shardrec_collectives import _primitives as prim
from shardrec_collectives._held import blocking, track
from shardrec_collectives.awaitable import Awaitable, NoWait
from shardrec_collectives.env import ShardingEnv

__all__ = [
    "HostGroups",
    "all_gather_ints",
    "all_gather_object",
    "all_reduce_sum",
    "barrier",
    "broadcast_",
    "split_by_host",
]


def all_reduce_sum(env: ShardingEnv, tensor: torch.Tensor) -> Awaitable[torch.Tensor]:
    """Sum `tensor` over ranks (out of place).

    Sends and receives: a tensor of `tensor`'s shape; the result is the element-wise sum of
    every rank's. Backward: all-reduce of the gradient.
    """
    if env.world_size == 1:
        return NoWait(tensor)
    out = tensor.detach().clone()
    work = track(dist.all_reduce(out, group=env.require_pg(), async_op=True))
    pending = prim.Pending(out, work)
    grad = prim.needs_grad(env, tensor)

    def reverse(g: torch.Tensor) -> torch.Tensor:
        g = g.clone()
        blocking(dist.all_reduce(g, group=env.require_pg(), async_op=True))
        return g

    return Awaitable(lambda: prim.link(tensor, pending.wait(), reverse, grad))


def broadcast_(env: ShardingEnv, tensor: torch.Tensor, src: int) -> torch.Tensor:
    """Overwrite `tensor` on every rank with rank `src`'s (in place, not differentiable).

    Sends (rank `src`): `tensor`. Receives (others): into `tensor`, same shape and dtype.
    Used to make replicated (data-parallel) parameters start identical.
    """
    if not 0 <= src < env.world_size:
        raise ValueError(f"src rank {src} is outside the world of {env.world_size} ranks")
    if env.world_size > 1:
        with torch.no_grad():
            blocking(
                dist.broadcast(
                    tensor, src=_global_rank(env, src), group=env.require_pg(), async_op=True
                )
            )
    return tensor


def barrier(env: ShardingEnv) -> None:
    """Return once every rank has called `barrier` (nothing is exchanged)."""
    if env.world_size > 1:
        blocking(dist.barrier(group=env.require_pg(), async_op=True))


def timed_all_to_all(env: ShardingEnv, numel: int, repeats: int) -> list[float]:
    """Seconds of each of `repeats` timed `all_to_all_single` calls (for calibration).

    Every rank sends `numel / world` float32 values to each rank (itself included) and receives
    as many: send, recv `(numel,)`, `numel` a multiple of `world_size`. One untimed call first
    (gloo sets connections up lazily); the ranks meet at a barrier before each timed call, so
    each time is one exchange, not a wait for a late peer.
    """
    world = env.world_size
    if numel <= 0 or numel % world:
        raise ValueError(f"numel must be a positive multiple of world_size={world}, got {numel}")
    pg = env.require_pg()
    send = torch.ones(numel, device=env.device)
    recv = torch.empty(numel, device=env.device)
    times: list[float] = []
    blocking(dist.all_to_all_single(recv, send, group=pg, async_op=True))
    for _ in range(repeats):
        blocking(dist.barrier(group=pg, async_op=True))
        start = time.perf_counter()
        blocking(dist.all_to_all_single(recv, send, group=pg, async_op=True))
        times.append(time.perf_counter() - start)
    return times


def all_gather_object(env: ShardingEnv, obj: object) -> list[object]:
    """Every rank's picklable `obj`, in rank order (for small metadata such as shard sizes)."""
    return prim.all_gather_objects(env, obj)


def all_gather_ints(env: ShardingEnv, value: int) -> list[int]:
    """Every rank's `value` (a Python int: a count, a step), in rank order."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"all_gather_ints: value must be an int, got {value!r}")
    ints: list[int] = []
    for rank, got in enumerate(all_gather_object(env, value)):
        if not isinstance(got, int):
            raise TypeError(f"all_gather_ints: rank {rank} sent {got!r}, not an int")
        ints.append(got)
    return ints


def _global_rank(env: ShardingEnv, group_rank: int) -> int:
    pg = env.require_pg()
    return dist.get_global_rank(pg, group_rank)


@dataclasses.dataclass(frozen=True)
class HostGroups:
    """This rank's two sub-environments for two-level (table_row_wise) sharding.

    intra: the ranks of this host (`local_world_size` of them), rank = local rank.
    cross: the ranks with this rank's local rank on every host, rank = host index.
    """

    intra: ShardingEnv
    cross: ShardingEnv
    local_world_size: int

    @property
    def host(self) -> int:
        return self.cross.rank


def split_by_host(
    env: ShardingEnv, local_world_size: int, *, backend: str | None = None
) -> HostGroups:
    """Create the per-host and cross-host process groups (a collective: every rank calls it).

    Ranks `h * local_world_size .. (h + 1) * local_world_size - 1` form host h. With
    `local_world_size == world_size` (one host), `cross` has one rank. `backend` is the new
    groups' backend (default: the world group's).
    """
    if local_world_size < 1 or env.world_size % local_world_size != 0:
        raise ValueError(
            f"local_world_size {local_world_size} must be >= 1 and divide world_size "
            f"{env.world_size}"
        )
    hosts = env.world_size // local_world_size
    host, local = divmod(env.rank, local_world_size)
    if env.world_size == 1:
        one = ShardingEnv(1, 0, None, env.device)
        return HostGroups(intra=one, cross=one, local_world_size=1)
    pg = env.require_pg()
    ranks = [dist.get_global_rank(pg, r) for r in range(env.world_size)]
    # new_group is collective over the whole world and must be called for every group, in
    # the same order, on every rank, including groups this rank is not part of.
    intra_pg = cross_pg = None
    for h in range(hosts):
        members = ranks[h * local_world_size : (h + 1) * local_world_size]
        group = dist.new_group(members, backend=backend, use_local_synchronization=False)
        if h == host:
            intra_pg = group
    for lr in range(local_world_size):
        members = ranks[lr::local_world_size]
        group = dist.new_group(members, backend=backend, use_local_synchronization=False)
        if lr == local:
            cross_pg = group
    assert intra_pg is not None and cross_pg is not None
    return HostGroups(
        intra=ShardingEnv(local_world_size, local, intra_pg, env.device),
        cross=ShardingEnv(hosts, host, cross_pg, env.device),
        local_world_size=local_world_size,
    )
