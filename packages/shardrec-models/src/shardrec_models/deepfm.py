"""DeepFM's two parts over lists of embeddings (TorchRec's `torchrec.modules.deepfm`).

Both take `embeddings: list[(B, N_i, D_i)]` and first flatten and concatenate them into
`x: (B, K)`, K = sum_i N_i * D_i:

- `DeepFM(dense_module)`: `dense_module(x)`.
- `FactorizationMachine()`: the second-order FM term over the K scalars of x,
  `0.5 * ((sum_k x_k) ** 2 - sum_k x_k ** 2)`, as a `(B, 1)` tensor (TorchRec's form: every
  scalar of every embedding is one FM input; Rendle's per-dimension form is not used).

Reference: Guo et al., https://arxiv.org/abs/1703.04247.
"""

import torch
import torch.fx
from torch import nn

__all__ = ["DeepFM", "FactorizationMachine"]


@torch.fx.wrap
def _flatten(embeddings: list[torch.Tensor]) -> torch.Tensor:
    """`list[(B, N_i, D_i)]` -> `(B, sum N_i * D_i)`.

    A leaf for torch.fx (`torch.fx.wrap`): these modules trace when `embeddings` is itself a
    graph input (a Proxy that cannot be iterated), and the traced graph then scripts.
    """
    return torch.cat([e.flatten(1) for e in embeddings], dim=1)


class DeepFM(nn.Module):
    """The deep part of DeepFM: `dense_module` over the flattened embeddings (docstring above).

    forward: `embeddings: list[(B, N_i, D_i)]` -> `dense_module`'s output.
    """

    def __init__(self, dense_module: nn.Module) -> None:
        super().__init__()
        self.dense_module = dense_module

    def forward(self, embeddings: list[torch.Tensor]) -> torch.Tensor:
        out: torch.Tensor = self.dense_module(_flatten(embeddings))
        return out


class FactorizationMachine(nn.Module):
    """The FM part of DeepFM: second-order interactions of the flattened embeddings.

    forward: `embeddings: list[(B, N_i, D_i)]` -> `(B, 1)`.
    """

    def forward(self, embeddings: list[torch.Tensor]) -> torch.Tensor:
        x = _flatten(embeddings)
        total = x.sum(dim=1, keepdim=True)
        return 0.5 * (total * total - (x * x).sum(dim=1, keepdim=True))
