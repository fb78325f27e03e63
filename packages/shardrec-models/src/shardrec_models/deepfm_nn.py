"""`SimpleDeepFMNN` and its arches (TorchRec's `torchrec.models.deepfm`, same names and layout).

Legend: B batch, D the tables' embedding dim, F the EBC's output keys (one per (table,
feature)), DI `deep_fm_dimension`.

```
dense (B, in) --DenseArch--> (B, D) ----------+
                                               +--FMInteractionArch--> (B, D + DI + 1)
sparse (KJT) --SparseArch--> KT (B, F * D) ----+        --OverArch--> (B, 1) in (0, 1)
```

`FMInteractionArch` concatenates `[dense, deep_fm([dense, f_1..f_F]), fm([dense, f_1..f_F])]`
with `deep_fm = DeepFM(Sequential(Linear((F + 1) * D, DI), ReLU))` and `fm` the
`FactorizationMachine`. `OverArch` is `Sequential(Linear(.., 1), Sigmoid)`: the model returns
probabilities, as TorchRec's does.

No `from __future__ import annotations`: these modules are fx-traced then scripted.
"""

import torch
from torch import nn

from shardrec_embedding import EmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor, KeyedTensor
from shardrec_models.arches import ModelConfigError
from shardrec_models.deepfm import DeepFM, FactorizationMachine
from shardrec_models.dlrm import _ModelInput, _wrapper_output

__all__ = [
    "DenseArch",
    "FMInteractionArch",
    "OverArch",
    "SimpleDeepFMNN",
    "SimpleDeepFMNNWrapper",
    "SparseArch",
]


class SparseArch(nn.Module):
    """The collection's pooled embeddings as a KeyedTensor `(B, F * D)`."""

    def __init__(self, embedding_bag_collection: EmbeddingBagCollection) -> None:
        super().__init__()
        self.embedding_bag_collection = embedding_bag_collection

    def forward(self, features: KeyedJaggedTensor) -> KeyedTensor:
        out: KeyedTensor = self.embedding_bag_collection(features)
        return out


class DenseArch(nn.Module):
    """`Linear(in, hidden), ReLU, Linear(hidden, D), ReLU` (`model`): `(B, in)` -> `(B, D)`."""

    def __init__(self, in_features: int, hidden_layer_size: int, embedding_dim: int) -> None:
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(in_features, hidden_layer_size),
            nn.ReLU(),
            nn.Linear(hidden_layer_size, embedding_dim),
            nn.ReLU(),
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.model(features)
        return out


class FMInteractionArch(nn.Module):
    """`[dense, deep_fm(x), fm(x)]` over `x = [dense, f_1, ..., f_F]` (module docstring).

    Args:
        fm_in_features: `(F + 1) * D`, the width of x.
        sparse_feature_names: the KeyedTensor keys f_1..f_F, in order.
        deep_fm_dimension: DI.

    forward: `dense_features: (B, D)`, `sparse_features: KeyedTensor` -> `(B, D + DI + 1)`
    (the dense features alone when there are no sparse features).
    """

    def __init__(
        self, fm_in_features: int, sparse_feature_names: list[str], deep_fm_dimension: int
    ) -> None:
        super().__init__()
        self.sparse_feature_names = list(sparse_feature_names)
        self.deep_fm = DeepFM(
            dense_module=nn.Sequential(nn.Linear(fm_in_features, deep_fm_dimension), nn.ReLU())
        )
        self.fm = FactorizationMachine()

    def forward(self, dense_features: torch.Tensor, sparse_features: KeyedTensor) -> torch.Tensor:
        if len(self.sparse_feature_names) == 0:
            return dense_features
        blocks = sparse_features.to_dict()
        inputs = [dense_features] + [blocks[name] for name in self.sparse_feature_names]
        return torch.cat([dense_features, self.deep_fm(inputs), self.fm(inputs)], dim=1)


class OverArch(nn.Module):
    """`Linear(in_features, 1), Sigmoid` (`model`): `(B, in)` -> `(B, 1)` in (0, 1)."""

    def __init__(self, in_features: int) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Linear(in_features, 1), nn.Sigmoid())

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.model(features)
        return out


class SimpleDeepFMNN(nn.Module):
    """DeepFM over an EmbeddingBagCollection (TorchRec's `SimpleDeepFMNN`).

    Args:
        num_dense_features: width of `dense_features`.
        embedding_bag_collection: at least one table, all of one embedding_dim D.
        hidden_layer_size: the dense arch's hidden width.
        deep_fm_dimension: DI, the deep part's output width.

    forward: `dense_features: (B, num_dense_features)`, `sparse_features: KJT` ->
    `(B, 1)` probabilities. A feature read by several tables takes part once per table (its
    `feature@table` keys).
    """

    def __init__(
        self,
        num_dense_features: int,
        embedding_bag_collection: EmbeddingBagCollection,
        hidden_layer_size: int,
        deep_fm_dimension: int,
    ) -> None:
        super().__init__()
        configs = embedding_bag_collection.embedding_bag_configs()
        if not configs:
            raise ModelConfigError(
                "SimpleDeepFMNN needs at least one embedding table; the collection has none"
            )
        dims = sorted({c.embedding_dim for c in configs})
        if len(dims) != 1:
            raise ModelConfigError(
                f"SimpleDeepFMNN needs one embedding_dim for all tables, got {dims}"
            )
        dim = dims[0]
        names = embedding_bag_collection.embedding_names()
        self.sparse_arch = SparseArch(embedding_bag_collection)
        self.dense_arch = DenseArch(num_dense_features, hidden_layer_size, dim)
        self.inter_arch = FMInteractionArch(dim * (len(names) + 1), names, deep_fm_dimension)
        self.over_arch = OverArch(dim + deep_fm_dimension + 1)

    def forward(
        self, dense_features: torch.Tensor, sparse_features: KeyedJaggedTensor
    ) -> torch.Tensor:
        embedded_dense = self.dense_arch(dense_features)
        embedded_sparse = self.sparse_arch(sparse_features)
        out: torch.Tensor = self.over_arch(self.inter_arch(embedded_dense, embedded_sparse))
        return out


class SimpleDeepFMNNWrapper(SimpleDeepFMNN):
    """`SimpleDeepFMNN` taking one model input (`float_features`, `idlist_features`, `label`);
    in training mode returns `(loss, prediction)` with TorchRec's loss,
    `binary_cross_entropy_with_logits(prediction, label)` (applied to the model's sigmoid
    output, as TorchRec does), in eval mode the prediction."""

    def forward(  # type: ignore[override]  # TorchRec's signature: one model input
        self, model_input: _ModelInput
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        pred = super().forward(model_input.float_features, model_input.idlist_features)
        return _wrapper_output(self.training, pred, model_input.label)
