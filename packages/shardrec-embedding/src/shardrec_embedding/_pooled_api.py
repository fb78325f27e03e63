"""TorchRec's read accessors of a pooled collection, shared by the float, fused and quantized
`EmbeddingBagCollection`s (each sets the three attributes in its `__init__`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardrec_embedding.configs import EmbeddingBagConfig

__all__ = ["PooledCollectionAPI"]


class PooledCollectionAPI:
    """`is_weighted()`, `embedding_bag_configs()` and `embedding_names()` over `_is_weighted`,
    `_configs` (the tables, in order) and `_embedding_names` (the output keys, in order)."""

    if TYPE_CHECKING:  # for mypy only: torch.jit.script would read class annotations
        _is_weighted: bool
        _configs: list[EmbeddingBagConfig]
        _embedding_names: list[str]

    def is_weighted(self) -> bool:
        return self._is_weighted

    def embedding_bag_configs(self) -> list[EmbeddingBagConfig]:
        return list(self._configs)

    def embedding_names(self) -> list[str]:
        """Output keys, in output order."""
        return list(self._embedding_names)
