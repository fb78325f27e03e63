"""The names users type in plans and constraints: sharding types and compute kernels.

Both are string enums, so `ShardingType("row_wise") is ShardingType.ROW_WISE` and a plan's JSON
holds plain strings.
"""

from __future__ import annotations

import enum


class ShardingType(enum.StrEnum):
    """How one embedding table is split across ranks (TorchRec's names and geometry)."""

    DATA_PARALLEL = "data_parallel"
    """Every rank holds the whole table; gradients are all-reduced."""
    TABLE_WISE = "table_wise"
    """The whole table lives on one rank."""
    COLUMN_WISE = "column_wise"
    """Column blocks (at least 128 wide, dividing the dim) each live on one rank."""
    ROW_WISE = "row_wise"
    """Row blocks of ceil(rows / world_size), one per rank."""
    TABLE_ROW_WISE = "table_row_wise"
    """Row blocks of ceil(rows / local_world_size) on the ranks of one host."""
    TABLE_COLUMN_WISE = "table_column_wise"
    """Column blocks placed on ranks of one host."""
    GRID_SHARD = "grid_shard"
    """Column blocks, each split row-wise over the ranks of one host."""

    @classmethod
    def _missing_(cls, value: object) -> ShardingType:
        valid = ", ".join(repr(m.value) for m in cls)
        raise ValueError(f"unknown sharding type {value!r}; valid: {valid}")


class EmbeddingComputeKernel(enum.StrEnum):
    """Which lookup implementation a shard uses.

    `fused` applies the optimizer inside the backward pass (no gradient tensor is materialized);
    `dense` produces a gradient that a separate optimizer consumes. On GPUs, `fused_uvm` keeps the
    rows in host memory (unified virtual memory) and `fused_uvm_caching` adds a device cache of a
    fraction of them: slower lookups, little device memory. `batched_fused` and `batched_dense`
    are older TorchRec spellings and mean the same kernels.
    """

    DENSE = "dense"
    FUSED = "fused"
    FUSED_UVM = "fused_uvm"
    FUSED_UVM_CACHING = "fused_uvm_caching"
    BATCHED_DENSE = "dense"  # alias: TorchRec tutorials still use this name
    BATCHED_FUSED = "fused"  # alias: TorchRec tutorials still use this name
    # TorchRec's names for kernels shardrec does not execute (quantized-inference UVM, SSD and
    # parameter-server stores). They are named so TorchRec's planner parts can reason about
    # them; plans refuse them (TORCHREC_ONLY_KERNELS) except key_value, which runs as fused.
    QUANT = "quant"
    QUANT_UVM = "quant_uvm"
    QUANT_UVM_CACHING = "quant_uvm_caching"
    KEY_VALUE = "key_value"
    SSD_VIRTUAL_TABLE = "ssd_virtual_table"
    DRAM_VIRTUAL_TABLE = "dram_virtual_table"
    CUSTOMIZED_KERNEL = "customized_kernel"  # TorchRec's: a sharder's own, outside TorchRec

    @classmethod
    def _missing_(cls, value: object) -> EmbeddingComputeKernel:
        legacy = {"batched_dense": cls.DENSE, "batched_fused": cls.FUSED}
        if isinstance(value, str) and value in legacy:
            return legacy[value]
        valid = ", ".join(repr(m.value) for m in cls)
        raise ValueError(f"unknown compute kernel {value!r}; valid: {valid}")


TORCHREC_ONLY_KERNELS: frozenset[EmbeddingComputeKernel] = frozenset(
    {
        EmbeddingComputeKernel.QUANT,
        EmbeddingComputeKernel.QUANT_UVM,
        EmbeddingComputeKernel.QUANT_UVM_CACHING,
        EmbeddingComputeKernel.SSD_VIRTUAL_TABLE,
        EmbeddingComputeKernel.CUSTOMIZED_KERNEL,
        EmbeddingComputeKernel.DRAM_VIRTUAL_TABLE,
    }
)
"""Kernels plans refuse. `key_value`, like the UVM kernels, is accepted and runs as `fused`
(`kernel_choice`)."""

VIRTUAL_TABLE_KERNELS: frozenset[EmbeddingComputeKernel] = frozenset(
    {EmbeddingComputeKernel.SSD_VIRTUAL_TABLE, EmbeddingComputeKernel.DRAM_VIRTUAL_TABLE}
)
"""Among them, the raw-id tier kernels a hand-written plan may name for a table placed as
`VIRTUAL_TABLE_SHARDING_TYPES` allows (a dynamic table's rows behind a cache:
`kernel_choice.runs_virtual_tiered`); sharders offer them on cuda (`kernel_choice.sharded_kernels`)
and the planner's search picks them only where a constraint names them."""

VIRTUAL_TIER_SHARDING_TYPES: tuple[ShardingType, ...] = (
    ShardingType.TABLE_WISE,
    ShardingType.ROW_WISE,
    ShardingType.COLUMN_WISE,
    ShardingType.TABLE_COLUMN_WISE,
)
"""The sharding types the raw-id tier kernels run on (column-split: one tier per column block,
shardrec_sharding/virtual_tier.py, virtual_columns.py)."""

VIRTUAL_TABLE_SHARDING_TYPES: dict[EmbeddingComputeKernel, frozenset[ShardingType]] = {
    EmbeddingComputeKernel.SSD_VIRTUAL_TABLE: frozenset(VIRTUAL_TIER_SHARDING_TYPES),
    EmbeddingComputeKernel.DRAM_VIRTUAL_TABLE: frozenset(VIRTUAL_TIER_SHARDING_TYPES),
}
"""The one place that says which sharding types run each virtual-table kernel: `ParameterSharding`
refuses the kernel on any other type. Widen it when the sharded modules run another type."""


def executable_kernel(
    value: str, what: str, *, sharding_type: ShardingType | None = None
) -> EmbeddingComputeKernel:
    """`value` as a kernel shardrec runs; a TorchRec-only kernel is refused with the fix.
    `sharding_type`: the entry's (a virtual-table kernel runs on the types
    `VIRTUAL_TABLE_SHARDING_TYPES` lists for it)."""
    kernel = EmbeddingComputeKernel(value)
    runs_virtual = sharding_type in VIRTUAL_TABLE_SHARDING_TYPES.get(kernel, frozenset())
    if kernel in TORCHREC_ONLY_KERNELS and not runs_virtual:
        runs = VIRTUAL_TABLE_SHARDING_TYPES[EmbeddingComputeKernel.SSD_VIRTUAL_TABLE]
        types = [t.value for t in VIRTUAL_TIER_SHARDING_TYPES if t in runs]
        raise ValueError(
            f"{what}: compute kernel {kernel.value!r} is a TorchRec kernel shardrec does not "
            "execute (no SSD / parameter-server store, quantized kernels are planned as "
            "'dense'); use 'fused' ('fused_uvm', 'fused_uvm_caching' and 'key_value' also run "
            "as 'fused'; 'ssd_virtual_table' and 'dram_virtual_table' run a dynamic table "
            f"placed {', '.join(types[:-1])} or {types[-1]})"
        )
    return kernel
