"""Embedding table configs, EmbeddingBagCollection, EmbeddingCollection and table-batched lookups."""

__all__: list[str] = []
