"""Quantized collections (TorchRec path `torchrec.quant.embedding_modules`): here
`EmbeddingBagCollection` / `EmbeddingCollection` are the quantized classes, as in TorchRec."""

from shardrec_embedding import QuantEmbeddingBagCollection as EmbeddingBagCollection
from shardrec_embedding import QuantEmbeddingCollection as EmbeddingCollection
from shardrec_embedding.quant import (
    MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS,
    dequantize,
    quant_prep_enable_quant_state_dict_split_scale_bias,
    quantize,
)

__all__ = [
    "MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS",
    "EmbeddingBagCollection",
    "EmbeddingCollection",
    "dequantize",
    "quant_prep_enable_quant_state_dict_split_scale_bias",
    "quantize",
]
