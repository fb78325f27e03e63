"""`LowRankCrossNet`: DCN-v2's cross layers with a rank-r factorization (TorchRec's names).

Layer l maps `x_l` to `x_{l+1} = x_0 * (W_l (V_l x_l) + b_l) + x_l`, with `V_l: (r, N)`,
`W_l: (N, r)`, `b_l: (N,)` and `*` elementwise (Wang et al., https://arxiv.org/abs/2008.13535).
Parameters are `W_kernels.<l>`, `V_kernels.<l>` and `bias.<l>`, as in
`torchrec.modules.crossnet.LowRankCrossNet`; kernels start Xavier-normal, biases at zero.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

__all__ = ["LowRankCrossNet"]


class _InitializedParameterList(nn.ParameterList):
    """A ParameterList that can (re)initialize its parameters in place.

    DistributedModelParallel materializes a `meta` dense part module by module: `to_empty()`,
    then the module's own `reset_parameters()`. A plain ParameterList has none, so its
    parameters would keep whatever memory `to_empty` returned.
    """

    def __init__(self, params: list[nn.Parameter], init: Callable[[Tensor], Tensor]) -> None:
        super().__init__(params)
        self._init = init

    def reset_parameters(self) -> None:
        with torch.no_grad():
            for p in self:
                self._init(p)


class LowRankCrossNet(nn.Module):
    """`num_layers` low-rank cross layers over inputs of width `in_features`.

    Args:
        in_features: N, the input (and output) width.
        num_layers: cross layers (0 is the identity).
        low_rank: r >= 1, the rank of each layer's `W_l V_l`.
        device: where the parameters live (`meta` allocates nothing; `reset_parameters()`
            after `to_empty()` initializes them).

    forward: `x: (B, N)` -> `(B, N)`.
    """

    def __init__(
        self,
        in_features: int,
        num_layers: int,
        low_rank: int = 1,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 0:
            raise ValueError(f"dcn_num_layers must be an int >= 0, got {num_layers!r}")
        if isinstance(low_rank, bool) or not isinstance(low_rank, int) or low_rank <= 0:
            raise ValueError(
                f"dcn_low_rank_dim must be an int >= 1, got {low_rank!r} (the rank of each cross "
                f"layer; about in_features / 4 = {max(1, in_features // 4)} keeps the accuracy "
                "of a full-rank cross net)"
            )
        self.in_features = in_features
        self.num_layers = num_layers
        self.low_rank = low_rank

        def params(*shape: int) -> list[nn.Parameter]:
            return [nn.Parameter(torch.empty(*shape, device=device)) for _ in range(num_layers)]

        self.W_kernels = _InitializedParameterList(
            params(in_features, low_rank), nn.init.xavier_normal_
        )
        self.V_kernels = _InitializedParameterList(
            params(low_rank, in_features), nn.init.xavier_normal_
        )
        self.bias = _InitializedParameterList(params(in_features), nn.init.zeros_)
        if torch.device(device if device is not None else "cpu").type != "meta":
            self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-normal kernels and zero biases (TorchRec's initialization)."""
        for plist in (self.W_kernels, self.V_kernels, self.bias):
            plist.reset_parameters()

    def forward(self, x: Tensor) -> Tensor:
        x0 = x
        xl = x
        for w, v, b in zip(self.W_kernels, self.V_kernels, self.bias, strict=True):
            # (B, N) -> (B, r) -> (B, N), the bias added by the same matmul call.
            xw = nn.functional.linear(nn.functional.linear(xl, v), w, b)
            xl = torch.addcmul(xl, x0, xw)
        return xl

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, num_layers={self.num_layers}, "
            f"low_rank={self.low_rank}"
        )
