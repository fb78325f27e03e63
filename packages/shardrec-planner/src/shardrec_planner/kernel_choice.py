"""Which compute kernels a sharder offers, which one runs, and what becomes of a table's options.

TorchRec's sharders offer `dense` for data_parallel and `fused` for every other sharding type,
plus, on cuda, `fused_uvm` (rows in host memory), `fused_uvm_caching` (host rows with a device
cache) and `key_value` (rows in an SSD / parameter-server store). shardrec has one sharded lookup
for all of them: a plan may name any of the four, and the table is looked up by the plain `fused`
kernel, its rows and optimizer state in the compute device's memory. `executed_kernel` says which
kernel runs; `kernel_notes` turns a table's plan into the lines `plan.report()` prints, so that no
kernel or cache option is silently dropped:

    asked kernel        runs as   planner estimate (our cost model)
    fused_uvm           fused     on cpu: as fused; on cuda: TorchRec's UVM model (host memory)
    fused_uvm_caching   fused     on cpu: as fused; on cuda: UVM with CacheParams.load_factor
    key_value           fused     runs tiered (any sharding type but data_parallel,
                                  `TIERED_SHARDING_TYPES`: each rank's shard, a table, row block
                                  or column block, has its rows on disk behind its own cache in
                                  memory, `runs_tiered`); on cpu every such shard is priced on
                                  the disk tier (`tiered_layout`, disk_tier.py: its cache in
                                  memory, its rows and state on disk, misses from the hit rate
                                  scaled to its share of the ids); on cuda as fused

Cache options (`ParameterConstraints` -> `ParameterSharding`): `cache_params.load_factor` sets
the cached share in the estimates of a `fused_uvm_caching` table on cuda (TorchRec's storage and
perf formulas, and our cost model; on cpu the table is estimated as fused); the other cache
fields, `enforce_hbm` and `key_value_params` configure a device cache or store shardrec does not
have, and the report lists them as not applied.
`bounds_check_mode`: shardrec's lookups always refuse an out-of-range id with an error naming it
(TorchRec's FATAL); another mode is reported as such. `stochastic_rounding`: the fused optimizer
rounds to nearest; True is reported as not applied (it only matters for fp16/bf16 weights).

`ssd_virtual_table` / `dram_virtual_table` run as themselves on a dynamic (raw-id) table placed
as `enums.VIRTUAL_TABLE_SHARDING_TYPES` allows (table_wise, row_wise, column_wise or
table_column_wise; refused otherwise, hand-written plans only): every raw id's row in RocksDB /
RAM, the table's capacity (a row_wise rank's row block; a column-split rank's column blocks of
every slot) as its row cache (`runs_virtual_tiered`; shardrec_sharding/virtual_tier.py,
virtual_columns.py).
On cpu `estimate` prices them by the same model (`virtual_tier_layout`,
`disk_tier.virtual_tier_estimate`): the capacity cached, every row stored on disk or in RAM.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING, Any

from shardrec_planner.cache_params import BoundsCheckMode, CacheAlgorithm
from shardrec_planner.enums import (
    VIRTUAL_TABLE_SHARDING_TYPES,
    EmbeddingComputeKernel,
    ShardingType,
)

if TYPE_CHECKING:
    from shardrec_planner.constraints import ParameterConstraints
    from shardrec_planner.parameter_sharding import ParameterSharding

RUNS_AS_FUSED: frozenset[EmbeddingComputeKernel] = frozenset(
    {
        EmbeddingComputeKernel.FUSED_UVM,
        EmbeddingComputeKernel.FUSED_UVM_CACHING,
        EmbeddingComputeKernel.KEY_VALUE,
    }
)
"""Kernels a plan may name that shardrec runs as `fused`."""

_CUDA_EXTRA = (
    EmbeddingComputeKernel.FUSED_UVM,
    EmbeddingComputeKernel.FUSED_UVM_CACHING,
    EmbeddingComputeKernel.KEY_VALUE,
)


_CUDA_VIRTUAL = (
    EmbeddingComputeKernel.SSD_VIRTUAL_TABLE,
    EmbeddingComputeKernel.DRAM_VIRTUAL_TABLE,
)


def sharded_kernels(sharding_type: str, compute_device_type: str) -> list[str]:
    """TorchRec's kernel list of an embedding sharder for one sharding type and device.

    On cuda TorchRec also offers `ssd_virtual_table` and `dram_virtual_table` for every type but
    data_parallel; we offer them on the types that run them (`VIRTUAL_TABLE_SHARDING_TYPES`), so
    a plan never holds a pair the sharded module refuses. The enumerator lists them only where a
    constraint names them (`enumerators.GUARDED_COMPUTE_KERNELS`), as TorchRec's does."""
    st = ShardingType(sharding_type)
    if st is ShardingType.DATA_PARALLEL:
        return [EmbeddingComputeKernel.DENSE.value]
    if compute_device_type != "cuda":
        return [EmbeddingComputeKernel.FUSED.value]
    virtual = [k.value for k in _CUDA_VIRTUAL if st in VIRTUAL_TABLE_SHARDING_TYPES[k]]
    return [EmbeddingComputeKernel.FUSED.value, *(k.value for k in _CUDA_EXTRA), *virtual]


def executed_kernel(kernel: str) -> EmbeddingComputeKernel:
    """The kernel shardrec's sharded modules run for a plan naming `kernel`."""
    k = EmbeddingComputeKernel(kernel)
    return EmbeddingComputeKernel.FUSED if k in RUNS_AS_FUSED else k


TIERED_SHARDING_TYPES: frozenset[ShardingType] = frozenset(ShardingType) - {
    ShardingType.DATA_PARALLEL
}
"""Sharding types whose `key_value` tables run tiered (`runs_tiered`) and our cost model prices
on the disk tier (`tiered_layout`): every type but data_parallel (whose kernel is dense). Each
rank's shard (a row block, a column block, or both) is a tiered table of its own, priced per
shard (disk_tier.py)."""


def runs_tiered(ps: ParameterSharding) -> bool:
    """Whether a table planned as `ps` runs on the tiered lookup (shardrec-tiered: rows and
    optimizer state on disk, a cache of `CacheParams.load_factor` of them in memory): a
    `key_value` table of any sharding type but data_parallel (whose kernel is dense); each rank's
    shard is a tiered table of its own."""
    return (
        ps.compute_kernel is EmbeddingComputeKernel.KEY_VALUE
        and ps.sharding_type in TIERED_SHARDING_TYPES
    )


def tiered_layout(
    sharding_type: ShardingType, kernel: EmbeddingComputeKernel, compute_device: str
) -> bool:
    """Whether our cost model prices such shards on the disk tier (disk_tier.py): tables that
    run tiered, on cpu (the tier's cache lives in CPU memory; elsewhere `key_value` is
    estimated as fused)."""
    return (
        kernel is EmbeddingComputeKernel.KEY_VALUE
        and sharding_type in TIERED_SHARDING_TYPES
        and compute_device == "cpu"
    )


def virtual_tier_layout(
    sharding_type: ShardingType, kernel: EmbeddingComputeKernel, compute_device: str
) -> bool:
    """Whether our cost model prices such shards on the raw-id tier (disk_tier.py): a
    virtual-table kernel on a sharding type it runs on (`VIRTUAL_TABLE_SHARDING_TYPES`), on cpu
    (elsewhere TorchRec's rates)."""
    types = VIRTUAL_TABLE_SHARDING_TYPES.get(kernel, frozenset())
    return sharding_type in types and compute_device == "cpu"


def estimated_kernel(kernel: EmbeddingComputeKernel, compute_device: str) -> EmbeddingComputeKernel:
    """The kernel our cost model estimates a plan's `kernel` as (module docstring's table)."""
    if kernel is EmbeddingComputeKernel.KEY_VALUE or (
        compute_device == "cpu" and kernel in RUNS_AS_FUSED
    ):
        return EmbeddingComputeKernel.FUSED
    return kernel


def kernel_notes(ps: ParameterSharding, compute_device: str | None = None) -> list[str]:
    """What becomes of the plan's kernel and each kernel option it carries, one line each.

    `compute_device` (the plan's; None: read from the shards' placements) decides whether a
    cached table's load factor sized the estimates (cuda) or not (cpu: estimated as fused)."""
    notes: list[str] = []
    device = compute_device or next((s.device.split(":")[0] for s in ps.shards), None)
    asked = ps.compute_kernel
    runs = executed_kernel(asked)
    tiered = runs_tiered(ps)
    virtual = runs_virtual_tiered(ps)
    if tiered:
        cache = ps.cache_params
        factor = 0.2 if cache is None or cache.load_factor is None else cache.load_factor
        policy = "LFU" if cache is not None and cache.algorithm is CacheAlgorithm.LFU else "LRU"
        kv = ps.key_value_params
        where = (kv.ssd_storage_directory if kv else None) or "./tier-store"
        notes.append(
            f"kernel key_value runs tiered: rows and optimizer state in {where}/rank-<r>, a "
            f"{policy} cache of {factor:g} of the rows in memory"
        )
    elif virtual:
        kv = ps.key_value_params
        where = (
            f"RocksDB in {(kv.ssd_storage_directory if kv else None) or './tier-store'}/rank-<r>"
            if asked is EmbeddingComputeKernel.SSD_VIRTUAL_TABLE
            else "RAM"
        )
        notes.append(
            f"kernel {asked.value} runs the raw-id tier: every id's row and optimizer state in "
            f"{where}, the table's capacity as a row cache in memory"
        )
    elif runs is not asked:
        notes.append(
            f"kernel {asked.value} runs as {runs.value} (shardrec has no UVM cache or key-value "
            "store: rows and optimizer state live in the compute device's memory)"
        )
        if device not in (None, "cpu") and asked is not EmbeddingComputeKernel.KEY_VALUE:
            notes.append(
                f"the {device} estimate of {asked.value} (TorchRec's UVM model) puts its rows in "
                "host memory; allow 'fused' or budget device memory for the whole table"
            )
    cache = ps.cache_params
    if cache is not None and not tiered:
        if cache.load_factor is not None:
            if virtual:
                use = "unused (the table's capacity is its cache)"
            elif asked is not EmbeddingComputeKernel.FUSED_UVM_CACHING:
                use = "unused (the kernel has no cache)"
            elif device == "cpu":
                use = "unused on cpu (estimated as fused)"
            else:
                use = "sized the cache in the estimates"
            notes.append(f"cache_params.load_factor={cache.load_factor} {use}")
        rest = [
            f"{name}={_show(getattr(cache, name))}"
            for name in (
                "algorithm",
                "reserved_memory",
                "precision",
                "prefetch_pipeline",
                "stats",
                "multipass_prefetch_config",
            )
            if getattr(cache, name) is not None and not (virtual and name == "algorithm")
        ]
        if rest:
            notes.append(f"cache_params {', '.join(rest)} not applied (no device cache)")
    if ps.enforce_hbm:
        notes.append("enforce_hbm=True not applied (no UVM placement)")
    kv = ps.key_value_params
    if kv is not None:
        unused = [
            f.name
            for f in dataclasses.fields(kv)
            if getattr(kv, f.name) is not None
            and not ((tiered or virtual) and f.name == "ssd_storage_directory")
        ]
        if not (tiered or virtual):
            notes.append("key_value_params not applied (no key-value store)")
        elif unused:
            store = "flat-file store" if tiered else "shardrec's RocksDB settings"
            notes.append(f"key_value_params {', '.join(unused)} not applied ({store})")
    mode = ps.bounds_check_mode
    if mode is not None and mode is not BoundsCheckMode.FATAL:
        notes.append(
            f"bounds_check_mode={mode.name}: lookups raise on an out-of-range id (FATAL) instead"
        )
    if ps.stochastic_rounding:
        notes.append("stochastic_rounding=True not applied (updates round to nearest)")
    return notes


def _show(value: object) -> str:
    return value.name if isinstance(value, enum.Enum) else repr(value)


def kernel_options(constraints: ParameterConstraints | None) -> dict[str, Any]:
    """A table's kernel options from its constraints, as `ParameterSharding` keyword arguments."""
    if constraints is None:
        return {}
    names = (
        "cache_params",
        "enforce_hbm",
        "stochastic_rounding",
        "bounds_check_mode",
        "key_value_params",
    )
    return {n: getattr(constraints, n) for n in names if getattr(constraints, n) is not None}


def cache_ratio_of(ps: ParameterSharding) -> float | None:
    """The cached share a plan's table asks for (`CacheParams.load_factor`), if any."""
    return None if ps.cache_params is None else ps.cache_params.load_factor


def runs_virtual_tiered(ps: ParameterSharding) -> bool:
    """Whether a table planned as `ps` keeps its raw-id rows in a store behind a cache of its
    `capacity` slots (`ssd_virtual_table`: RocksDB on disk, `dram_virtual_table`: RAM; only
    dynamic tables placed as `enums.VIRTUAL_TABLE_SHARDING_TYPES` allows, which
    `ParameterSharding` and the sharder check)."""
    return ps.compute_kernel in (
        EmbeddingComputeKernel.SSD_VIRTUAL_TABLE,
        EmbeddingComputeKernel.DRAM_VIRTUAL_TABLE,
    )
