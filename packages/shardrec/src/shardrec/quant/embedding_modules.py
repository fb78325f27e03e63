"""Quantized collections (TorchRec path `torchrec.quant.embedding_modules`): here
`EmbeddingBagCollection` / `EmbeddingCollection` are the quantized classes, as in TorchRec."""

from shardrec_embedding import QuantEmbeddingBagCollection as EmbeddingBagCollection
from shardrec_embedding import QuantEmbeddingCollection as EmbeddingCollection
from shardrec_embedding.quant import dequantize, quantize

__all__ = ["EmbeddingBagCollection", "EmbeddingCollection", "dequantize", "quantize"]
