"""TorchRec's shard perf formula (`torchrec.distributed.planner.shard_estimators`, perf).

A shard's time (ms) is bytes moved over a bandwidth (bytes/ms, TorchRec's constants). With b the
ids the shard's rank reads per batch (sum of batch * pooling factor * num poolings, divided by
W for row_wise and by L for table_row_wise), o the outputs (sum of batch * num poolings when
pooled, else b), W the world size, L the local world size, d the shard's dim:

    input read       ceil(b W 8)            (x2 when weighted)
    lookup           b W d' t               t the table's element bytes; d' = max(d, 32) for tw/cw
    output write     o W d c                c the comm element bytes
    fwd_compute      (input + lookup + output) * penalty / kernel bandwidth
                     penalty (tw/cw only): 1.15 for 64 <= d < 128, 1.75 for d < 64
    fwd_comms        output / (inter-host bw if W > L else intra-host bw)
    bwd_compute      fwd_compute * 2 (+ fwd_compute * 1.1 for weighted features)
    bwd_comms        like fwd_comms; row-wise types add output * 2.455 / kernel bandwidth
    prefetch_compute (fused_uvm_caching with CacheParams.stats) fetched rows / divisor of b * d t
                     / hbm-to-ddr bw; fetched rows = stats.expected_lookups *
                     stats.expected_miss_rate(load factor)
    input_dist_comms ceil(b_all W 8) / (the fwd_comms bandwidth), b_all the ids before the
                     row-wise division (every id crosses the input all-to-all once); 0 for dp

table_row_wise sends its outputs within the host, and (W > L) a further L / W of them across
hosts. data_parallel has no forward comms; its backward is an all-reduce of the table
(size * (2n - 1) / n / (inter-host bw * L), n = min(W / L, 2), doubled beyond 2 hosts) plus
element-wise optimizer kernels (size * 9.22 / kernel bandwidth). Our own cost model
(`shardrec_planner.estimator`, seconds, measured bandwidths) is what our planner uses by default.
"""

from __future__ import annotations

import dataclasses
import math

from shardrec_planner.constants import (
    BATCHED_COPY_PERF_FACTOR,
    BIGINT_DTYPE,
    BWD_COMPUTE_MULTIPLIER,
    CROSS_NODE_BANDWIDTH,
    DDR_MEM_BW,
    DP_ELEMENTWISE_KERNELS_PERF_FACTOR,
    FULL_BLOCK_EMB_DIM,
    HALF_BLOCK_PENALTY,
    HBM_MEM_BW,
    HBM_TO_DDR_MEM_BW,
    INTRA_NODE_BANDWIDTH,
    QUARTER_BLOCK_PENALTY,
    UVM_CACHING_RATIO,
    WEIGHTED_FEATURE_BWD_COMPUTE_MULTIPLIER,
    WEIGHTED_KERNEL_MULTIPLIER,
    kernel_bw_lookup,
)
from shardrec_planner.enums import EmbeddingComputeKernel, ShardingType
from shardrec_planner.errors import PlannerError
from shardrec_planner.offload_stats import _validate_perf
from shardrec_planner.planner_types import Perf, ShardingOption
from shardrec_planner.shard_storage import (
    OptionEstimator,
    OptionInputs,
    _batch_totals,
    output_data_type_size,
)


def _expected_cache_fetches(option: ShardingOption, ratio: float | None) -> float:
    """Rows a `fused_uvm_caching` table fetches into its cache per batch: the cache statistics'
    `expected_lookups * expected_miss_rate(load factor)` (0 without statistics)."""
    stats = option.cache_params.stats if option.cache_params else None
    if stats is None or option.compute_kernel != EmbeddingComputeKernel.FUSED_UVM_CACHING.value:
        return 0.0
    miss_rate = stats.expected_miss_rate(ratio if ratio is not None else UVM_CACHING_RATIO)  # type: ignore[attr-defined]  # TorchRec's CacheStatistics
    return float(stats.expected_lookups) * float(miss_rate)  # type: ignore[attr-defined]  # TorchRec's CacheStatistics


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Load:
    """What one shard moves per batch (module docstring's b, o, W, L and element sizes)."""

    batch: tuple[float, float]
    """(b, o): the ids a shard reads and the embeddings it writes per batch."""
    world_size: int
    local_world_size: int
    input_bytes: float
    table_bytes: float
    a2a_bytes: tuple[float, float]
    sr_bytes: tuple[float, float]
    is_weighted: bool
    is_pooled: bool


def _backward(
    fwd_compute: float, is_weighted: bool, bwd_mult: float, weighted_mult: float
) -> float:
    bwd = fwd_compute * bwd_mult
    if is_weighted:
        bwd = bwd * weighted_mult + fwd_compute * WEIGHTED_KERNEL_MULTIPLIER
    return bwd


def _block_penalty(emb_dim: int) -> float:
    if emb_dim >= FULL_BLOCK_EMB_DIM:
        return 1.0
    return HALF_BLOCK_PENALTY if emb_dim >= 64 else QUARTER_BLOCK_PENALTY


class EmbeddingPerfEstimator(OptionEstimator):
    """Sets every shard's `perf` (ms) by TorchRec's formula (module docstring).

    Bandwidths are TorchRec's defaults in bytes/ms (`shardrec_planner.constants`); a topology
    that carries TorchRec-unit attributes `hbm_mem_bw`, `ddr_mem_bw`, `hbm_to_ddr_mem_bw`
    overrides the memory rates.
    """

    def estimate_option(self, option: ShardingOption, got: OptionInputs) -> None:
        topo = self._topology
        ratio = got.caching_ratio
        num_poolings, batch_sizes = got.num_poolings, got.batch_sizes
        c = self._constraints.get(option.name) if self._constraints else None
        module = option.module[1]
        weighted_fn = getattr(module, "is_weighted", None)
        if callable(weighted_fn):
            is_weighted = bool(weighted_fn())
        else:
            is_weighted = bool(c.is_weighted) if c else False
        option.is_weighted = is_weighted
        element = float(option.tensor.element_size())
        cache = option.cache_params
        option_perfs = self.perf_func_emb_wall_time(
            shard_sizes=[shard.size for shard in option.shards],
            compute_kernel=option.compute_kernel,
            compute_device=topo.compute_device,
            sharding_type=option.sharding_type,
            batch_sizes=batch_sizes,
            world_size=topo.world_size,
            local_world_size=topo.local_size,
            input_lengths=option.input_lengths,
            input_data_type_size=BIGINT_DTYPE,
            table_data_type_size=element,
            output_data_type_size=output_data_type_size(option),
            fwd_a2a_comm_data_type_size=element,
            bwd_a2a_comm_data_type_size=element,
            fwd_sr_comm_data_type_size=element,
            bwd_sr_comm_data_type_size=element,
            num_poolings=num_poolings,
            hbm_mem_bw=float(getattr(topo, "hbm_mem_bw", HBM_MEM_BW)),
            ddr_mem_bw=float(getattr(topo, "ddr_mem_bw", DDR_MEM_BW)),
            hbm_to_ddr_mem_bw=float(getattr(topo, "hbm_to_ddr_mem_bw", HBM_TO_DDR_MEM_BW)),
            intra_host_bw=float(getattr(topo, "intra_host_bw", INTRA_NODE_BANDWIDTH)),
            inter_host_bw=float(getattr(topo, "inter_host_bw", CROSS_NODE_BANDWIDTH)),
            bwd_compute_multiplier=BWD_COMPUTE_MULTIPLIER,
            weighted_feature_bwd_compute_multiplier=WEIGHTED_FEATURE_BWD_COMPUTE_MULTIPLIER,
            is_pooled=option.is_pooled,
            is_weighted=is_weighted,
            is_inference=self._is_inference,
            caching_ratio=ratio,
            prefetch_pipeline=bool(cache.prefetch_pipeline) if cache else False,
            expected_cache_fetches=_expected_cache_fetches(option, ratio),
        )
        for shard, perf in zip(option.shards, option_perfs, strict=True):
            _validate_perf(perf, option.name, option.sharding_type)
            shard.perf = perf

    @classmethod
    def perf_func_emb_wall_time(
        cls,
        shard_sizes: list[list[int]],
        compute_kernel: str,
        compute_device: str,
        sharding_type: str,
        batch_sizes: list[int],
        world_size: int,
        local_world_size: int,
        input_lengths: list[float],
        input_data_type_size: float,
        table_data_type_size: float,
        output_data_type_size: float,
        fwd_a2a_comm_data_type_size: float,
        bwd_a2a_comm_data_type_size: float,
        fwd_sr_comm_data_type_size: float,
        bwd_sr_comm_data_type_size: float,
        num_poolings: list[float],
        hbm_mem_bw: float,
        ddr_mem_bw: float,
        hbm_to_ddr_mem_bw: float,
        intra_host_bw: float,
        inter_host_bw: float,
        bwd_compute_multiplier: float,
        weighted_feature_bwd_compute_multiplier: float,
        is_pooled: bool,
        is_weighted: bool = False,
        caching_ratio: float | None = None,
        is_inference: bool = False,
        prefetch_pipeline: bool = False,
        expected_cache_fetches: float = 0,
    ) -> list[Perf]:
        """The perf of each shard (`shard_sizes` are [rows, cols]); module docstring."""
        device_bw = kernel_bw_lookup(
            compute_device,
            compute_kernel,
            hbm_mem_bw,
            ddr_mem_bw,
            hbm_to_ddr_mem_bw,
            caching_ratio,
            prefetch_pipeline,
        )
        if device_bw is None:
            raise PlannerError(
                f"no kernel bandwidth for compute device {compute_device!r} and compute kernel "
                f"{compute_kernel!r}; use a kernel that device runs (e.g. 'fused')"
            )
        st = sharding_type
        divide = {
            ShardingType.ROW_WISE.value: world_size,
            ShardingType.TABLE_ROW_WISE.value: local_world_size,
            ShardingType.GRID_SHARD.value: local_world_size,
        }.get(st, 1)
        known = {t.value for t in ShardingType}
        if st not in known:
            raise ValueError(f"unknown sharding type {st!r}; valid: {sorted(known)}")
        inputs, outputs = _batch_totals(input_lengths, num_poolings, batch_sizes, is_pooled, divide)
        load = _Load(
            batch=(inputs, outputs),
            world_size=world_size,
            local_world_size=local_world_size,
            input_bytes=input_data_type_size,
            table_bytes=table_data_type_size,
            a2a_bytes=(fwd_a2a_comm_data_type_size, bwd_a2a_comm_data_type_size),
            sr_bytes=(fwd_sr_comm_data_type_size, bwd_sr_comm_data_type_size),
            is_weighted=is_weighted,
            is_pooled=is_pooled,
        )
        # Every id of the global batch crosses the input all-to-all once (weights not counted).
        input_dist_bytes = math.ceil(inputs * divide * world_size * input_data_type_size)
        mults = (bwd_compute_multiplier, weighted_feature_bwd_compute_multiplier)
        bws = (intra_host_bw, inter_host_bw, hbm_to_ddr_mem_bw)
        perfs = []
        for rows, dim in shard_sizes:
            if st == ShardingType.DATA_PARALLEL.value:
                perf = cls._dp_perf(load, rows * dim, dim, device_bw, inter_host_bw, mults)
            else:
                fetches = expected_cache_fetches / divide
                perf = cls._sharded_perf(st, load, dim, device_bw, bws, mults, is_inference)
                perf.prefetch_compute = fetches * dim * table_data_type_size / hbm_to_ddr_mem_bw
                comms_bw = inter_host_bw if world_size > local_world_size else intra_host_bw
                perf.input_dist_comms = input_dist_bytes / comms_bw
            perfs.append(perf)
        return perfs

    @staticmethod
    def _sharded_perf(
        st: str,
        load: _Load,
        dim: int,
        device_bw: float,
        bws: tuple[float, float, float],
        mults: tuple[float, float],
        is_inference: bool,
    ) -> Perf:
        intra_bw, inter_bw, _ = bws
        w, lw = load.world_size, load.local_world_size
        b, o = load.batch
        tw_like = st in (
            ShardingType.TABLE_WISE.value,
            ShardingType.COLUMN_WISE.value,
            ShardingType.TABLE_COLUMN_WISE.value,
        )
        twrw = st in (ShardingType.TABLE_ROW_WISE.value, ShardingType.GRID_SHARD.value)
        input_read = math.ceil(b * w * load.input_bytes)
        if load.is_weighted:
            input_read *= 2
        lookup_dim = max(dim, 32) if tw_like else dim
        lookup = b * w * lookup_dim * load.table_bytes
        # tw/cw send their outputs by all-to-all; row-wise types reduce-scatter pooled outputs.
        comm = load.a2a_bytes if tw_like or (not twrw and not load.is_pooled) else load.sr_bytes
        fwd_out = o * w * dim * comm[0]
        bwd_out = o * w * dim * comm[1]
        penalty = _block_penalty(dim) if tw_like else 1.0
        fwd_compute = (input_read + lookup + fwd_out) * penalty / device_bw
        if twrw:
            fwd_comms = fwd_out / intra_bw
            if w > lw:
                cross = o * w * dim * load.a2a_bytes[0]
                fwd_comms += cross * (lw / w) / inter_bw
            bwd_comms = bwd_out / intra_bw
        else:
            comms_bw = inter_bw if w > lw else intra_bw
            fwd_comms = fwd_out / comms_bw
            bwd_comms = bwd_out / comms_bw
        if is_inference and not twrw:
            return Perf(fwd_compute=fwd_compute, fwd_comms=fwd_comms, bwd_compute=0, bwd_comms=0)
        if not tw_like:
            bwd_comms += bwd_out * BATCHED_COPY_PERF_FACTOR / device_bw
        return Perf(
            fwd_compute=fwd_compute,
            fwd_comms=fwd_comms,
            bwd_compute=_backward(fwd_compute, load.is_weighted, *mults),
            bwd_comms=bwd_comms,
        )

    @staticmethod
    def _dp_perf(
        load: _Load,
        grad_num_elem: int,
        dim: int,
        device_bw: float,
        inter_bw: float,
        mults: tuple[float, float],
    ) -> Perf:
        w, lw = load.world_size, load.local_world_size
        b, o = load.batch
        input_read = math.ceil(b * load.input_bytes)
        if load.is_weighted:
            input_read *= 2
        lookup = b * dim * load.table_bytes
        output = o * dim * load.table_bytes
        table = grad_num_elem * load.table_bytes
        fwd_compute = (input_read + lookup + output) / device_bw
        nodes = min(w / lw, 2)
        all_reduce = table * (2 * nodes - 1) / nodes / (inter_bw * lw)
        if w > 2 * lw:
            all_reduce *= 2
        optimizer = table * DP_ELEMENTWISE_KERNELS_PERF_FACTOR / device_bw
        return Perf(
            fwd_compute=fwd_compute,
            fwd_comms=0,
            bwd_compute=_backward(fwd_compute, load.is_weighted, *mults),
            bwd_comms=all_reduce + optimizer,
        )
