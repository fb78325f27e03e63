"""TorchRec path `torchrec.inference.modules`: model conversion for serving."""

from shardrec_embedding import quantize_inference_model
from shardrec_embedding.quant import quantize_embeddings
from shardrec_sharding import shard_quant_model

__all__ = ["quantize_embeddings", "quantize_inference_model", "shard_quant_model"]
