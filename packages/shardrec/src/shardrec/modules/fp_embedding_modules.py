"""Feature-processed collections (TorchRec path `torchrec.modules.fp_embedding_modules`)."""

from shardrec_embedding import FeatureProcessedEmbeddingBagCollection, FeatureProcessorDictWrapper

__all__ = ["FeatureProcessedEmbeddingBagCollection", "FeatureProcessorDictWrapper"]
