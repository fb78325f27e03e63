"""Embedding towers (TorchRec path `torchrec.modules.embedding_tower`)."""

from shardrec_embedding import EmbeddingTower, EmbeddingTowerCollection, tower_input_params

__all__ = ["EmbeddingTower", "EmbeddingTowerCollection", "tower_input_params"]
