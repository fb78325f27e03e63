"""The four parts of DLRM (TorchRec's `torchrec.models.dlrm` arches, same names and semantics).

Legend: B batch size, F pooled sparse features (one per output key of the collection), D the
embedding dim (every table's), N = (F + 1) * D.

```
dense_features (B, in) --DenseArch--> (B, D) ------+
                                                    +--Interaction--> (B, I) --OverArch--> logits
sparse_features (KJT) --SparseArch--> (B, F, D) ----+
```

`InteractionArch` (DLRM): I = D + (F + 1) * F / 2, the dense output followed by the dot
products of every pair of the F + 1 vectors (upper triangle, row by row).
`InteractionDCNArch` (DLRM_DCN): I = N, a low-rank cross net over `[dense, f_1, ..., f_F]`.
`InteractionProjectionArch` (DLRM_Projection): I = D + F1 * F2, the dense output followed by
the products `P1 @ P2` of two learned projections of `[dense, f_1, ..., f_F]`:
`P1 = branch1(x).view(B, F1, D)`, `P2 = branch2(x).view(B, D, F2)`.
`InteractionTransformerArch` (DLRM_Transformer, TorchRec's experimental model): I = N, a
transformer encoder over each sample's F + 1 vectors as one sequence of tokens.

No `from __future__ import annotations` here: `torch.fx` records string annotations that
TorchScript cannot read, and the arches are traced then scripted as TorchRec's are.
"""

import math
from collections.abc import Sequence

import torch
import torch.fx
from torch import Tensor, nn

from shardrec_embedding import EmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor, KeyedTensor
from shardrec_models.crossnet import LowRankCrossNet
from shardrec_models.mlp import MLP, check_int

__all__ = [
    "DenseArch",
    "InteractionArch",
    "InteractionDCNArch",
    "InteractionProjectionArch",
    "OverArch",
    "SparseArch",
    "choose",
]


class ModelConfigError(ValueError, AssertionError):
    """A model built from inconsistent sizes. Also an AssertionError: TorchRec asserts these
    conditions, and ported code may catch that type."""


def is_proxy(value: object) -> bool:
    """True for a torch.fx Proxy: the module is being symbolically traced."""
    return isinstance(value, torch.fx.Proxy)


def choose(n: int, k: int) -> int:
    """The binomial coefficient C(n, k); 0 when k < 0 or k > n (TorchRec's `choose`)."""
    return math.comb(n, k) if 0 <= k <= n else 0


class SparseArch(nn.Module):
    """Pooled embeddings of the sparse features as one `(B, F, D)` tensor.

    F runs over the collection's output keys in their order (table order, then each table's
    feature order): TorchRec's order, also when a feature is read by several tables (TorchRec's
    own SparseArch fails there, looking the feature up under its plain name). The collection may
    be replaced by a sharded one (DistributedModelParallel): its lazy output is waited for here.
    """

    def __init__(self, embedding_bag_collection: EmbeddingBagCollection) -> None:
        super().__init__()
        configs = embedding_bag_collection.embedding_bag_configs()
        if not configs:
            raise ModelConfigError(
                "DLRM needs at least one embedding table; the EmbeddingBagCollection has none"
            )
        dims = {c.embedding_dim for c in configs}
        if len(dims) != 1:
            per_table = ", ".join(f"{c.name}: {c.embedding_dim}" for c in configs)
            raise ModelConfigError(
                "DLRM needs every table to have the same embedding_dim (the interaction takes "
                f"dot products between them); got {per_table}"
            )
        self.embedding_bag_collection = embedding_bag_collection
        self.D: int = configs[0].embedding_dim
        self._sparse_feature_names = embedding_bag_collection.embedding_names()
        self.F: int = len(self._sparse_feature_names)

    @property
    def sparse_feature_names(self) -> list[str]:
        """The collection's output keys: the F axis of `forward`'s result."""
        return list(self._sparse_feature_names)

    def forward(self, features: KeyedJaggedTensor) -> Tensor:
        """features: KJT holding every feature the tables read. Returns `(B, F, D)`."""
        return self.stack(self.embedding_bag_collection(features))

    def stack(self, pooled: KeyedTensor) -> Tensor:
        """The collection's output `(B, F * D)` as `(B, F, D)` (a view); waits for a sharded
        collection's lazy output."""
        if not torch._jit_internal.is_scripting():  # noqa: SIM102
            if is_proxy(pooled):
                # fx: TorchRec's graph, one slice per feature by name, then `cat` (the same
                # values: the keys are the sparse feature names, in order); eager keeps the view
                per_key = pooled.to_dict()
                stacked = torch.cat([per_key[f] for f in self._sparse_feature_names], dim=1)
                return stacked.reshape(stacked.shape[0], self.F, self.D)
        values = pooled.values()
        # An explicit B (not -1) so that an empty batch keeps its shape.
        return values.reshape(values.shape[0], self.F, self.D)


class DenseArch(nn.Module):
    """MLP over the dense features, ReLU after every layer (the last one included).

    forward: `features: (B, in_features)` -> `(B, layer_sizes[-1])`; another width is a
    `ValueError` naming both.
    """

    def __init__(
        self, in_features: int, layer_sizes: Sequence[int], device: torch.device | None = None
    ) -> None:
        super().__init__()
        self.in_features = check_int("dense_in_features", in_features)
        self.model = MLP(in_features, layer_sizes, device=device)

    def forward(self, features: Tensor) -> Tensor:
        # fx traces with a Proxy, which has no shape to check: the check is left out of the
        # traced graph. TorchScript drops this block and compiles the check.
        if not torch._jit_internal.is_scripting():  # noqa: SIM102
            if is_proxy(features):
                traced: Tensor = self.model(features)
                return traced
        if features.dim() != 2 or features.shape[1] != self.in_features:
            raise ValueError(_width_error(list(features.shape), self.in_features))
        out: Tensor = self.model(features)
        return out


def _width_error(shape: list[int], width: int) -> str:
    """The message, built so that TorchScript compiles it (no f-strings, no tuple())."""
    dims = ", ".join([str(d) for d in shape]) + ("," if len(shape) == 1 else "")
    return (
        "dense_features has shape ("
        + dims
        + "), but the model was built with dense_in_features="
        + str(width)
        + ": expected (B, "
        + str(width)
        + ")"
    )


def _feature_count(num_sparse_features: int) -> int:
    """An interaction's F, checked: a negative count would skip the interaction silently."""
    return check_int("num_sparse_features", num_sparse_features, at_least=0, error=ModelConfigError)


class InteractionArch(nn.Module):
    """The dense output followed by the pairwise dot products of `[dense, f_1, ..., f_F]`.

    forward: `dense_features: (B, D)`, `sparse_features: (B, F, D)` ->
    `(B, D + (F + 1) * F / 2)`, the pairs row by row over the upper triangle:
    `<d, f_1>, ..., <d, f_F>, <f_1, f_2>, ..., <f_{F-1}, f_F>`.
    """

    def __init__(self, num_sparse_features: int) -> None:
        super().__init__()
        self.F = _feature_count(num_sparse_features)
        # Flat positions of the pairs in the (F+1) x (F+1) Gram matrix, per device. Not a
        # buffer (TorchRec's is): DDP broadcasts buffers at every forward, a collective per
        # step for a constant, and a `meta` model would have to recompute it.
        self._pair_index: dict[torch.device, Tensor] = {}

    @torch.jit.unused
    def pair_index(self, device: torch.device) -> Tensor:
        """`(P,)` int64, P = (F + 1) * F / 2: flat Gram-matrix positions of the pairs, cached
        per device (scripted, the forward builds them per call: TorchScript has no dict keyed
        by device)."""
        index = self._pair_index.get(device)
        if index is None:
            index = self._pairs(device)
            self._pair_index[device] = index
        return index

    def _pairs(self, device: torch.device) -> Tensor:
        rows_cols = torch.triu_indices(self.F + 1, self.F + 1, offset=1, device=device)
        return rows_cols[0] * (self.F + 1) + rows_cols[1]

    def forward(self, dense_features: Tensor, sparse_features: Tensor) -> Tensor:
        if self.F <= 0:
            return dense_features
        combined = torch.cat((dense_features.unsqueeze(1), sparse_features), dim=1)
        gram = torch.bmm(combined, combined.transpose(1, 2))  # (B, F+1, F+1)
        # One index_select over the flattened matrix: its backward is a single index_add.
        if torch._jit_internal.is_scripting():
            index = self._pairs(gram.device)
        else:
            index = self.pair_index(gram.device)
        pairs = gram.flatten(1).index_select(1, index)
        return torch.cat((dense_features, pairs), dim=1)


class InteractionDCNArch(nn.Module):
    """A low-rank cross net over the concatenation `[dense, f_1, ..., f_F]`.

    forward: `dense_features: (B, D)`, `sparse_features: (B, F, D)` -> `(B, (F + 1) * D)`.
    """

    def __init__(self, num_sparse_features: int, crossnet: LowRankCrossNet) -> None:
        super().__init__()
        self.F = _feature_count(num_sparse_features)
        self.crossnet = crossnet

    def forward(self, dense_features: Tensor, sparse_features: Tensor) -> Tensor:
        if self.F <= 0:
            return dense_features
        combined = torch.cat((dense_features, sparse_features.flatten(1)), dim=1)
        out: Tensor = self.crossnet(combined)
        return out


class InteractionProjectionArch(nn.Module):
    """The dense output followed by the flattened `(F1, F2)` product of two projections of
    `[dense, f_1, ..., f_F]` (module docstring; TorchRec's DLRM_Projection interaction).

    Args:
        num_sparse_features: F.
        interaction_branch1, interaction_branch2: modules mapping `(B, (F + 1) * D)` to
            `(B, F1 * D)` and `(B, F2 * D)` (DLRM_Projection uses a `DenseArch` each).

    forward: `dense_features: (B, D)`, `sparse_features: (B, F, D)` -> `(B, D + F1 * F2)`.
    """

    def __init__(
        self,
        num_sparse_features: int,
        interaction_branch1: nn.Module,
        interaction_branch2: nn.Module,
    ) -> None:
        super().__init__()
        self.F = _feature_count(num_sparse_features)
        self.interaction_branch1 = interaction_branch1
        self.interaction_branch2 = interaction_branch2

    def forward(self, dense_features: Tensor, sparse_features: Tensor) -> Tensor:
        if self.F <= 0:
            return dense_features
        batch, dim = dense_features.shape[0], dense_features.shape[1]
        combined = torch.cat((dense_features.unsqueeze(1), sparse_features), dim=1).flatten(1)
        p1 = self.interaction_branch1(combined).reshape(batch, -1, dim)  # (B, F1, D)
        p2 = self.interaction_branch2(combined).reshape(batch, dim, -1)  # (B, D, F2)
        return torch.cat((dense_features, torch.bmm(p1, p2).flatten(1)), dim=1)


class OverArch(nn.Module):
    """ReLU MLP over all but the last size, then a plain linear layer (no activation).

    `model` is `Sequential(MLP(in, layer_sizes[:-1]), Linear(.., layer_sizes[-1]))`, as in
    TorchRec. A single size is accepted (TorchRec requires two): the MLP part is then empty.

    forward: `(B, in_features)` -> `(B, layer_sizes[-1])`.
    """

    def __init__(
        self, in_features: int, layer_sizes: Sequence[int], device: torch.device | None = None
    ) -> None:
        super().__init__()
        sizes = list(layer_sizes)
        hidden = MLP(in_features, sizes[:-1], device=device)
        self.model = nn.Sequential(
            hidden, nn.Linear(hidden.out_features, sizes[-1], bias=True, device=device)
        )
        self.in_features = in_features
        self.out_features = sizes[-1]

    def forward(self, features: Tensor) -> Tensor:
        out: Tensor = self.model(features)
        return out


class InteractionTransformerArch(nn.Module):
    """A transformer encoder over each sample's `[dense, f_1, ..., f_F]` (module docstring).

    Args:
        num_sparse_features: F.
        embedding_dim: D (divisible by `nhead`).
        nhead: attention heads per layer.
        ntransformer_layers: encoder layers.

    forward: `dense_features: (B, D)`, `sparse_features: (B, F, D)` -> `(B, (F + 1) * D)` (the
    dense features alone when F is 0).

    Differs from TorchRec on purpose: TorchRec builds its encoder with torch's default
    `batch_first=False`, so a `(B, F + 1, D)` input is read as F + 1 sequences of length B and
    the attention mixes the samples of a batch (a sample's output depends on the other
    samples). Here the encoder is `batch_first=True`: each sample attends over its own F + 1
    features only, and a sample's output is the same in any batch. The parameters (and their
    state-dict keys, `inter_arch.interarch_TE.layers.<l>.*`) are the same.
    """

    def __init__(
        self,
        num_sparse_features: int,
        embedding_dim: int,
        nhead: int = 8,
        ntransformer_layers: int = 4,
    ) -> None:
        super().__init__()
        check_int("nhead", nhead, error=ModelConfigError)
        check_int("ntransformer_layers", ntransformer_layers, error=ModelConfigError)
        if embedding_dim % nhead != 0:
            raise ModelConfigError(
                f"embedding_dim {embedding_dim} must be divisible by nhead {nhead}; "
                "pick an nhead that divides it"
            )
        self.F: int = _feature_count(num_sparse_features)
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
