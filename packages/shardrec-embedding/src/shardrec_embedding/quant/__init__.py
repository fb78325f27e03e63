"""Quantized inference: row-wise quantization kernels, quantized collections, conversion."""

from shardrec_embedding.quant.config import (
    MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS,
    QuantConfig,
)
from shardrec_embedding.quant.convert import (
    meta_to_cpu_placement,
    quant_prep_enable_quant_state_dict_split_scale_bias,
    quant_prep_enable_quant_state_dict_split_scale_bias_for_types,
    quantize_embeddings,
    quantize_inference_model,
)
from shardrec_embedding.quant.dynamic import (
    DynamicPooledLookup,
    DynamicSequenceLookup,
    IdMapped,
    ScriptableIdMap,
)
from shardrec_embedding.quant.embedding_bag_collection import (
    QuantEmbeddingBagCollection,
    ScriptablePooledLookup,
)
from shardrec_embedding.quant.embedding_collection import QuantEmbeddingCollection
from shardrec_embedding.quant.lookup import (
    PooledLookup,
    QuantGroup,
    SegmentMeta,
    SequenceLookup,
    check_kjt_input,
    check_segment_ids,
    eager_lookup_args,
    kjt_lookup_args,
    kjt_segment_index,
    kjt_sequence_index,
    sequence_forward,
)
from shardrec_embedding.quant.rowwise import (
    QUANT_DATA_TYPES,
    SUPPORTED_DATA_TYPES,
    dequantize,
    quantize,
    row_bytes,
    scale_bias,
)
from shardrec_embedding.quant.split_lookup import ShardedPooledLookup, ShardedSequenceLookup
from shardrec_embedding.quant.traced import (
    MODULE_ATTR_USE_UNFLATTENED_LENGTHS_FOR_BATCHING,
    batching_hinted_output,
    unflattened_lengths,
)

__all__ = [
    "MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS",
    "MODULE_ATTR_USE_UNFLATTENED_LENGTHS_FOR_BATCHING",
    "QUANT_DATA_TYPES",
    "SUPPORTED_DATA_TYPES",
    "DynamicPooledLookup",
    "DynamicSequenceLookup",
    "IdMapped",
    "PooledLookup",
    "QuantConfig",
    "QuantEmbeddingBagCollection",
    "QuantEmbeddingCollection",
    "QuantGroup",
    "ScriptableIdMap",
    "ScriptablePooledLookup",
    "SegmentMeta",
    "SequenceLookup",
    "ShardedPooledLookup",
    "ShardedSequenceLookup",
    "batching_hinted_output",
    "check_kjt_input",
    "check_segment_ids",
    "dequantize",
    "eager_lookup_args",
    "kjt_lookup_args",
    "kjt_segment_index",
    "kjt_sequence_index",
    "meta_to_cpu_placement",
    "quant_prep_enable_quant_state_dict_split_scale_bias",
    "quant_prep_enable_quant_state_dict_split_scale_bias_for_types",
    "quantize",
    "quantize_embeddings",
    "quantize_inference_model",
    "row_bytes",
    "scale_bias",
    "sequence_forward",
    "unflattened_lengths",
]
