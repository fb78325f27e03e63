"""Quantized collections as the planner sees them (forward only): `QuantEmbeddingBagCollection`
and `QuantEmbeddingCollection` sharders."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from shardrec_embedding import (
    BaseEmbeddingConfig,
    DataType,
    QuantEmbeddingBagCollection,
    QuantEmbeddingCollection,
    data_type_to_dtype,
)
from shardrec_planner import EmbeddingComputeKernel, ShardingType
from shardrec_planner.sharder_data import BaseQuantEmbeddingSharder

__all__ = [
    "QUANT_SHARDING_TYPES",
    "QuantEmbeddingBagCollectionSharder",
    "QuantEmbeddingCollectionSharder",
]

QUANT_SHARDING_TYPES = (ShardingType.TABLE_WISE, ShardingType.ROW_WISE, ShardingType.COLUMN_WISE)


class _ForwardOnlySharder:
    """Satisfies the planner's `PlannerSharder` protocol for a quantized collection.

    No fused optimizer (`fused_params` None), so the planner sizes no optimizer state: the
    plan is forward-only. Tables are presented as meta `(rows, dim)` tensors of one byte per
    element for integer types (an over-estimate for INT4/INT2) or their float dtype. The two
    public sharders differ only in their module type and how it lists its tables.
    """

    _module: type[nn.Module]
    _tables_method: str  # the module's method listing its table configs

    @property
    def module_type(self) -> type[nn.Module]:
        return self._module

    @property
    def fused_params(self) -> Mapping[str, object] | None:
        return None

    def sharding_types(self, compute_device_type: str) -> list[str]:
        return [t.value for t in QUANT_SHARDING_TYPES]

    def compute_kernels(self, sharding_type: str, compute_device_type: str) -> list[str]:
        return [EmbeddingComputeKernel.DENSE.value]

    def shardable_parameters(self, module: nn.Module) -> dict[str, nn.Parameter]:
        assert isinstance(module, self._module)
        tables: Sequence[BaseEmbeddingConfig] = getattr(module, self._tables_method)()
        return _meta_weights(tables)


# TorchRec's `isinstance(sharder, BaseQuantEmbeddingSharder)` holds without a base class.
BaseQuantEmbeddingSharder.register(_ForwardOnlySharder)


class QuantEmbeddingBagCollectionSharder(_ForwardOnlySharder):
    """The forward-only sharder of `QuantEmbeddingBagCollection`."""

    _module = QuantEmbeddingBagCollection
    _tables_method = "embedding_bag_configs"


class QuantEmbeddingCollectionSharder(_ForwardOnlySharder):
    """The forward-only sharder of `QuantEmbeddingCollection` (per-id lookups; the planner
    reads its `embedding_configs()` and costs it as an unpooled collection)."""

    _module = QuantEmbeddingCollection
    _tables_method = "embedding_configs"


def _meta_weights(tables: Sequence[BaseEmbeddingConfig]) -> dict[str, nn.Parameter]:
    out: dict[str, nn.Parameter] = {}
    for t in tables:
        dtype = (
            torch.uint8
            if t.data_type in (DataType.INT8, DataType.INT4, DataType.INT2)
            else data_type_to_dtype(t.data_type)
        )
        weight = torch.empty(t.num_embeddings, t.embedding_dim, dtype=dtype, device="meta")
        out[t.name] = nn.Parameter(weight, requires_grad=False)
    return out
