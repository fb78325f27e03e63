"""What the quantized-collection tests share: quantizing a float collection to one weight dtype,
and the seeded float collection of a (pooling, weighted) case with its quantized copy."""

from __future__ import annotations

import torch
from torch.ao.quantization import PlaceholderObserver

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    QuantConfig,
    QuantEmbeddingBagCollection,
)


def qconfig(dtype: torch.dtype, out: torch.dtype = torch.float) -> QuantConfig:
    """Weights stored as `dtype`, outputs produced as `out`."""
    return QuantConfig(
        activation=PlaceholderObserver.with_args(dtype=out),
        weight=PlaceholderObserver.with_args(dtype=dtype),
    )


def quantized(
    ebc: EmbeddingBagCollection, dtype: torch.dtype, out: torch.dtype = torch.float
) -> QuantEmbeddingBagCollection:
    """`ebc` quantized to `dtype` weights (`ebc` itself left as it was)."""
    ebc.qconfig = qconfig(dtype, out)
    try:
        return QuantEmbeddingBagCollection.from_float(ebc)
    finally:
        del ebc.qconfig


def float_and_quantized(
    tables: list[EmbeddingBagConfig], weighted: bool, dtype: torch.dtype
) -> tuple[EmbeddingBagCollection, QuantEmbeddingBagCollection]:
    """A float collection of `tables` drawn from seed 0, and its copy quantized to `dtype`."""
    torch.manual_seed(0)
    ebc = EmbeddingBagCollection(tables, is_weighted=weighted)
    return ebc, quantized(ebc, dtype)
