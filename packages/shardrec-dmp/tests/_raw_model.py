"""The one-table raw-id model the virtual-tier checkpoint tests train (test_virtual_checkpoint,
test_virtual_interchange): a dynamic table `raw` read by feature `f`, summed with per-bag
coefficients, its initial range fixed so plans of other capacities start alike."""

from __future__ import annotations

from torch import Tensor, nn

from shardrec_embedding import DynamicTableConfig, EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor


class RawModel(nn.Module):
    def __init__(self, capacity: int, dim: int) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(
            [
                EmbeddingBagConfig(
                    name="raw",
                    num_embeddings=capacity,
                    weight_init_min=-0.25,  # not from num_embeddings (it differs by plan)
                    weight_init_max=0.25,
                    embedding_dim=dim,
                    feature_names=["f"],
                    dynamic=DynamicTableConfig(init_seed=5),
                )
            ]
        )

    def forward(self, batch: tuple[KeyedJaggedTensor, Tensor]) -> Tensor:
        kjt, coefficients = batch
        return (self.sparse(kjt).values() * coefficients).sum()
