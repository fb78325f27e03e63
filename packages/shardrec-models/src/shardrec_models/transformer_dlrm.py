"""`DLRM_Transformer`: DLRM whose interaction is a transformer encoder (TorchRec's experimental
`torchrec.models.experimental.transformerdlrm`, same names, arguments and state-dict keys).

The interaction reads the `F + 1` vectors of each sample, `[dense, f_1, ..., f_F]` (each of the
tables' embedding dim D), as one sequence of F + 1 tokens, runs `ntransformer_layers` layers of
`nn.TransformerEncoderLayer(d_model=D, nhead)` over it and flattens the result to
`(B, (F + 1) * D)`, the over arch's input. D must be divisible by `nhead`.

Differs from TorchRec on purpose: TorchRec builds its encoder with torch's default
`batch_first=False`, so a `(B, F + 1, D)` input is read as F + 1 sequences of length B and the
attention mixes the samples of a batch (a sample's output depends on the other samples). Here
the encoder is `batch_first=True`: each sample attends over its own F + 1 features only, and a
sample's output is the same in any batch. The parameters (and their state-dict keys,
`inter_arch.interarch_TE.layers.<l>.*`) are the same.

No `from __future__ import annotations` here: the models are fx-traced then scripted.
"""

import torch
from torch import Tensor, nn

from shardrec_embedding import EmbeddingBagCollection
from shardrec_models.arches import ModelConfigError, OverArch
from shardrec_models.dlrm import DLRM, _device

__all__ = ["DLRM_Transformer", "InteractionTransformerArch"]


class InteractionTransformerArch(nn.Module):
    """A transformer encoder over each sample's `[dense, f_1, ..., f_F]` (module docstring).

    Args:
        num_sparse_features: F.
        embedding_dim: D (divisible by `nhead`).
        nhead: attention heads per layer.
        ntransformer_layers: encoder layers.

    forward: `dense_features: (B, D)`, `sparse_features: (B, F, D)` -> `(B, (F + 1) * D)` (the
    dense features alone when F is 0).
    """

    def __init__(
        self,
        num_sparse_features: int,
        embedding_dim: int,
        nhead: int = 8,
        ntransformer_layers: int = 4,
    ) -> None:
        super().__init__()
        for field, value in (("nhead", nhead), ("ntransformer_layers", ntransformer_layers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelConfigError(f"{field} must be a positive int, got {value!r}")
        if embedding_dim % nhead != 0:
            raise ModelConfigError(
                f"embedding_dim {embedding_dim} must be divisible by nhead {nhead}; "
                "pick an nhead that divides it"
            )
        self.F: int = num_sparse_features
        self.nhead = nhead
        self.ntransformer_layers = ntransformer_layers
        layer = nn.TransformerEncoderLayer(d_model=embedding_dim, nhead=nhead, batch_first=True)
        self.interarch_TE = nn.TransformerEncoder(
            layer, num_layers=ntransformer_layers, enable_nested_tensor=False
        )

    def forward(self, dense_features: Tensor, sparse_features: Tensor) -> Tensor:
        if self.F <= 0:
            return dense_features
        tokens = torch.cat((dense_features.unsqueeze(1), sparse_features), dim=1)  # (B, F+1, D)
        out: Tensor = self.interarch_TE(tokens)
        return out.flatten(1)


class DLRM_Transformer(DLRM):
    """DLRM with `InteractionTransformerArch` as its interaction (module docstring).

    Args: those of `DLRM`, plus
        nhead: attention heads (must divide the tables' embedding dim).
        ntransformer_layers: encoder layers.

    The over arch reads the encoder's flattened output, of width `(F + 1) * D`.
    """

    def __init__(
        self,
        embedding_bag_collection: EmbeddingBagCollection,
        dense_in_features: int,
        dense_arch_layer_sizes: list[int],
        over_arch_layer_sizes: list[int],
        nhead: int = 8,
        ntransformer_layers: int = 4,
        dense_device: torch.device | str | None = None,
    ) -> None:
        super().__init__(
            embedding_bag_collection,
            dense_in_features,
            dense_arch_layer_sizes,
            over_arch_layer_sizes,
            dense_device,
        )
        device = _device(dense_device)
        dim, num_features = self.sparse_arch.D, self.sparse_arch.F
        # The base class built the dot-product interaction and its over arch; both are
        # replaced, as in TorchRec (the over arch's input width changes with the interaction).
        self.inter_arch = InteractionTransformerArch(num_features, dim, nhead, ntransformer_layers)
        if device is not None:
            self.inter_arch.to(device)
        self.over_arch = OverArch(
            (num_features + 1) * dim, list(over_arch_layer_sizes), device=device
        )
