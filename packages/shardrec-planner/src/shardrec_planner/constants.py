"""TorchRec's planner constants and kernel bandwidth table (`...planner.constants`).

These are the numbers of TorchRec's own perf model, in TorchRec's units: bandwidths in bytes per
millisecond, capacities in bytes. They serve the TorchRec-named parts (`kernel_bw_lookup`, the
estimators that carry TorchRec's names). Our planner's default cost model reads its bandwidths
from `Topology` in bytes per second (`shardrec_planner.topology`), not from this module.
"""

from __future__ import annotations

from shardrec_planner.enums import EmbeddingComputeKernel

_GIB = 1024 * 1024 * 1024
_MS_PER_S = 1000

MAX_SIZE: int = (1 << 63) - 1

INTRA_NODE_BANDWIDTH: float = 600 * _GIB / _MS_PER_S  # bytes/ms
CROSS_NODE_BANDWIDTH: float = 12.5 * _GIB / _MS_PER_S  # bytes/ms

MIN_CW_DIM: int = 128
POOLING_FACTOR: float = 1.0
NUM_POOLINGS: float = 1.0
BIGINT_DTYPE: int = 8

HBM_CAP: int = 32 * _GIB
DDR_CAP: int = 128 * _GIB
HUNDRED_GB: int = 100 * _GIB
SSD_CAP: int = 2 * 1024 * _GIB  # 2 TiB of disk per rank (TorchRec's default)
HBM_MEM_BW: float = 897 * _GIB / _MS_PER_S  # bytes/ms
DDR_MEM_BW: float = 51 * _GIB / _MS_PER_S  # bytes/ms
# A GPU reads host memory over PCIe, slower than the host reads its own DDR.
HBM_TO_DDR_MEM_BW: float = 32 * _GIB / _MS_PER_S  # bytes/ms
SSD_MEM_BW: float = 2 * _GIB / _MS_PER_S  # bytes/ms (one NVMe drive)
UVM_CACHING_RATIO: float = 0.2
KV_CACHING_RATIO: float = 0.2
"""The share of a key-value / virtual table's rows its device (L1) cache holds in the storage
estimate, unless the sharder's `fused_params['cache_load_factor']` says otherwise (TorchRec's)."""
BATCH_SIZE: int = 512

# TorchRec's empirical factors (its perf model multiplies by them).
BATCHED_COPY_PERF_FACTOR: float = 2.455
FULL_BLOCK_EMB_DIM: int = 128
HALF_BLOCK_PENALTY: float = 1.15
QUARTER_BLOCK_PENALTY: float = 1.75
BWD_COMPUTE_MULTIPLIER: float = 2
WEIGHTED_FEATURE_BWD_COMPUTE_MULTIPLIER: float = 1
WEIGHTED_KERNEL_MULTIPLIER: float = 1.1
DP_ELEMENTWISE_KERNELS_PERF_FACTOR: float = 9.22

# A kernel that reads rows through PCIe or from a cache runs at a tenth of its memory's rate.
_OFFLOAD_PENALTY = 10.0


def kernel_bw_lookup(
    compute_device: str,
    compute_kernel: str,
    hbm_mem_bw: float,
    ddr_mem_bw: float,
    hbm_to_ddr_mem_bw: float,
    caching_ratio: float | None = None,
    prefetch_pipeline: bool = False,
    ssd_mem_bw: float = SSD_MEM_BW,
) -> float | None:
    """The rate (bytes/ms) at which `compute_kernel` reads embedding rows on `compute_device`.

    A cached UVM kernel mixes the device rate (for the `caching_ratio` of rows in the cache) and
    the host-over-PCIe rate (for the rest); with a prefetch pipeline the cache is filled ahead of
    the lookup, so the lookup runs at the device rate. None for a pair TorchRec has no number for.
    """
    ratio = UVM_CACHING_RATIO if caching_ratio is None else caching_ratio
    kernel = str(compute_kernel)
    cached = (ratio * hbm_mem_bw + (1 - ratio) * hbm_to_ddr_mem_bw) / _OFFLOAD_PENALTY
    table: dict[tuple[str, str], float] = {
        ("cpu", EmbeddingComputeKernel.DENSE.value): 0.5 * ddr_mem_bw,
        ("cpu", EmbeddingComputeKernel.FUSED.value): 1.0 * ddr_mem_bw,
        ("cpu", "quant"): 1.0 * ddr_mem_bw,
        ("cpu", "key_value"): ssd_mem_bw,
        ("mtia", EmbeddingComputeKernel.DENSE.value): 0.5 * hbm_mem_bw,
        ("mtia", EmbeddingComputeKernel.FUSED.value): 1.0 * hbm_mem_bw,
        ("mtia", "quant"): 1.0 * hbm_mem_bw,
        ("cuda", EmbeddingComputeKernel.DENSE.value): 0.5 * hbm_mem_bw,
        ("cuda", EmbeddingComputeKernel.FUSED.value): 1.0 * hbm_mem_bw,
        ("cuda", EmbeddingComputeKernel.FUSED_UVM.value): hbm_to_ddr_mem_bw / _OFFLOAD_PENALTY,
        ("cuda", EmbeddingComputeKernel.FUSED_UVM_CACHING.value): cached,
        ("cuda", "quant"): 1.0 * hbm_mem_bw,
        ("cuda", "quant_uvm"): hbm_to_ddr_mem_bw / _OFFLOAD_PENALTY,
        ("cuda", "quant_uvm_caching"): cached,
        ("cuda", "key_value"): (ratio * hbm_mem_bw + (1 - ratio) * ssd_mem_bw) / _OFFLOAD_PENALTY,
        # raw-id virtual tables (TorchRec 1.8's rates; shardrec plans them, its modules refuse them)
        ("cuda", EmbeddingComputeKernel.SSD_VIRTUAL_TABLE.value): hbm_to_ddr_mem_bw,
        ("cuda", EmbeddingComputeKernel.DRAM_VIRTUAL_TABLE.value): hbm_to_ddr_mem_bw,
    }
    if (
        prefetch_pipeline
        and compute_device == "cuda"
        and kernel == EmbeddingComputeKernel.FUSED_UVM_CACHING.value
    ):
        return table[("cuda", EmbeddingComputeKernel.FUSED.value)]
    return table.get((compute_device, kernel))
