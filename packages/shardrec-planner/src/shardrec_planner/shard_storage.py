"""TorchRec's shard storage formula (`torchrec.distributed.planner.shard_estimators`, storage).

A shard's storage is its block of the table, the optimizer state of that block, the device
cache's bookkeeping (cached kernels) and the shard's input ids and output embeddings for one
batch. Inputs are counted at 8 bytes an id (TBE widens ids to int64), outputs at the table's
element size (or the constrained output dtype).

    rows x dim table, shard r x c          bytes of the block:  ceil(T * r * c / (rows * dim))
    T = the table bytes on that tier        optimizer state:     ceil(block * m(optimizer))
    cached kernel, load factor f            cache bookkeeping:   ceil(r * (4 + 16 f)) on HBM

Input and output sizes per sharding type (b = sum of batch * pooling factor * num poolings over
the table's features, o = sum of batch * num poolings if pooled else b, W the world size, L the
local world size, e the bytes of an id, d the output element bytes):

    data_parallel           every shard: in ceil(b e),          out ceil(o dim d)
    table_wise              one shard:   in ceil(b W e),        out ceil(o W dim d)
    (table_)column_wise     each shard:  in ceil(b W e),        out ceil(o W c d)
    row_wise                each non-empty shard: in ceil(b e), out ceil(o W c d), o from b / W
    table_row_wise          each non-empty shard: in ceil(b W / L e), likewise with b / L

On cuda, inputs and outputs count against HBM; on cpu and mtia against DDR. Our own cost model
(`shardrec_planner.estimator`) is separate and is what our planner's default search uses.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from shardrec_planner.cache_params import KeyValueParams
from shardrec_planner.constants import BIGINT_DTYPE, KV_CACHING_RATIO, UVM_CACHING_RATIO
from shardrec_planner.constraints import ParameterConstraints
from shardrec_planner.dynamic_storage import module_dynamic_bytes_per_row
from shardrec_planner.enums import EmbeddingComputeKernel, ShardingType
from shardrec_planner.mc_storage import mc_bytes_per_row
from shardrec_planner.offload_stats import _validate_io_sizes
from shardrec_planner.planner_types import ShardingOption, Storage
from shardrec_planner.planner_utils import prod, sharder_name
from shardrec_planner.sharder_data import StorageUsageType
from shardrec_planner.topology import Topology

_CACHED_KERNELS = frozenset(
    {
        EmbeddingComputeKernel.FUSED_UVM_CACHING.value,
        EmbeddingComputeKernel.QUANT_UVM_CACHING.value,
        EmbeddingComputeKernel.KEY_VALUE.value,
    }
)
_HOST_KERNELS = frozenset(
    {
        EmbeddingComputeKernel.FUSED_UVM.value,
        EmbeddingComputeKernel.FUSED_UVM_CACHING.value,
        EmbeddingComputeKernel.QUANT_UVM.value,
        EmbeddingComputeKernel.QUANT_UVM_CACHING.value,
        EmbeddingComputeKernel.KEY_VALUE.value,
        EmbeddingComputeKernel.SSD_VIRTUAL_TABLE.value,
        EmbeddingComputeKernel.DRAM_VIRTUAL_TABLE.value,
    }
)
_KEY_VALUE_KERNELS = frozenset(
    {
        EmbeddingComputeKernel.KEY_VALUE.value,
        EmbeddingComputeKernel.SSD_VIRTUAL_TABLE.value,
        EmbeddingComputeKernel.DRAM_VIRTUAL_TABLE.value,
    }
)
_DTYPE_BITS = {"FP32": 32, "FP16": 16, "BF16": 16, "INT8": 8, "UINT8": 8, "INT4": 4, "INT2": 2}


class PipelineType(enum.Enum):
    """The training pipeline a model runs in; it sets how many batches of ids sit on the device."""

    NONE = "none"
    TRAIN_BASE = "train_base"
    TRAIN_SPARSE_DIST = "train_sparse_dist"
    TRAIN_PREFETCH_SPARSE_DIST = "train_prefetch_sparse_dist"


def get_tensor_size_bytes(tensor: torch.Tensor) -> int:
    """Bytes of `tensor`'s elements (`numel * element_size`; a meta tensor counts the same)."""
    return tensor.numel() * tensor.element_size()


def compute_storage_usage(
    tensor: torch.Tensor,
    compute_device_type: str,
    compute_kernel: str,
    storage_usage_type: StorageUsageType = StorageUsageType.DEFAULT,
) -> dict[str, int]:
    """Bytes of `tensor` per tier ("hbm"/"ddr") for a kernel, as TorchRec: host kernels (UVM,
    key-value, virtual tables) keep rows in DDR; on cpu everything is DDR; any other device type
    (cuda, mtia, or one TorchRec does not know) is HBM. `BASE_QUANT` adds 4 bytes a row."""
    size = get_tensor_size_bytes(tensor)
    if StorageUsageType(storage_usage_type) is StorageUsageType.BASE_QUANT:
        size += int(tensor.shape[0]) * 4
    if compute_kernel in _HOST_KERNELS:
        return {"ddr": size}
    return {"ddr" if compute_device_type == "cpu" else "hbm": size}


def _get_optimizer_multipler(optimizer_class: type | None, shape: torch.Size) -> float:
    """Optimizer state per byte of table: SGD 0, Adam 2, row-wise Adagrad one value a row."""
    if optimizer_class is None:
        return 0.0
    name = optimizer_class.__name__
    if name == "SGD":
        return 0.0
    if name == "Adam":
        return 2.0
    if name == "RowWiseAdagrad":
        return 1 / shape[-1]
    return 1.0


def _batch_totals(
    input_lengths: Sequence[float],
    num_poolings: Sequence[float],
    batch_sizes: Sequence[int],
    is_pooled: bool,
    divide_by: int = 1,
) -> tuple[float, float]:
    inputs = (
        sum(x * y * z for x, y, z in zip(input_lengths, num_poolings, batch_sizes, strict=True))
        / divide_by
    )
    outputs = (
        sum(y * z for y, z in zip(num_poolings, batch_sizes, strict=True)) if is_pooled else inputs
    )
    return inputs, outputs


def _calculate_dp_shard_io_sizes(
    batch_sizes: Sequence[int],
    input_lengths: Sequence[float],
    emb_dim: int,
    num_shards: int,
    input_data_type_size: float,
    output_data_type_size: float,
    num_poolings: Sequence[float],
    is_pooled: bool,
) -> tuple[list[int], list[int]]:
    inputs, outputs = _batch_totals(input_lengths, num_poolings, batch_sizes, is_pooled)
    return (
        [math.ceil(inputs * input_data_type_size)] * num_shards,
        [math.ceil(outputs * emb_dim * output_data_type_size)] * num_shards,
    )


def _calculate_tw_shard_io_sizes(
    batch_sizes: Sequence[int],
    world_size: int,
    input_lengths: Sequence[float],
    emb_dim: int,
    input_data_type_size: float,
    output_data_type_size: float,
    num_poolings: Sequence[float],
    is_pooled: bool,
) -> tuple[list[int], list[int]]:
    inputs, outputs = _batch_totals(input_lengths, num_poolings, batch_sizes, is_pooled)
    return (
        [math.ceil(inputs * world_size * input_data_type_size)],
        [math.ceil(outputs * world_size * emb_dim * output_data_type_size)],
    )


def _calculate_cw_shard_io_sizes(
    batch_sizes: Sequence[int],
    world_size: int,
    input_lengths: Sequence[float],
    shard_sizes: Sequence[Sequence[int]],
    input_data_type_size: float,
    output_data_type_size: float,
    num_poolings: Sequence[float],
    is_pooled: bool,
) -> tuple[list[int], list[int]]:
    inputs, outputs = _batch_totals(input_lengths, num_poolings, batch_sizes, is_pooled)
    return (
        [math.ceil(inputs * world_size * input_data_type_size)] * len(shard_sizes),
        [math.ceil(outputs * world_size * s[1] * output_data_type_size) for s in shard_sizes],
    )


def _calculate_rw_shard_io_sizes(
    batch_sizes: Sequence[int],
    world_size: int,
    input_lengths: Sequence[float],
    shard_sizes: Sequence[Sequence[int]],
    input_data_type_size: float,
    output_data_type_size: float,
    num_poolings: Sequence[float],
    is_pooled: bool,
) -> tuple[list[int], list[int]]:
    """Row-wise: table-row-wise with the whole world as one host (ids split W ways)."""
    io = (input_data_type_size, output_data_type_size, num_poolings, is_pooled)
    return _calculate_twrw_shard_io_sizes(
        batch_sizes, world_size, world_size, input_lengths, shard_sizes, *io
    )


def _calculate_twrw_shard_io_sizes(
    batch_sizes: Sequence[int],
    world_size: int,
    local_world_size: int,
    input_lengths: Sequence[float],
    shard_sizes: Sequence[Sequence[int]],
    input_data_type_size: float,
    output_data_type_size: float,
    num_poolings: Sequence[float],
    is_pooled: bool,
) -> tuple[list[int], list[int]]:
    inputs, outputs = _batch_totals(
        input_lengths, num_poolings, batch_sizes, is_pooled, divide_by=local_world_size
    )
    ins = [
        math.ceil(inputs * world_size * input_data_type_size) if prod(s) else 0 for s in shard_sizes
    ]
    outs = [
        math.ceil(outputs * world_size * s[1] * output_data_type_size) if prod(s) else 0
        for s in shard_sizes
    ]
    return ins, outs


def _calculate_shard_io_sizes(
    sharding_type: str,
    batch_sizes: Sequence[int],
    world_size: int,
    local_world_size: int,
    input_lengths: Sequence[float],
    emb_dim: int,
    shard_sizes: Sequence[Sequence[int]],
    input_data_type_size: float,
    output_data_type_size: float,
    num_poolings: Sequence[float],
    is_pooled: bool,
) -> tuple[list[int], list[int]]:
    """(input bytes, output bytes) of each shard for one batch (module docstring)."""
    io = (input_data_type_size, output_data_type_size, num_poolings, is_pooled)
    st = sharding_type
    if st == ShardingType.DATA_PARALLEL.value:
        return _calculate_dp_shard_io_sizes(
            batch_sizes, input_lengths, emb_dim, len(shard_sizes), *io
        )
    if st == ShardingType.TABLE_WISE.value:
        return _calculate_tw_shard_io_sizes(batch_sizes, world_size, input_lengths, emb_dim, *io)
    if st in (ShardingType.COLUMN_WISE.value, ShardingType.TABLE_COLUMN_WISE.value):
        return _calculate_cw_shard_io_sizes(
            batch_sizes, world_size, input_lengths, shard_sizes, *io
        )
    if st == ShardingType.ROW_WISE.value:
        return _calculate_rw_shard_io_sizes(
            batch_sizes, world_size, input_lengths, shard_sizes, *io
        )
    if st in (ShardingType.TABLE_ROW_WISE.value, ShardingType.GRID_SHARD.value):
        return _calculate_twrw_shard_io_sizes(
            batch_sizes, world_size, local_world_size, input_lengths, shard_sizes, *io
        )
    valid = ", ".join(repr(t.value) for t in ShardingType)
    raise ValueError(f"unknown sharding type {sharding_type!r}; valid: {valid}")


def calculate_pipeline_io_cost(
    input_size: int,
    output_size: int,
    prefetch_size: int,
    pipeline_type: PipelineType,
    multipass_prefetch_max_pass: int | None,
    count_ephemeral_storage_cost: bool = False,
    is_inference: bool = False,
) -> int:
    """Device bytes a shard's inputs and outputs take under `pipeline_type`.

    A sparse-dist pipeline holds 2 batches of ids; a prefetch pipeline 3, plus the prefetched ids
    times (1 + 6 / passes). Outputs count only when the embedding runs at peak memory. Without a
    pipeline: one batch of inputs plus the outputs. Inference keeps none.
    """
    if is_inference:
        return 0
    outputs = output_size if count_ephemeral_storage_cost else 0
    if pipeline_type == PipelineType.TRAIN_SPARSE_DIST:
        return 2 * input_size + outputs
    if pipeline_type == PipelineType.TRAIN_PREFETCH_SPARSE_DIST:
        passes = multipass_prefetch_max_pass or 1
        return 3 * input_size + int((1 + 6 / passes) * prefetch_size) + outputs
    return input_size + output_size


def _calculate_storage_specific_sizes(
    storage: int,
    shape: torch.Size,
    shard_sizes: Sequence[Sequence[int]],
    sharding_type: str,
    optimizer_class: type | None = None,
    is_inference: bool = False,
    clf: float | None = None,
) -> list[int]:
    """Per shard: its part of `storage` bytes, its optimizer state, its cache bookkeeping."""
    dp = sharding_type == ShardingType.DATA_PARALLEL.value
    blocks = [
        storage if dp else math.ceil(storage * prod(size) / prod(shape)) for size in shard_sizes
    ]
    multiplier = _get_optimizer_multipler(optimizer_class, shape)
    result = []
    for size, block in zip(shard_sizes, blocks, strict=True):
        if is_inference:
            result.append(block)
            continue
        cache = 0 if clf is None else math.ceil(size[0] * (4 + clf * 16))
        result.append(cache + block + math.ceil(block * multiplier))
    return result


def calculate_shard_storages(
    sharder: Any,
    sharding_type: str,
    tensor: torch.Tensor,
    compute_device: str,
    compute_kernel: str,
    shard_sizes: list[list[int]],
    batch_sizes: list[int],
    world_size: int,
    local_world_size: int,
    input_lengths: list[float],
    num_poolings: list[float],
    caching_ratio: float,
    is_pooled: bool,
    input_data_type_size: float,
    output_data_type_size: float,
    pipeline_type: PipelineType = PipelineType.NONE,
    count_ephemeral_storage_cost: bool = False,
    is_inference: bool = False,
    multipass_prefetch_max_pass: int | None = None,
    key_value_params: KeyValueParams | None = None,
    kv_cache_load_factor: float = KV_CACHING_RATIO,
) -> list[Storage]:
    """The storage of each shard of `tensor` (module docstring); one `Storage` per shard.

    A key-value or virtual-table kernel's shard holds no rows in DDR and, on the device, its L1
    cache: the smaller of `key_value_params.max_l1_cache_size` MB (0 when unset) and the whole
    table's rows at `kv_cache_load_factor` (TorchRec's rule)."""
    input_sizes, output_sizes = _calculate_shard_io_sizes(
        sharding_type,
        batch_sizes,
        world_size,
        local_world_size,
        input_lengths,
        tensor.shape[1],
        shard_sizes,
        input_data_type_size,
        output_data_type_size,
        num_poolings,
        is_pooled,
    )
    _validate_io_sizes(input_sizes, output_sizes, sharding_type)
    usage = getattr(sharder, "storage_usage", None)
    usage_type = getattr(sharder, "storage_usage_type", None) or StorageUsageType.DEFAULT
    tiers: Mapping[str, int] = (
        usage(tensor, compute_device, compute_kernel)
        if callable(usage)
        else compute_storage_usage(tensor, compute_device, compute_kernel, usage_type)
    )
    hbm, ddr = int(tiers.get("hbm", 0)), int(tiers.get("ddr", 0))
    cached = compute_kernel in _CACHED_KERNELS
    if cached:
        hbm = round(ddr * caching_ratio)
    if compute_kernel in _KEY_VALUE_KERNELS:  # rows live in the key-value store, not in DDR
        ddr = 0
    optimizer_class = getattr(tensor, "_optimizer_classes", [None])[0]
    hbm_specific = _calculate_storage_specific_sizes(
        hbm,
        tensor.shape,
        shard_sizes,
        sharding_type,
        optimizer_class,
        is_inference,
        caching_ratio if cached else None,
    )
    ddr_specific = _calculate_storage_specific_sizes(
        ddr, tensor.shape, shard_sizes, sharding_type, optimizer_class, is_inference
    )
    if compute_kernel in _KEY_VALUE_KERNELS:
        l1 = (key_value_params.max_l1_cache_size if key_value_params else None) or 0
        rows, dim = int(tensor.shape[0]), int(tensor.shape[1])
        cache = math.ceil(rows * kv_cache_load_factor * tensor.element_size() * dim)
        hbm_specific = [min(l1 * 1024 * 1024, cache) for _ in hbm_specific]
        ddr_specific = [0 for _ in ddr_specific]
    storages = []
    for inp, out, h, d in zip(input_sizes, output_sizes, hbm_specific, ddr_specific, strict=True):
        hbm_size = 0
        if compute_device == "cuda":
            io = calculate_pipeline_io_cost(
                inp,
                out,
                inp if cached else 0,
                pipeline_type,
                multipass_prefetch_max_pass,
                count_ephemeral_storage_cost,
                is_inference,
            )
            hbm_size = h + io
        host_io = compute_device in ("cpu", "mtia") and not is_inference
        storages.append(Storage(hbm=hbm_size, ddr=inp + out + d if host_io else d))
    return storages


def output_data_type_size(option: ShardingOption) -> float:
    """Bytes of one output element: the constrained output dtype's, else the table's."""
    dtype = option.output_dtype
    if dtype is None:
        return float(option.tensor.element_size())
    name = getattr(dtype, "name", str(dtype)).upper()
    if name not in _DTYPE_BITS:
        raise ValueError(f"table {option.name!r}: output dtype {dtype!r} has no known bit width")
    return _DTYPE_BITS[name] / 8


def _fused_param(sharder: Any, key: str) -> Any:
    params = getattr(sharder, "fused_params", None)
    return params.get(key) if params else None


@dataclasses.dataclass(frozen=True)
class OptionInputs:
    """What an estimator reads for one option: its sharder, load factor and per-feature lists."""

    sharder: Any
    caching_ratio: float | None
    num_poolings: list[float]
    batch_sizes: list[int]


def option_inputs(
    who: str,
    sharding_options: Sequence[ShardingOption],
    sharder_map: Mapping[str, Any] | None,
    constraints: Mapping[str, ParameterConstraints] | None,
) -> list[OptionInputs]:
    """Per option: the sharder of its module type, its cache load factor (the option's, else
    the sharder's `fused_params`), and its num_poolings / batch_sizes (constraint or default)."""
    if not sharder_map:
        if sharding_options:
            raise ValueError(
                f"{who}.estimate: sharder_map is empty but there are {len(sharding_options)} "
                "sharding options; pass the sharders by module type"
            )
        return []
    found = []
    for option in sharding_options:
        if option.tensor.numel() == 0:
            raise ValueError(
                f"table {option.name!r} has no elements to estimate (tensor.shape="
                f"{tuple(option.tensor.shape)}, sharding_type={option.sharding_type}, "
                f"compute_kernel={option.compute_kernel}); give the table rows and columns"
            )
        key = sharder_name(type(option.module[1]))
        if key not in sharder_map:
            raise ValueError(f"table {option.name!r}: no sharder for module type {key}")
        sharder = sharder_map[key]
        ratio = option.cache_load_factor
        if ratio is None:
            ratio = _fused_param(sharder, "cache_load_factor")
        c = constraints.get(option.name) if constraints else None
        n = option.num_inputs
        pools = list(c.num_poolings) if c is not None and c.num_poolings else [1.0] * n
        batches = (
            list(c.batch_sizes) if c is not None and c.batch_sizes else [option.batch_size] * n
        )
        if not len(option.input_lengths) == len(pools) == len(batches):
            raise ValueError(
                f"table {option.name!r}: pooling_factors ({len(option.input_lengths)}), "
                f"num_poolings ({len(pools)}) and batch_sizes ({len(batches)}) must have one "
                "entry per feature"
            )
        found.append(OptionInputs(sharder, ratio, pools, batches))
    return found


class OptionEstimator(abc.ABC):
    """What TorchRec's two formula estimators share: the topology, the constraints, the
    inference switch, and an `estimate` that reads each option's inputs (`option_inputs`) and
    hands them to `estimate_option`."""

    def __init__(
        self,
        topology: Topology,
        constraints: Mapping[str, ParameterConstraints] | None = None,
        is_inference: bool = False,
    ) -> None:
        self._topology = topology
        self._constraints = constraints
        self._is_inference = is_inference

    def estimate(
        self,
        sharding_options: list[ShardingOption],
        sharder_map: Mapping[str, Any] | None = None,
        sharder_data_map: Mapping[str, Any] | None = None,
    ) -> None:
        """Fill every shard's estimate; `sharder_data_map` (TorchRec 1.8's name: per module type,
        an object with the sharder's `fused_params`) may stand in for `sharder_map`."""
        inputs = option_inputs(
            type(self).__name__,
            sharding_options,
            sharder_map if sharder_map is not None else sharder_data_map,
            self._constraints,
        )
        for option, got in zip(sharding_options, inputs, strict=True):
            self.estimate_option(option, got)

    @abc.abstractmethod
    def estimate_option(self, option: ShardingOption, got: OptionInputs) -> None:
        """Fill the estimate of every shard of `option` from its inputs `got`."""


class EmbeddingStorageEstimator(OptionEstimator):
    """Sets every shard's `storage` by TorchRec's formula (`calculate_shard_storages`).

    `pipeline_type` sets how many batches of ids count against device memory;
    `run_embedding_at_peak_memory` counts the outputs too (with a pipeline); `is_inference`
    counts only the table.
    """

    def __init__(
        self,
        topology: Topology,
        constraints: Mapping[str, ParameterConstraints] | None = None,
        pipeline_type: PipelineType = PipelineType.NONE,
        run_embedding_at_peak_memory: bool = False,
        is_inference: bool = False,
    ) -> None:
        super().__init__(topology, constraints, is_inference)
        self._pipeline_type = pipeline_type
        self._run_embedding_at_peak_memory = run_embedding_at_peak_memory

    def estimate_option(self, option: ShardingOption, got: OptionInputs) -> None:
        sharder, ratio = got.sharder, got.caching_ratio
        num_poolings, batch_sizes = got.num_poolings, got.batch_sizes
        c = self._constraints.get(option.name) if self._constraints else None
        mpp = option.cache_params.multipass_prefetch_config if option.cache_params else None
        if mpp is None:
            mpp = _fused_param(sharder, "multipass_prefetch_config")
        storages = calculate_shard_storages(
            sharder=sharder,
            sharding_type=option.sharding_type,
            tensor=option.tensor,
            compute_device=self._topology.compute_device,
            compute_kernel=option.compute_kernel,
            shard_sizes=[shard.size for shard in option.shards],
            batch_sizes=batch_sizes,
            world_size=self._topology.world_size,
            local_world_size=self._topology.local_size,
            input_lengths=option.input_lengths,
            num_poolings=num_poolings,
            caching_ratio=ratio if ratio else UVM_CACHING_RATIO,
            is_pooled=option.is_pooled,
            input_data_type_size=BIGINT_DTYPE,
            output_data_type_size=output_data_type_size(option),
            pipeline_type=self._pipeline_type,
            count_ephemeral_storage_cost=self._run_embedding_at_peak_memory,
            is_inference=self._is_inference,
            multipass_prefetch_max_pass=getattr(mpp, "num_passes", None),
            key_value_params=c.key_value_params if c is not None else None,
            kv_cache_load_factor=_fused_param(sharder, "cache_load_factor") or KV_CACHING_RATIO,
        )
        map_bytes = mc_bytes_per_row(option.module[1], option.name)
        # a dynamic table's id map and metadata: host memory whatever the device (dynamic_storage)
        host_bytes = module_dynamic_bytes_per_row(option.module[1], option.name)
        on_device = self._topology.compute_device == "cuda"
        for shard, storage in zip(option.shards, storages, strict=True):
            extra = map_bytes * int(shard.size[0])  # raw-id map + policy metadata of its rows
            host = int(host_bytes * int(shard.size[0]))
            shard.storage = Storage(
                hbm=storage.hbm + (extra if on_device else 0),
                ddr=storage.ddr + (0 if on_device else extra) + host,
                ssd=storage.ssd,
            )
