"""`SwishLayerNorm` (TorchRec's `torchrec.modules.activation`): `Y = X * sigmoid(LayerNorm(X))`.

State names are TorchRec's: `norm.0.weight`, `norm.0.bias` (the LayerNorm inside
`norm = Sequential(LayerNorm, Sigmoid)`).
"""

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["SwishLayerNorm"]


class SwishLayerNorm(nn.Module):
    """Swish with a layer norm inside the gate.

    Args:
        input_dims: the trailing dims to normalize over (an int, a list or a torch.Size).
        device: of the LayerNorm's parameters.

    forward: `x: (..., *input_dims)` -> the same shape.
    """

    def __init__(
        self, input_dims: int | Sequence[int] | torch.Size, device: torch.device | None = None
    ) -> None:
        super().__init__()
        dims = [input_dims] if isinstance(input_dims, int) else list(input_dims)
        self.norm = nn.Sequential(nn.LayerNorm(dims, device=device), nn.Sigmoid())

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        gate: torch.Tensor = self.norm(input)
        return input * gate
