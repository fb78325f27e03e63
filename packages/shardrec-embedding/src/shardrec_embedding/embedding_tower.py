"""Embedding towers (TorchRec's `torchrec.modules.embedding_tower`): an embedding module whose
output goes straight into an interaction module, and a collection of such towers whose outputs
are concatenated along dim 1.

Which KJT a tower reads (`tower_input_params`): an `EmbeddingCollection` and an unweighted
`EmbeddingBagCollection` read `features`, a weighted EBC reads `weighted_features`, any other
embedding module receives both (`module(features, weighted_features)`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_jagged import KeyedJaggedTensor

__all__ = ["EmbeddingTower", "EmbeddingTowerCollection", "tower_input_params"]


def tower_input_params(module: nn.Module) -> tuple[bool, bool]:
    """`(reads features, reads weighted_features)` for an embedding module (module docstring)."""
    if isinstance(module, EmbeddingCollection):
        return True, False
    if isinstance(module, EmbeddingBagCollection):
        return not module.is_weighted(), module.is_weighted()
    return True, True


class EmbeddingTower(nn.Module):
    """`interaction(embedding(*args, **kwargs))`.

    Args:
        embedding_module: an embedding collection (or any module producing the interaction's
            input); `embedding` in the state dict.
        interaction_module: maps the embeddings to a `(B, N)` tensor; `interaction`.
        device: accepted for TorchRec's signature; the modules keep their own devices.
    """

    def __init__(
        self,
        embedding_module: nn.Module,
        interaction_module: nn.Module,
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        self.embedding = embedding_module
        self.interaction = interaction_module

    def forward(self, *args: object, **kwargs: object) -> torch.Tensor:
        out: torch.Tensor = self.interaction(self.embedding(*args, **kwargs))
        return out


class EmbeddingTowerCollection(nn.Module):
    """Several towers; forward concatenates their `(B, N_i)` outputs into `(B, sum N_i)`.

    forward(features, weighted_features): each tower gets the KJT(s) its embedding module
    reads (`tower_input_params`); a tower whose input is None raises `ValueError`.
    """

    def __init__(
        self, towers: Sequence[EmbeddingTower], device: torch.device | None = None
    ) -> None:
        super().__init__()
        self.towers = nn.ModuleList(towers)
        self._input_params = [tower_input_params(t.embedding) for t in towers]

    def forward(
        self,
        features: KeyedJaggedTensor | None = None,
        weighted_features: KeyedJaggedTensor | None = None,
    ) -> torch.Tensor:
        outputs: list[torch.Tensor] = []
        for i, (tower, (reads, reads_weighted)) in enumerate(
            zip(self.towers, self._input_params, strict=True)
        ):
            if (reads and features is None) or (reads_weighted and weighted_features is None):
                wanted = [
                    n for n, r in (("features", reads), ("weighted_features", reads_weighted)) if r
                ]
                raise ValueError(f"tower {i} reads {wanted}; pass them to EmbeddingTowerCollection")
            if reads and reads_weighted:
                outputs.append(tower(features, weighted_features))
            elif reads_weighted:
                outputs.append(tower(weighted_features))
            else:
                outputs.append(tower(features))
        return torch.cat(outputs, dim=1)
