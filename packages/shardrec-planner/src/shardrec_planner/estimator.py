"""Storage and step-time estimates for the shards of one table (the cost model of docs/planner.md).

All estimates are per training step. Bytes are exact counts of what a shard stores or moves;
seconds are bytes divided by a bandwidth of the Topology (measured by `calibrate`, or defaults).

For a shard of `r` rows x `c` columns of a table with R rows, on a world of W ranks:

    ids_in   ids the shard looks up: the global batch's ids (table_wise, column-split types),
             r / R of them (row-split types: uniform access), the local batch's (data_parallel)
    bags     pooled outputs the shard produces: global batch x poolings (local for data_parallel)
    compute  fwd = (ids_in * c * elem + bags * c * 4) / kernel_bw
             kernel_bw: fused = lookup_bw, dense = lookup_bw / 2, fused_uvm = hbm_to_ddr_bw / 10,
             fused_uvm_caching = (ratio * lookup_bw + (1 - ratio) * hbm_to_ddr_bw) / 10
             (TorchRec's factors)
             bwd = 2 * fwd  (gradient scatter + optimizer update, TorchRec's multiplier)
    comm     input dist  = ids_in * (8 [+4 weighted]) + bags * 4 lengths, at the all-to-all bw
             output dist = bags * c * 4 forward, and the same gradient backward; table_row_wise and
             grid_shard reduce-scatter inside the host, then send 1/local of it across hosts
             data_parallel: all-reduce of the table's gradient, 2 (W-1)/W * R * D * elem bytes,
             plus a dense optimizer pass over the table
    storage  weights r*c*elem + optimizer state + input/output buffers (+ a full gradient for
             data_parallel); UVM kernels keep weights and state in host memory instead, and the
             caching kernel keeps `ratio` of them on the device too
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from shardrec_planner.constraints import DefaultPoolingFactors, ParameterConstraints
from shardrec_planner.dynamic_storage import MAP_PROBE_BYTES
from shardrec_planner.enums import EmbeddingComputeKernel, ShardingType
from shardrec_planner.geometry import ShardArrays
from shardrec_planner.sharder import TableInfo
from shardrec_planner.topology import Topology

BWD_COMPUTE_MULTIPLIER = 2.0
DENSE_KERNEL_BW_FACTOR = 0.5
INDEX_BYTES = 8
WEIGHT_BYTES = 4
LENGTH_BYTES = 4
OUTPUT_BYTES = 4

# optimizer name -> (state floats per element, state floats per row)
_OPTIMIZER_STATE: dict[str, tuple[float, float]] = {
    "none": (0.0, 0.0),
    "sgd": (0.0, 0.0),
    "adagrad": (1.0, 0.0),
    "rowwise_adagrad": (0.0, 1.0),
    "adam": (2.0, 0.0),
    "adamw": (2.0, 0.0),
    "lamb": (2.0, 0.0),
    "partial_rowwise_adam": (1.0, 1.0),
    "partial_rowwise_lamb": (1.0, 1.0),
    "lars_sgd": (1.0, 0.0),
}


def optimizer_state(fused_params: Mapping[str, object] | None) -> tuple[float, float]:
    """(floats per element, floats per row) of optimizer state for the sharder's optimizer.

    Accepts names ("adam", "exact_row_wise_adagrad"), enum members whose value is such a name, and
    optimizer classes (`torch.optim.Adam`). No optimizer given means no state.
    """
    if not fused_params or fused_params.get("optimizer") is None:
        return (0.0, 0.0)
    raw = fused_params["optimizer"]
    name = raw.__name__ if isinstance(raw, type) else str(getattr(raw, "value", raw))
    key = name.split(".")[-1].lower().removeprefix("exact_").replace("row_wise", "rowwise")
    if key not in _OPTIMIZER_STATE:
        raise ValueError(
            f"unknown optimizer {raw!r} in fused_params; the planner sizes state for "
            f"{sorted(_OPTIMIZER_STATE)}"
        )
    return _OPTIMIZER_STATE[key]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload:
    """One table's input per step on one rank: ids looked up and pooled outputs produced."""

    ids_local: float
    bags_local: float
    weighted: bool

    @staticmethod
    def of(table: TableInfo, constraints: ParameterConstraints | None, batch_size: int) -> Workload:
        n = len(table.feature_names)
        c = constraints or ParameterConstraints()
        given = c.pooling_factors
        pfs = None if given is None or isinstance(given, DefaultPoolingFactors) else list(given)
        nps = list(c.num_poolings) if c.num_poolings is not None else None
        bss = list(c.batch_sizes) if c.batch_sizes is not None else None
        n = len(pfs or nps or bss or [0] * n)
        pfs = pfs or [1.0] * n
        nps = nps or [1.0] * n
        bss = bss or [batch_size] * n
        ids = sum(float(b) * p * q for b, p, q in zip(bss, pfs, nps, strict=True))
        bags = sum(float(b) * q for b, q in zip(bss, nps, strict=True))
        if not table.pooled:
            bags = ids  # sequence outputs: one row per id
        return Workload(ids_local=ids, bags_local=bags, weighted=c.is_weighted)


_ROW_SPLIT = (ShardingType.ROW_WISE, ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD)


def _global_a2a_seconds_per_byte(topology: Topology) -> float:
    world, local = topology.world_size, topology.local_size
    if world == 1:
        return 0.0
    same_host = (local - 1) / (world - 1)
    return (
        same_host / topology.intra_host_bytes_per_s
        + (1.0 - same_host) / topology.inter_host_bytes_per_s
    )


UVM_KERNELS = (EmbeddingComputeKernel.FUSED_UVM, EmbeddingComputeKernel.FUSED_UVM_CACHING)
UVM_PENALTY = 10.0


def kernel_bandwidth(
    kernel: EmbeddingComputeKernel, topology: Topology, cache_ratio: float | None = None
) -> float:
    """Bytes per second a lookup of `kernel` reads rows at; `cache_ratio` (a table's
    `CacheParams.load_factor`) overrides the topology's `uvm_cache_ratio`."""
    bw = topology.lookup_bandwidth
    if kernel is EmbeddingComputeKernel.DENSE:
        return bw * DENSE_KERNEL_BW_FACTOR
    if kernel is EmbeddingComputeKernel.FUSED_UVM:
        return topology.hbm_to_ddr_bandwidth / UVM_PENALTY
    if kernel is EmbeddingComputeKernel.FUSED_UVM_CACHING:
        ratio = topology.uvm_cache_ratio if cache_ratio is None else cache_ratio
        return (ratio * bw + (1.0 - ratio) * topology.hbm_to_ddr_bandwidth) / UVM_PENALTY
    return bw


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardEstimates:
    """Per-shard estimates of one (table, sharding type, kernel) choice, in shard order.

    `memory_bytes` is on the compute device; `host_memory_bytes` in host memory (UVM kernels).
    """

    cost_s: npt.NDArray[np.float64]
    compute_s: npt.NDArray[np.float64]
    comm_s: npt.NDArray[np.float64]
    memory_bytes: npt.NDArray[np.float64]
    host_memory_bytes: npt.NDArray[np.float64]
    ids_in: npt.NDArray[np.float64] | None = None
    """Ids each shard looks up per step."""
    state_bytes: npt.NDArray[np.float64] | None = None
    """Of `memory_bytes`, the shard's weights and optimizer state."""


def estimate_shards(
    table: TableInfo,
    workload: Workload,
    sharding_type: ShardingType,
    kernel: EmbeddingComputeKernel,
    shards: ShardArrays,
    topology: Topology,
    optimizer: tuple[float, float],
    cache_ratio: float | None = None,
) -> ShardEstimates:
    """Step time and storage of every shard of `table` under one sharding choice.

    `cache_ratio`: the cached share of a `fused_uvm_caching` table (its `CacheParams.load_factor`;
    None: the topology's `uvm_cache_ratio`)."""
    world = topology.world_size
    rows = shards.rows.astype(np.float64)
    cols = shards.cols.astype(np.float64)
    elem = float(table.element_bytes)
    bw = kernel_bandwidth(kernel, topology, cache_ratio)
    a2a = _global_a2a_seconds_per_byte(topology)
    idx = INDEX_BYTES + (WEIGHT_BYTES if workload.weighted else 0)
    st = sharding_type

    if st is ShardingType.DATA_PARALLEL:
        ids_in = np.full_like(rows, workload.ids_local)
        bags = np.full_like(rows, workload.bags_local)
    else:
        frac = rows / max(table.rows, 1) if st in _ROW_SPLIT else np.ones_like(rows)
        ids_in = workload.ids_local * world * frac
        bags = np.full_like(rows, workload.bags_local * world)

    fwd = (ids_in * cols * elem + bags * cols * OUTPUT_BYTES) / bw
    compute = fwd * (1.0 + BWD_COMPUTE_MULTIPLIER)
    table_bytes = rows * cols * elem
    out_bytes = bags * cols * OUTPUT_BYTES
    in_bytes = ids_in * idx + bags * LENGTH_BYTES
    if st is ShardingType.DATA_PARALLEL:
        allreduce = 2.0 * (world - 1) / world * table_bytes
        comm = allreduce * a2a
        compute = compute + 3.0 * table_bytes / bw  # dense optimizer pass over the table
        io_bytes = in_bytes + out_bytes + table_bytes  # the full gradient
    else:
        if st in (ShardingType.TABLE_ROW_WISE, ShardingType.GRID_SHARD):
            local = topology.local_size
            out_s = out_bytes / topology.intra_host_bytes_per_s if local > 1 else 0.0 * out_bytes
            out_s = out_s + out_bytes / local * a2a
        else:
            out_s = out_bytes * a2a
        comm = in_bytes * a2a + 2.0 * out_s  # forward outputs, backward output gradients
        io_bytes = in_bytes + out_bytes
    per_elem, per_row = optimizer
    state = table_bytes * (1.0 + per_elem) + rows * per_row * 4.0
    host = np.zeros_like(state)
    if kernel in UVM_KERNELS:
        host = state
        ratio = topology.uvm_cache_ratio if cache_ratio is None else cache_ratio
        cached = ratio if kernel is EmbeddingComputeKernel.FUSED_UVM_CACHING else 0
        state = state * cached
    if table.dynamic_bytes_per_row:
        # A dynamic table's id map and metadata (host memory) and one map probe per id: a
        # replicated (data_parallel) map probes every rank's ids.
        if topology.compute_device == "cpu":
            state = state + rows * table.dynamic_bytes_per_row
        else:
            host = host + rows * table.dynamic_bytes_per_row
        probed = ids_in * world if st is ShardingType.DATA_PARALLEL else ids_in
        compute = compute + probed * MAP_PROBE_BYTES / (topology.ddr_mem_bw * 1000.0)
    return ShardEstimates(
        cost_s=compute + comm,
        compute_s=compute,
        comm_s=comm,
        memory_bytes=np.ceil(state + io_bytes),
        host_memory_bytes=np.ceil(host),
        ids_in=np.asarray(ids_in, dtype=np.float64),
        state_bytes=np.asarray(state, dtype=np.float64),
    )
