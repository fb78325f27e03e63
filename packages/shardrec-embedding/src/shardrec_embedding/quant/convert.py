"""`quantize_inference_model`: swap every float collection of a model for its quantized form."""

from __future__ import annotations

import torch
from torch import nn
from torch.ao.quantization import PlaceholderObserver

from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_embedding.quant.config import QuantConfig, data_type_of_dtype
from shardrec_embedding.quant.embedding_bag_collection import QuantEmbeddingBagCollection
from shardrec_embedding.quant.embedding_collection import QuantEmbeddingCollection

__all__ = ["quantize_inference_model"]


def quantize_inference_model(
    model: nn.Module,
    dtype: torch.dtype = torch.int8,
    *,
    output_dtype: torch.dtype = torch.float32,
    per_table_weight_dtype: dict[str, torch.dtype] | None = None,
) -> nn.Module:
    """Replace (in place) every `EmbeddingBagCollection` / `EmbeddingCollection` in `model`
    with its quantized form storing `dtype` (int8, quint4x2, quint2x4, float16, bfloat16) and
    returning `output_dtype`; a model that *is* a collection returns the new module.
    """
    data_type_of_dtype(dtype, "quantize_inference_model")  # ValueError for a bad dtype first
    qconfig = QuantConfig(
        activation=PlaceholderObserver.with_args(dtype=output_dtype),
        weight=PlaceholderObserver.with_args(dtype=dtype),
        per_table_weight_dtype=per_table_weight_dtype,
    )
    return _swap(model, qconfig)


def _swap(module: nn.Module, qconfig: QuantConfig) -> nn.Module:
    if isinstance(module, EmbeddingBagCollection | EmbeddingCollection):
        # the attribute quantize_dynamic's propagate_qconfig_ sets, read by from_float
        setattr(module, "qconfig", qconfig)  # noqa: B010
        try:
            if isinstance(module, EmbeddingBagCollection):
                return QuantEmbeddingBagCollection.from_float(module)
            return QuantEmbeddingCollection.from_float(module)
        finally:
            del module.qconfig
    for name, child in list(module.named_children()):
        new = _swap(child, qconfig)
        if new is not child:
            setattr(module, name, new)
    return module
