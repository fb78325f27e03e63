"""Hand-written plans: `construct_module_sharding_plan(ebc, {"t0": table_wise(rank=0), ...})`.

Each helper returns a generator that, given a table's weight and the world, builds its
ParameterSharding with TorchRec's geometry (see `geometry`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

from shardrec_planner.enumerators import bucketed_row_shards
from shardrec_planner.enums import EmbeddingComputeKernel, ShardingType
from shardrec_planner.geometry import column_block_size, shard_geometry
from shardrec_planner.parameter_sharding import ParameterSharding
from shardrec_planner.shard_metadata import EnumerableShardingSpec, ShardMetadata, placement
from shardrec_planner.sharder import PlannerSharder, find_table_weights

ParameterShardingGenerator = Callable[
    [torch.Tensor, int, int, str, PlannerSharder | None], ParameterSharding
]
"""(weight, local_world_size, world_size, device_type, sharder) -> ParameterSharding."""


def _kernel(
    st: ShardingType, requested: str | None, device_type: str, sharder: PlannerSharder | None
) -> EmbeddingComputeKernel:
    if requested is not None:
        return EmbeddingComputeKernel(requested)
    if st is ShardingType.DATA_PARALLEL:
        return EmbeddingComputeKernel.DENSE
    allowed = ["fused"] if sharder is None else sharder.compute_kernels(st.value, device_type)
    if "fused" in allowed or not allowed:
        return EmbeddingComputeKernel.FUSED
    return EmbeddingComputeKernel(allowed[0])


def _build(
    st: ShardingType,
    shards: Sequence[tuple[tuple[int, int], tuple[int, int]]],
    ranks: Sequence[int],
    world_size: int,
    local_size: int,
    device_type: str,
    kernel: EmbeddingComputeKernel,
) -> ParameterSharding:
    for r in ranks:
        if not 0 <= r < world_size:
            raise ValueError(f"rank {r} is out of range for world size {world_size}")
    if st is ShardingType.DATA_PARALLEL:
        return ParameterSharding(sharding_type=st, compute_kernel=kernel, ranks=list(ranks))
    metas = tuple(
        ShardMetadata(
            shard_offsets=offsets,
            shard_sizes=sizes,
            placement=placement(device_type, rank, local_size),
        )
        for (sizes, offsets), rank in zip(shards, ranks, strict=True)
    )
    return ParameterSharding(
        sharding_type=st,
        compute_kernel=kernel,
        ranks=list(ranks),
        sharding_spec=EnumerableShardingSpec(shards=metas),
    )


def _shape(param: torch.Tensor) -> tuple[int, int]:
    if param.dim() != 2:
        raise ValueError(f"expected a 2-d table weight, got shape {tuple(param.shape)}")
    return int(param.shape[0]), int(param.shape[1])


Placement = tuple[Sequence[tuple[tuple[int, int], tuple[int, int]]], Sequence[int]]
"""(shards, rank of each shard)."""


def _generator(
    st: ShardingType,
    compute_kernel: str | None,
    place: Callable[[int, int, int, int], Placement],
) -> ParameterShardingGenerator:
    """The generator of one helper: `place(rows, dim, local, world)` picks the shards and their
    ranks (raising ValueError for a choice that does not fit); the kernel is the requested one,
    else the sharder's (`_kernel`)."""

    def gen(
        param: torch.Tensor, local: int, world: int, device: str, sharder: PlannerSharder | None
    ) -> ParameterSharding:
        rows, dim = _shape(param)
        shards, ranks = place(rows, dim, local, world)
        kernel = _kernel(st, compute_kernel, device, sharder)
        return _build(st, shards, ranks, world, local, device, kernel)

    return gen


def _check_host(host_index: int, local: int, world: int) -> None:
    if not 0 <= host_index < world // local:
        raise ValueError(
            f"host_index {host_index} is out of range: {world // local} host(s) of {local} ranks"
        )


def data_parallel() -> ParameterShardingGenerator:
    """Replicate the table on every rank (kernel `dense`)."""
    return _generator(
        ShardingType.DATA_PARALLEL, None, lambda rows, dim, local, world: ([], range(world))
    )


def _whole_rows(
    st: ShardingType, ranks_of: Callable[[int], Sequence[int]]
) -> Callable[[int, int, int, int], Placement]:
    """A `place` for the types whose shards follow from the table alone (`shard_geometry`),
    placed on `ranks_of(world)`."""

    def place(rows: int, dim: int, local: int, world: int) -> Placement:
        shards = shard_geometry(st, rows, dim, world_size=world, local_world_size=local)
        return shards, ranks_of(world)

    return place


def table_wise(rank: int, compute_kernel: str | None = None) -> ParameterShardingGenerator:
    """Place the whole table on `rank`."""
    st = ShardingType.TABLE_WISE
    return _generator(st, compute_kernel, _whole_rows(st, lambda world: [rank]))


def row_wise(
    compute_kernel: str | None = None, num_buckets: int | None = None
) -> ParameterShardingGenerator:
    """Split rows into blocks of ceil(rows / world_size), block i on rank i; with
    `num_buckets` (TorchRec's argument: a table of that many equal row buckets, e.g. a raw-id
    table's `total_num_buckets`), each rank takes whole buckets, `num_buckets // world_size`
    and one more on the first `num_buckets % world_size` ranks."""
    st = ShardingType.ROW_WISE
    if num_buckets is None:
        return _generator(st, compute_kernel, _whole_rows(st, range))

    def place(rows: int, dim: int, local: int, world: int) -> Placement:
        shards = bucketed_row_shards(rows, dim, num_buckets, world)
        return [((s.size[0], s.size[1]), (s.offset[0], s.offset[1])) for s in shards], range(world)

    return _generator(st, compute_kernel, place)


def _column_ranks(
    st: ShardingType,
    ranks: Sequence[int] | None,
    compute_kernel: str | None,
) -> ParameterShardingGenerator:
    def place(rows: int, dim: int, local: int, world: int) -> Placement:
        if ranks is None:
            width = column_block_size(dim)
            chosen = [i % world for i in range(dim // width)]
        else:
            chosen = list(ranks)
            if not chosen or dim % len(chosen) != 0:
                raise ValueError(
                    f"embedding dim {dim} cannot be split evenly across ranks {chosen}"
                )
            width = dim // len(chosen)
        if st is ShardingType.TABLE_COLUMN_WISE:
            hosts = sorted({r // local for r in chosen})
            if len(hosts) != 1:
                raise ValueError(
                    f"table_column_wise ranks {chosen} span hosts {hosts} "
                    f"(local world size {local}); use column_wise to span hosts"
                )
        shards = shard_geometry(
            st, rows, dim, world_size=world, local_world_size=local, column_block=width
        )
        return shards, chosen

    return _generator(st, compute_kernel, place)


def column_wise(
    ranks: Sequence[int] | None = None, compute_kernel: str | None = None
) -> ParameterShardingGenerator:
    """Split the columns evenly over `ranks` (one block per listed rank, repeats allowed).

    Without `ranks`, blocks of at least 128 columns go to ranks 0, 1, ... in turn.
    """
    return _column_ranks(ShardingType.COLUMN_WISE, ranks, compute_kernel)


def table_column_wise(
    ranks: Sequence[int] | None = None, compute_kernel: str | None = None
) -> ParameterShardingGenerator:
    """Like column_wise, but all `ranks` must be on one host."""
    return _column_ranks(ShardingType.TABLE_COLUMN_WISE, ranks, compute_kernel)


def table_row_wise(
    host_index: int, compute_kernel: str | None = None
) -> ParameterShardingGenerator:
    """Row blocks of ceil(rows / local_world_size) on the ranks of host `host_index`."""
    st = ShardingType.TABLE_ROW_WISE

    def place(rows: int, dim: int, local: int, world: int) -> Placement:
        _check_host(host_index, local, world)
        shards = shard_geometry(st, rows, dim, world_size=world, local_world_size=local)
        return shards, [host_index * local + i for i in range(local)]

    return _generator(st, compute_kernel, place)


def grid_shard(
    host_indexes: Sequence[int], compute_kernel: str | None = None
) -> ParameterShardingGenerator:
    """Column blocks (at least 128 wide); block j is split row-wise over host `host_indexes[j]`."""
    st = ShardingType.GRID_SHARD

    def place(rows: int, dim: int, local: int, world: int) -> Placement:
        blocks = dim // column_block_size(dim)
        if len(host_indexes) != blocks:
            raise ValueError(
                f"grid_shard of dim {dim} has {blocks} column block(s); "
                f"got {len(host_indexes)} host index(es) {list(host_indexes)}"
            )
        for h in host_indexes:
            _check_host(h, local, world)
        shards = shard_geometry(st, rows, dim, world_size=world, local_world_size=local)
        return shards, [h * local + i for h in host_indexes for i in range(local)]

    return _generator(st, compute_kernel, place)


def construct_module_sharding_plan(
    module: nn.Module,
    per_param_sharding: Mapping[str, ParameterShardingGenerator],
    *,
    world_size: int,
    local_world_size: int | None = None,
    device_type: str = "cpu",
    sharder: PlannerSharder | None = None,
    local_size: int | None = None,
) -> dict[str, ParameterSharding]:
    """One module's plan from a generator per table; every table must be named exactly once.

    Tables are the sharder's shardable parameters, or, without a sharder, the module's
    `embedding_bag_configs()` / `embedding_configs()` tables. `local_size` is TorchRec's name for
    `local_world_size` (give one of them, or both equal).
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if local_size is not None and local_world_size not in (None, local_size):
        raise ValueError(
            f"local_size {local_size} and local_world_size {local_world_size} differ: "
            "they name the same thing, pass one of them"
        )
    if local_world_size is None:
        local_world_size = local_size
    local = world_size if local_world_size is None else local_world_size
    if local < 1 or world_size % local != 0:
        raise ValueError(
            f"local_world_size {local} must be >= 1 and divide world_size {world_size}"
        )
    params = find_table_weights(module) if sharder is None else sharder.shardable_parameters(module)
    missing = sorted(set(params) - set(per_param_sharding))
    extra = sorted(set(per_param_sharding) - set(params))
    if missing or extra:
        raise ValueError(
            f"per_param_sharding must name every table of the module exactly: "
            f"missing {missing}, unknown {extra}; tables are {sorted(params)}"
        )
    return {
        name: per_param_sharding[name](params[name], local, world_size, device_type, sharder)
        for name in params
    }
