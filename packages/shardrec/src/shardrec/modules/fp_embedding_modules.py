"""Feature-processed collections (TorchRec path `torchrec.modules.fp_embedding_modules`)."""

from shardrec_embedding import FeatureProcessedEmbeddingBagCollection

__all__ = ["FeatureProcessedEmbeddingBagCollection"]
