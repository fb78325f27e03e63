"""TorchRec's `EmbeddingEnumerator` (`torchrec.distributed.planner.enumerators`).

The enumerator lists every way each shardable table can be sharded: for each module a sharder
claims, for each table, every (sharding type, compute kernel) pair the sharder offers and the
table's constraints allow, with TorchRec's shard geometry. Then its estimators (by default
`EmbeddingPerfEstimator` and `EmbeddingStorageEstimator`) fill each shard's perf and storage.

Filtering follows TorchRec: grid_shard only when a constraint names it; the key-value and
virtual-table kernels only when a constraint names them; `dense` is dropped where `fused` is also
allowed. A table left with no pair raises `ValueError` naming it, the module and the sharder.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from torch import nn

from shardrec_planner.constants import POOLING_FACTOR
from shardrec_planner.constraints import ParameterConstraints
from shardrec_planner.enums import EmbeddingComputeKernel, ShardingType
from shardrec_planner.geometry import column_block_size, shard_geometry
from shardrec_planner.planner_types import PartitionByType, Shard, ShardingOption
from shardrec_planner.planner_utils import sharder_name
from shardrec_planner.shard_perf import EmbeddingPerfEstimator
from shardrec_planner.shard_storage import EmbeddingStorageEstimator
from shardrec_planner.topology import Topology

logger = logging.getLogger(__name__)

GUARDED_COMPUTE_KERNELS: frozenset[EmbeddingComputeKernel] = frozenset(
    {
        EmbeddingComputeKernel.KEY_VALUE,
        EmbeddingComputeKernel.SSD_VIRTUAL_TABLE,
        EmbeddingComputeKernel.DRAM_VIRTUAL_TABLE,
    }
)
"""Kernels enumerated only where a constraint asks for them."""


class ShardEstimator(Protocol):
    """What an enumerator asks of an estimator: fill the shards' estimates in place."""

    def estimate(
        self,
        sharding_options: list[ShardingOption],
        sharder_map: Mapping[str, Any] | None = None,
    ) -> None: ...


def get_partition_by_type(sharding_type: str) -> str:
    """How a partitioner places shards of `sharding_type` (TorchRec's mapping)."""
    device = {ShardingType.TABLE_WISE.value, ShardingType.COLUMN_WISE.value}
    host = {
        ShardingType.TABLE_ROW_WISE.value,
        ShardingType.TABLE_COLUMN_WISE.value,
        ShardingType.GRID_SHARD.value,
    }
    uniform = {ShardingType.ROW_WISE.value, ShardingType.DATA_PARALLEL.value}
    if sharding_type in device:
        return PartitionByType.DEVICE.value
    if sharding_type in host:
        return PartitionByType.HOST.value
    if sharding_type in uniform:
        return PartitionByType.UNIFORM.value
    valid = ", ".join(repr(t.value) for t in ShardingType)
    raise ValueError(f"unknown sharding type {sharding_type!r}; valid: {valid}")


def bucketed_row_shards(
    rows: int, dim: int, buckets: int, world_size: int, table: str = ""
) -> list[Shard]:
    """Row-wise shards of a table of `buckets` equal row buckets: each rank takes whole buckets,
    `buckets // world_size` each and one more on the first `buckets % world_size` ranks
    (TorchRec's rule; a raw-id table's ids follow the same buckets, shardrec_sharding.id_buckets).
    ValueError naming `table`, the value and the fix when they cannot be cut."""
    if buckets < 1 or rows % buckets:
        raise ValueError(
            f"table {table!r}: total_num_buckets {buckets} must be >= 1 and divide the table's "
            f"{rows} rows (each bucket holds an equal share): pick a bucket count that divides "
            f"{rows}, or a table size that is a multiple of {buckets}"
        )
    if buckets < world_size:
        raise ValueError(
            f"table {table!r}: total_num_buckets {buckets} is less than the world size "
            f"{world_size}; a bucket cannot be split across ranks: give at least {world_size} "
            "buckets (a multiple of the world size spreads them evenly), or shard the table "
            "another way (table_wise, column_wise)"
        )
    size = rows // buckets
    base, extra = divmod(buckets, world_size)
    shards: list[Shard] = []
    offset = 0
    for rank in range(world_size):
        n = (base + (rank < extra)) * size
        shards.append(Shard(size=[n, dim], offset=[offset, 0]))
        offset += n
    return shards


def _table_buckets(module: nn.Module, name: str) -> int | None:
    """`total_num_buckets` of table `name` in `module`'s configs (None when unset or unknown)."""
    for attr in ("embedding_bag_configs", "embedding_configs"):
        getter = getattr(module, attr, None)
        if callable(getter):
            for cfg in getter():
                if getattr(cfg, "name", None) == name:
                    buckets = getattr(cfg, "total_num_buckets", None)
                    return buckets if isinstance(buckets, int) else None
    return None


def _shards(
    tensor: Any,
    sharding_type: str,
    world_size: int,
    local_world_size: int,
    col_wise_shard_dim: int | None,
    buckets: int | None = None,
    table: str = "",
) -> list[Shard]:
    rows, dim = int(tensor.shape[0]), int(tensor.shape[1])
    if buckets is not None and sharding_type == ShardingType.ROW_WISE.value:
        return bucketed_row_shards(rows, dim, buckets, world_size, table)
    block = column_block_size(dim, col_wise_shard_dim) if col_wise_shard_dim else None
    geometry = shard_geometry(
        ShardingType(sharding_type),
        rows,
        dim,
        world_size=world_size,
        local_world_size=local_world_size,
        column_block=block,
    )
    return [Shard(size=list(size), offset=list(offset)) for size, offset in geometry]


class EmbeddingEnumerator:
    """Lists the sharding options of every table a sharder claims (module docstring).

    `estimator` is one estimator or a list; by default TorchRec's perf and storage estimators.
    `use_exact_enumerate_order` walks modules breadth-first in `named_children` order (TorchRec's
    default walk takes the last child first).
    """

    def __init__(
        self,
        topology: Topology,
        batch_size: int,
        constraints: Mapping[str, ParameterConstraints] | None = None,
        estimator: ShardEstimator | list[ShardEstimator] | None = None,
        use_exact_enumerate_order: bool | None = False,
    ) -> None:
        if isinstance(batch_size, int) and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._compute_device = topology.compute_device
        self._world_size = topology.world_size
        self._local_world_size = topology.local_size
        self._batch_size = batch_size
        self._constraints = constraints
        self._sharder_map: dict[str, Any] = {}
        self._use_exact_enumerate_order = bool(use_exact_enumerate_order)
        if estimator:
            self._estimators: list[ShardEstimator] = (
                list(estimator) if isinstance(estimator, list) else [estimator]
            )
        else:
            self._estimators = [
                EmbeddingPerfEstimator(topology=topology, constraints=constraints),
                EmbeddingStorageEstimator(topology=topology, constraints=constraints),
            ]
        self._last_stored_search_space: list[ShardingOption] | None = None
        self._last_stored_module: nn.Module | None = None
        self._last_stored_sharders: list[Any] | None = None

    def enumerate(self, module: nn.Module, sharders: Sequence[Any]) -> list[ShardingOption]:
        """Every sharding option of every shardable table of `module`, with estimates."""
        if (
            self._last_stored_search_space is not None
            and self._last_stored_module is module
            and self._last_stored_sharders == list(sharders)
        ):
            return copy.deepcopy(self._last_stored_search_space)
        self._sharder_map = {sharder_name(s.module_type): s for s in sharders}
        options: list[ShardingOption] = []
        queue: list[tuple[str, nn.Module]] = [("", module)]
        while queue:
            path, child = queue.pop(0) if self._use_exact_enumerate_order else queue.pop()
            key = sharder_name(type(child))
            sharder = self._sharder_map.get(key)
            if sharder is None:
                for n, m in child.named_children():
                    queue.append((f"{path}.{n}" if path else n, m))
                continue
            options.extend(self._options_of(path, child, key, sharder))
        self.populate_estimates(options)
        self._last_stored_module = module
        self._last_stored_sharders = list(sharders)
        self._last_stored_search_space = copy.deepcopy(options)
        return options

    def _options_of(
        self, path: str, child: nn.Module, key: str, sharder: Any
    ) -> list[ShardingOption]:
        found: list[ShardingOption] = []
        for name, param in sharder.shardable_parameters(child).items():
            c = self._constraints.get(name) if self._constraints else None
            if c is not None and c.device_group and c.device_group != self._compute_device:
                continue
            per_table: list[ShardingOption] = []
            types = self._filter_sharding_types(
                name, sharder.sharding_types(self._compute_device), key
            )
            for sharding_type in types:
                kernels = self._filter_compute_kernels(
                    name,
                    sharder.compute_kernels(sharding_type, self._compute_device),
                    sharding_type,
                )
                for kernel in kernels:
                    per_table.append(
                        ShardingOption(
                            name=name,
                            tensor=param,
                            module=(path, child),
                            input_lengths=(
                                list(c.pooling_factors)
                                if c and c.pooling_factors
                                else [POOLING_FACTOR]
                            ),
                            batch_size=self._batch_size,
                            compute_kernel=kernel,
                            sharding_type=sharding_type,
                            partition_by=get_partition_by_type(sharding_type),
                            shards=_shards(
                                param,
                                sharding_type,
                                self._world_size,
                                self._local_world_size,
                                c.min_partition if c else None,
                                _table_buckets(child, name),
                                name,
                            ),
                            cache_params=copy.deepcopy(c.cache_params) if c else None,
                            enforce_hbm=c.enforce_hbm if c else None,
                            stochastic_rounding=c.stochastic_rounding if c else None,
                            bounds_check_mode=c.bounds_check_mode if c else None,
                            is_pooled=ShardingOption.module_pooled(child, name),
                            feature_names=list(c.feature_names) if c and c.feature_names else None,
                            output_dtype=c.output_dtype if c else None,
                            key_value_params=c.key_value_params if c else None,
                        )
                    )
            if not per_table:
                raise ValueError(
                    f"table {name!r} of module {key} (sharder {type(sharder).__name__}, compute "
                    f"device {self._compute_device}): no sharding type and compute kernel is left "
                    "after the constraints; allow one the sharder offers"
                )
            found.extend(per_table)
        return found

    @property
    def last_stored_search_space(self) -> list[ShardingOption] | None:
        """The options of the last `enumerate` call (a copy is returned on a repeat call)."""
        return self._last_stored_search_space

    def populate_estimates(self, sharding_options: list[ShardingOption]) -> None:
        """Run every estimator over `sharding_options` (in place)."""
        for estimator in self._estimators:
            estimator.estimate(sharding_options, self._sharder_map)

    def _filter_sharding_types(
        self, name: str, allowed: list[str], sharder_key: str | None = None
    ) -> list[str]:
        c = self._constraints.get(name) if self._constraints else None
        if c is None or not c.sharding_types:
            # Unconstrained: no grid_shard; feature-processed bags keep whole rows on one rank
            # (their processors read positions), so no row-split types either.
            dropped = {ShardingType.GRID_SHARD.value}
            if sharder_key and sharder_key.endswith(".FeatureProcessedEmbeddingBagCollection"):
                dropped |= {ShardingType.ROW_WISE.value, ShardingType.TABLE_ROW_WISE.value}
            return [t for t in allowed if t not in dropped]
        wanted = [str(t) for t in c.sharding_types]
        kept = [t for t in allowed if t in wanted]
        if not kept:
            logger.warning(
                "table %s: no sharding type left; constrained %s, sharder allows %s",
                name,
                wanted,
                allowed,
            )
        return kept

    def _filter_compute_kernels(
        self, name: str, allowed: list[str], sharding_type: str
    ) -> list[str]:
        c = self._constraints.get(name) if self._constraints else None
        if c is not None and c.compute_kernels:
            wanted = [str(k) for k in c.compute_kernels]
        else:
            wanted = [k.value for k in EmbeddingComputeKernel if k not in GUARDED_COMPUTE_KERNELS]
        kept = [k for k in dict.fromkeys(allowed) if k in wanted]
        if (
            EmbeddingComputeKernel.DENSE.value in kept
            and EmbeddingComputeKernel.FUSED.value in kept
        ):
            kept.remove(EmbeddingComputeKernel.DENSE.value)
        if not kept:
            logger.warning(
                "table %s (%s): no compute kernel left; constrained %s, sharder allows %s",
                name,
                sharding_type,
                wanted,
                allowed,
            )
        return kept
