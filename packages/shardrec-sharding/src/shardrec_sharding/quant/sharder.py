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

__all__ = [
    "QUANT_SHARDING_TYPES",
    "QuantEmbeddingBagCollectionSharder",
    "QuantEmbeddingCollectionSharder",
]

QUANT_SHARDING_TYPES = (ShardingType.TABLE_WISE, ShardingType.ROW_WISE, ShardingType.COLUMN_WISE)


class QuantEmbeddingBagCollectionSharder:
    """Satisfies the planner's `PlannerSharder` protocol for `QuantEmbeddingBagCollection`.

    No fused optimizer (`fused_params` None), so the planner sizes no optimizer state: the
    plan is forward-only. Tables are presented as meta `(rows, dim)` tensors of one byte per
    element for integer types (an over-estimate for INT4/INT2) or their float dtype.
    """

    @property
    def module_type(self) -> type[nn.Module]:
        return QuantEmbeddingBagCollection

    @property
    def fused_params(self) -> Mapping[str, object] | None:
        return None

    def sharding_types(self, compute_device_type: str) -> list[str]:
        return [t.value for t in QUANT_SHARDING_TYPES]

    def compute_kernels(self, sharding_type: str, compute_device_type: str) -> list[str]:
        return [EmbeddingComputeKernel.DENSE.value]

    def shardable_parameters(self, module: nn.Module) -> dict[str, nn.Parameter]:
        assert isinstance(module, QuantEmbeddingBagCollection)
        return _meta_weights(module.embedding_bag_configs())


class QuantEmbeddingCollectionSharder(QuantEmbeddingBagCollectionSharder):
    """The same forward-only view for `QuantEmbeddingCollection` (per-id lookups; the planner
    reads its `embedding_configs()` and costs it as an unpooled collection)."""

    @property
    def module_type(self) -> type[nn.Module]:
        return QuantEmbeddingCollection

    def shardable_parameters(self, module: nn.Module) -> dict[str, nn.Parameter]:
        assert isinstance(module, QuantEmbeddingCollection)
        return _meta_weights(module.embedding_configs())


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
