"""Quantized collections (TorchRec path `torchrec.quant.embedding_modules`): here
`EmbeddingBagCollection` / `EmbeddingCollection` are the quantized classes, as in TorchRec.

`_get_unflattened_lengths` / `_get_batching_hinted_output` are TorchRec's private names of
the traced graph's functions (TorchRec's tests look them up by name); ours are public."""

from shardrec_embedding import QuantEmbeddingBagCollection as EmbeddingBagCollection
from shardrec_embedding import QuantEmbeddingCollection as EmbeddingCollection
from shardrec_embedding.quant import (
    MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS,
    MODULE_ATTR_USE_UNFLATTENED_LENGTHS_FOR_BATCHING,
    dequantize,
    quant_prep_enable_quant_state_dict_split_scale_bias,
    quant_prep_enable_quant_state_dict_split_scale_bias_for_types,
    quantize,
)
from shardrec_embedding.quant import batching_hinted_output as _get_batching_hinted_output
from shardrec_embedding.quant import unflattened_lengths as _get_unflattened_lengths

__all__ = [
    "MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS",
    "MODULE_ATTR_USE_UNFLATTENED_LENGTHS_FOR_BATCHING",
    "EmbeddingBagCollection",
    "EmbeddingCollection",
    "_get_batching_hinted_output",
    "_get_unflattened_lengths",
    "dequantize",
    "quant_prep_enable_quant_state_dict_split_scale_bias",
    "quant_prep_enable_quant_state_dict_split_scale_bias_for_types",
    "quantize",
]
