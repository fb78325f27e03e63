"""The candidate ways to shard each table: every allowed (sharding type, kernel) with its shards.

An option also says how its shards may be placed:

    fixed      shard i on rank i (row_wise, data_parallel)
    free       each shard on any rank (table_wise, column_wise)
    host       shard i on rank host*L + i, the host is chosen (table_row_wise)
    host_free  all shards on one host, each on any rank there (table_column_wise)
    grid       column block j occupies a whole host, hosts chosen per block (grid_shard)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from shardrec_planner.constraints import ParameterConstraints
from shardrec_planner.disk_tier import (
    TierEstimate,
    id_shares,
    table_lookups,
    tier_estimate,
    tier_load_factors,
    undominated,
    virtual_tier_estimate,
)
from shardrec_planner.enums import (
    TORCHREC_ONLY_KERNELS,
    VIRTUAL_TABLE_KERNELS,
    VIRTUAL_TABLE_SHARDING_TYPES,
    EmbeddingComputeKernel,
    ShardingType,
)
from shardrec_planner.errors import PlannerError
from shardrec_planner.estimator import UVM_KERNELS, Workload, estimate_shards
from shardrec_planner.geometry import (
    MIN_CW_DIM,
    ShardArrays,
    column_block_size,
    row_block_sizes,
    shard_arrays,
)
from shardrec_planner.kernel_choice import (
    RUNS_AS_FUSED,
    estimated_kernel,
    tiered_layout,
    virtual_tier_layout,
)
from shardrec_planner.sharder import TableInfo
from shardrec_planner.topology import Topology

PLACEMENT_KIND: dict[ShardingType, str] = {
    ShardingType.DATA_PARALLEL: "fixed",
    ShardingType.ROW_WISE: "fixed",
    ShardingType.TABLE_WISE: "free",
    ShardingType.COLUMN_WISE: "free",
    ShardingType.TABLE_ROW_WISE: "host",
    ShardingType.TABLE_COLUMN_WISE: "host_free",
    ShardingType.GRID_SHARD: "grid",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Option:
    """One way to shard one table, with per-shard estimates."""

    sharding_type: ShardingType
    kernel: EmbeddingComputeKernel
    shards: ShardArrays
    cost: npt.NDArray[np.float64]
    compute: npt.NDArray[np.float64]
    comm: npt.NDArray[np.float64]
    memory: npt.NDArray[np.float64]
    host_memory: npt.NDArray[np.float64]
    kind: str
    block: int  # shards per placement block: local size for host/grid, else 1
    disk: npt.NDArray[np.float64] | None = None
    """Bytes of disk per shard (tiered options' stores); None: no disk."""
    tier: TierEstimate | None = None
    """A tiered option's cache and disk figures (disk_tier.py)."""

    @functools.cached_property
    def disk_bytes(self) -> npt.NDArray[np.float64]:
        return np.zeros(len(self.cost)) if self.disk is None else self.disk

    @functools.cached_property
    def max_disk(self) -> float:
        return float(self.disk.max()) if self.disk is not None and len(self.disk) else 0.0

    @functools.cached_property
    def total_cost(self) -> float:
        return float(self.cost.sum())

    @functools.cached_property
    def max_cost(self) -> float:
        return float(self.cost.max()) if len(self.cost) else 0.0

    @functools.cached_property
    def max_memory(self) -> float:
        return float(self.memory.max()) if len(self.memory) else 0.0

    @functools.cached_property
    def max_host_memory(self) -> float:
        return float(self.host_memory.max()) if len(self.host_memory) else 0.0

    @functools.cached_property
    def total_memory(self) -> float:
        return float(self.memory.sum())

    @property
    def label(self) -> str:
        base = f"{self.sharding_type.value}/{self.kernel.value}"
        return base if self.tier is None else f"{base} (cache {self.tier.load_factor:g})"


def estimated_option(
    table: TableInfo,
    workload: Workload,
    topology: Topology,
    optimizer: tuple[float, float],
    cache_ratio: float | None,
    *,
    sharding_type: ShardingType,
    kernel: EmbeddingComputeKernel,
    shards: ShardArrays,
    block: int,
    tier_load_factor: float | None = None,
    cache_stats: object | None = None,
) -> Option:
    """The option of `shards` of `table` under `sharding_type` / `kernel`, with our cost model's
    estimates (`estimator.estimate_shards`, the kernel as estimated on the topology's device);
    `block` is the option's placement block (`Option.block`). A `key_value` option that runs
    tiered (`kernel_choice.tiered_layout`) is costed with a cache of `tier_load_factor` (default
    0.2, the lookup's) of its rows and `cache_stats` (`CacheParams.stats`): disk_tier.py; a
    virtual-table option on a layout it runs (`kernel_choice.virtual_tier_layout`) on the raw-id
    tier, its capacity as the cache (`disk_tier.virtual_tier_estimate`)."""
    est = estimate_shards(
        table,
        workload,
        sharding_type,
        estimated_kernel(kernel, topology.compute_device),
        shards,
        topology,
        optimizer,
        cache_ratio=cache_ratio,
    )
    memory, compute = est.memory_bytes, est.compute_s
    disk: npt.NDArray[np.float64] | None = None
    tier: TierEstimate | None = None
    if tiered_layout(sharding_type, kernel, topology.compute_device):
        assert est.state_bytes is not None  # set by estimate_shards
        tier = tier_estimate(
            rows=shards.rows,
            cols=shards.cols,
            shares=id_shares(shards.rows, table.rows, sharding_type in _ROW_SPLIT),
            table_ids=workload.ids_local * topology.world_size,
            optimizer=optimizer,
            load_factor=0.2 if tier_load_factor is None else tier_load_factor,
            cache_stats=cache_stats,
            disk_bw=topology.disk_bandwidth,
        )
        memory = np.ceil(memory - est.state_bytes + tier.memory_bytes)
        compute = compute + tier.seconds
        disk = tier.disk_bytes
    elif virtual_tier_layout(sharding_type, kernel, topology.compute_device):
        assert est.state_bytes is not None  # set by estimate_shards
        on_disk = kernel is EmbeddingComputeKernel.SSD_VIRTUAL_TABLE
        tier = virtual_tier_estimate(
            rows=shards.rows,
            cols=shards.cols,
            shares=id_shares(shards.rows, table.rows, sharding_type in _ROW_SPLIT),
            table_ids=workload.ids_local * topology.world_size,
            optimizer=optimizer,
            cache_bytes=est.state_bytes,
            cache_stats=cache_stats,
            bandwidth=topology.disk_bandwidth if on_disk else topology.ddr_mem_bw * 1000.0,
        )
        compute = compute + tier.seconds
        if on_disk:
            disk = tier.disk_bytes
        else:
            memory = memory + tier.disk_bytes  # the store in RAM
    return Option(
        sharding_type=sharding_type,
        kernel=kernel,
        shards=shards,
        cost=compute + est.comm_s,
        compute=compute,
        comm=est.comm_s,
        memory=memory,
        host_memory=est.host_memory_bytes,
        kind=PLACEMENT_KIND[sharding_type],
        block=block,
        disk=disk,
        tier=tier,
    )


def _kernels_for(
    allowed: Sequence[EmbeddingComputeKernel],
    compute_device: str,
    tier_beside: bool = False,
) -> list[EmbeddingComputeKernel]:
    """The kernels worth trying: the best on-device one, plus the UVM ones on GPUs, plus
    `key_value` where `tier_beside` (it runs tiered here and tiering is allowed: the planner
    chooses memory or disk).

    fused is never slower and never larger than dense in the model, so it wins when allowed; UVM
    kernels trade lookup speed for device memory, so the search keeps them as separate options.
    A kernel that runs as fused (`kernel_choice`: UVM kernels on cpu, key_value anywhere) is an
    option only where fused itself is not allowed (a constraint asking for it): the plan keeps
    the kernel asked for, estimated as fused.
    """
    on_device = [
        k for k in (EmbeddingComputeKernel.FUSED, EmbeddingComputeKernel.DENSE) if k in allowed
    ]
    uvm = [k for k in UVM_KERNELS if k in allowed] if compute_device != "cpu" else []
    if tier_beside and EmbeddingComputeKernel.KEY_VALUE in allowed:
        uvm.append(EmbeddingComputeKernel.KEY_VALUE)
    if on_device:
        return [on_device[0], *uvm]
    mapped = [k for k in allowed if k in RUNS_AS_FUSED and k not in uvm]
    return list(dict.fromkeys([*mapped[:1], *uvm]))


def _offered(sharder_kernels: Sequence[str], compute_device: str) -> list[EmbeddingComputeKernel]:
    """The kernels a sharder offers that shardrec runs; where it offers fused, also the kernels
    that run as fused (a GPU script's `fused_uvm_caching` constraint plans on cpu)."""
    known = {k.value for k in EmbeddingComputeKernel if k not in TORCHREC_ONLY_KERNELS}
    kernels = [EmbeddingComputeKernel(k) for k in sharder_kernels if k in known]
    if EmbeddingComputeKernel.FUSED in kernels:
        kernels += [
            k
            for k in sorted(RUNS_AS_FUSED)
            if k not in kernels
            and (compute_device == "cpu" or k is EmbeddingComputeKernel.KEY_VALUE)
        ]
    return kernels


def _virtual_asked(
    st: ShardingType, sharder_kernels: Sequence[str], wanted: Sequence[object] | None
) -> list[EmbeddingComputeKernel]:
    """The virtual-table kernels the sharder offers for `st` (TorchRec's sharders: on cuda) and
    a constraint names (TorchRec guards them: never chosen unasked), on a type that runs them
    (`VIRTUAL_TABLE_SHARDING_TYPES`)."""
    if not wanted:
        return []
    return [
        k
        for k in sorted(VIRTUAL_TABLE_KERNELS)
        if k in wanted and k.value in sharder_kernels and st in VIRTUAL_TABLE_SHARDING_TYPES[k]
    ]


_ROW_SPLIT = {
    ShardingType.ROW_WISE: "world",
    ShardingType.TABLE_ROW_WISE: "local",
    ShardingType.GRID_SHARD: "local",
}
"""Sharding types that split rows into blocks of ceil(rows / n), over the world or a host."""


def _without_empty_row_blocks(
    types: Sequence[ShardingType], table: TableInfo, topology: Topology, where: str
) -> list[ShardingType]:
    """`types` less the row splits that would leave a rank without rows (a 1-row table over 4
    ranks): such a shard holds nothing yet joins every collective, and `shardrec train
    --sharding-type` refuses the same layouts. PlannerError when nothing else is allowed."""
    kept: list[ShardingType] = []
    for st in types:
        over = _ROW_SPLIT.get(st)
        n = topology.world_size if over == "world" else topology.local_size
        if over is None or 0 not in row_block_sizes(table.rows, n):
            kept.append(st)
    if not kept:
        raise PlannerError(
            f"{where}: {table.rows} row(s) cannot be split into row blocks for every rank "
            f"({topology.world_size} ranks, {topology.local_size} per host), and only "
            f"{[t.value for t in types]} are allowed; allow table_wise, column_wise or "
            "data_parallel for this table"
        )
    return kept


def table_options(
    table: TableInfo,
    sharder_types: Sequence[str],
    sharder_kernels: Mapping[str, Sequence[str]],
    constraints: ParameterConstraints | None,
    topology: Topology,
    batch_size: int,
    optimizer: tuple[float, float],
    auto_tier: bool = False,
) -> list[Option]:
    """Every option for `table` that the sharder offers and the constraints allow.

    Tiered options (`key_value` where it runs tiered: disk_tier.py) join the fused one where the
    constraints list both kernels, or where `auto_tier` is on and the constraints leave the
    kernel open; one option per cache size: the table's `CacheParams.load_factor` when set,
    else `disk_tier.tier_load_factors`. Raises PlannerError naming the table and the
    constraint when nothing is left.
    """
    offered = [ShardingType(t) for t in sharder_types]
    if constraints is not None:
        constraints.check_names(f"table {table.name!r}")
    wanted = (
        list(constraints.sharding_types) if constraints and constraints.sharding_types else None
    )
    types = [t for t in offered if wanted is None or t in wanted]
    where = f"table {table.name!r}" + (
        f" of module {table.module_path!r}" if table.module_path else ""
    )
    if not types:
        raise PlannerError(
            f"{where}: constraint sharding_types={[str(t) for t in wanted or []]} has nothing in "
            f"common with what its sharder offers {[t.value for t in offered]}; "
            "widen the constraint or use a sharder that supports those types"
        )
    types = _without_empty_row_blocks(types, table, topology, where)
    kernel_wanted = (
        list(constraints.compute_kernels) if constraints and constraints.compute_kernels else None
    )
    min_block = (constraints.min_partition if constraints else None) or MIN_CW_DIM
    workload = Workload.of(table, constraints, batch_size)
    cache = constraints.cache_params if constraints else None
    load_factor = cache.load_factor if cache is not None else None
    world, local = topology.world_size, topology.local_size
    width = column_block_size(table.dim, min_block)
    candidates: list[tuple[ShardingType, EmbeddingComputeKernel, bool]] = []
    kernel_conflicts: list[str] = []
    for st in types:
        # kernels shardrec does not run (quantized) are ignored; virtual tables where asked
        kernels = _offered(sharder_kernels.get(st.value, []), topology.compute_device)
        if kernel_wanted is not None:
            kernels = [k for k in kernels if k in kernel_wanted]
        tier_ok = tiered_layout(st, EmbeddingComputeKernel.KEY_VALUE, topology.compute_device)
        beside = tier_ok and (auto_tier if kernel_wanted is None else True)
        kernels = _kernels_for(kernels, topology.compute_device, beside)
        kernels += _virtual_asked(st, sharder_kernels.get(st.value, []), kernel_wanted)
        if not kernels:
            kernel_conflicts.append(f"{st.value} offers {list(sharder_kernels.get(st.value, []))}")
            continue
        # Options with the same shards as table_wise / column_wise (one rank per host, or one
        # column block) only add work to the search; they are dropped unless nothing else is left.
        duplicate = (
            st in (ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD) and local == 1
        ) or (
            st in (ShardingType.COLUMN_WISE, ShardingType.TABLE_COLUMN_WISE) and width == table.dim
        )
        candidates += [(st, k, duplicate) for k in kernels]
    kept = [c for c in candidates if not c[2]] or candidates
    kv = EmbeddingComputeKernel.KEY_VALUE
    if any(k is kv and tiered_layout(st, k, topology.compute_device) for st, k, _ in kept):
        # key_value asks for the disk tier: where some layout runs tiered, drop those that
        # would run it as fused (the whole table in memory)
        kept = [
            c for c in kept if c[1] is not kv or tiered_layout(c[0], kv, topology.compute_device)
        ]
    out: list[Option] = []
    geometry: dict[ShardingType, ShardArrays] = {}
    for st, kernel, _ in kept:
        if st not in geometry:
            geometry[st] = shard_arrays(
                st,
                table.rows,
                table.dim,
                world_size=world,
                local_world_size=local,
                column_block=width,
            )
        shards = geometry[st]
        block = local if st in (ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD) else 1
        factors: list[float | None] = [load_factor]
        if load_factor is None and tiered_layout(st, kernel, topology.compute_device):
            shares = id_shares(shards.rows, table.rows, st in _ROW_SPLIT)
            lookups = table_lookups(cache, workload.ids_local * world)
            factors = list(tier_load_factors(shards.rows, shares, lookups))
        sized = [
            estimated_option(
                table,
                workload,
                topology,
                optimizer,
                load_factor,
                sharding_type=st,
                kernel=kernel,
                shards=shards,
                block=block,
                tier_load_factor=factor,
                cache_stats=cache.stats if cache is not None else None,
            )
            for factor in factors
        ]
        out += undominated(sized) if len(sized) > 1 else sized
    if not out:
        raise PlannerError(
            f"{where}: constraint compute_kernels={[str(k) for k in kernel_wanted or []]} leaves "
            f"no kernel for sharding types {[t.value for t in types]} (the sharder offers: "
            f"{'; '.join(kernel_conflicts)}); widen the constraint"
        )
    return out
