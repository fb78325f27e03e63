"""Cross networks (TorchRec's `torchrec.modules.crossnet`, same names, parameters and init).

Every variant maps `x: (B, N)` to `(B, N)` through `num_layers` layers (`*` elementwise,
x_0 the input, `.` the dot product, g the activation):

| module | layer l | parameters per layer |
|---|---|---|
| `CrossNet` (DCN) | `x_0 * (K_l x + b_l) + x` | `kernels: (N, N)`, `bias: (N, 1)` |
| `VectorCrossNet` (DCN-v1) | `x_0 (k_l . x) + b_l + x` | `kernels: (N, 1)`, `bias: (N, 1)` |
| `LowRankCrossNet` (DCN-v2) | `x_0 * (W_l (V_l x) + b_l) + x` | `W_kernels`, `V_kernels`, `bias` |
| `LowRankMixtureCrossNet` | `sum_i gate_i(x) e_i(x) + x` | see the class |

with `e_i(x) = x_0 * (U_li g(C_li g(V_li x)) + b_l)` and `gate = softmax(gates.<i>(x))` over i;
parameters `U_kernels: (K, N, r)`, `V_kernels: (K, r, N)`, `C_kernels: (K, r, r)`,
`bias: (N, 1)`, `gates.<i>: Linear(N, 1, bias=False)` (all indexed `.<l>` by layer). With
one expert the mixture has no gates and the expert's output is used as is. Kernels start
Xavier-normal, biases at zero, gates as `nn.Linear`; parameters are created in TorchRec's
order, so the same seed gives the same weights. References: Wang et al.,
https://arxiv.org/abs/1708.05123 (DCN) and
https://arxiv.org/abs/2008.13535 (DCN-v2).

No `from __future__ import annotations` here: `torch.fx.Tracer` records string annotations
that TorchScript cannot read, and these modules are traced and scripted as TorchRec's are.
"""

from collections.abc import Callable

import torch
from torch import Tensor, nn

from shardrec_models.mlp import check_int

__all__ = ["CrossNet", "LowRankCrossNet", "LowRankMixtureCrossNet", "VectorCrossNet"]


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
        check_int("dcn_num_layers", num_layers, at_least=0)
        check_int(
            "dcn_low_rank_dim",
            low_rank,
            why=f" (the rank of each cross layer; about in_features / 4 = "
            f"{max(1, in_features // 4)} keeps the accuracy of a full-rank cross net)",
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


def _xavier(*shape: int) -> nn.Parameter:
    return nn.Parameter(nn.init.xavier_normal_(torch.empty(*shape)))


def _zeros(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.zeros(*shape))


class _KernelCrossLayers(nn.Module):
    """Cross layers with one Xavier-normal kernel `(in_features, kernel_cols)` and one zero
    bias `(in_features, 1)` per layer (`kernels.<l>`, `bias.<l>`, created in that order)."""

    def __init__(self, in_features: int, num_layers: int, kernel_cols: int) -> None:
        super().__init__()
        check_int("num_layers", num_layers, at_least=0)
        self._num_layers = num_layers
        self.kernels = nn.ParameterList(
            [_xavier(in_features, kernel_cols) for _ in range(num_layers)]
        )
        self.bias = nn.ParameterList([_zeros(in_features, 1) for _ in range(num_layers)])


class CrossNet(_KernelCrossLayers):
    """Full-rank cross layers: `x_{l+1} = x_0 * (K_l x_l + b_l) + x_l` (module table).

    forward: `x: (B, in_features)` -> `(B, in_features)`.
    """

    def __init__(self, in_features: int, num_layers: int) -> None:
        super().__init__(in_features, num_layers, in_features)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x0 = input.unsqueeze(2)  # (B, N, 1)
        xl = x0
        for kernel, bias in zip(self.kernels, self.bias, strict=True):
            xl = x0 * (torch.matmul(kernel, xl) + bias) + xl
        return xl.squeeze(2)


class VectorCrossNet(_KernelCrossLayers):
    """DCN-v1 cross layers with one vector per layer: `x_{l+1} = x_0 (k_l . x_l) + b_l + x_l`.

    forward: `x: (B, in_features)` -> `(B, in_features)`.
    """

    def __init__(self, in_features: int, num_layers: int) -> None:
        super().__init__(in_features, num_layers, 1)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x0 = input.unsqueeze(2)  # (B, N, 1)
        xl = x0
        for kernel, bias in zip(self.kernels, self.bias, strict=True):
            dot = torch.matmul(kernel.t(), xl)  # (B, 1, 1): k_l . x_l per sample
            xl = x0 * dot + bias + xl
        return xl.squeeze(2)


class LowRankMixtureCrossNet(nn.Module):
    """DCN-v2's mixture of `num_experts` low-rank experts per layer, gated by a softmax over
    `gates.<i>(x_l)` (module table). One expert: no gates.

    Args:
        in_features: N.
        num_layers: cross layers (>= 0).
        num_experts: K >= 1.
        low_rank: r >= 1.
        activation: g, applied inside each expert (a tensor function or module).

    forward: `x: (B, in_features)` -> `(B, in_features)`.
    """

    def __init__(
        self,
        in_features: int,
        num_layers: int,
        num_experts: int = 1,
        low_rank: int = 1,
        activation: nn.Module | Callable[[torch.Tensor], torch.Tensor] = torch.relu,
    ) -> None:
        super().__init__()
        check_int("num_layers", num_layers, at_least=0)
        check_int("num_experts", num_experts)
        check_int("low_rank", low_rank)
        self._num_layers = num_layers
        self._num_experts = num_experts
        self._low_rank = low_rank
        self._in_features = in_features
        k, n, r = num_experts, in_features, low_rank
        # Creation order is TorchRec's (U, V, bias, gates, C) so a seed gives its weights.
        self.U_kernels = nn.ParameterList([_xavier(k, n, r) for _ in range(num_layers)])
        self.V_kernels = nn.ParameterList([_xavier(k, r, n) for _ in range(num_layers)])
        self.bias = nn.ParameterList([_zeros(n, 1) for _ in range(num_layers)])
        self.gates = (
            nn.ModuleList([nn.Linear(n, 1, bias=False) for _ in range(k)]) if k > 1 else None
        )
        self._activation = activation
        self.C_kernels = nn.ParameterList([_xavier(k, r, r) for _ in range(num_layers)])

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x0 = input.unsqueeze(1)  # (B, 1, N): broadcast over the K experts
        xl = input
        for u, v, c, bias in zip(
            self.U_kernels, self.V_kernels, self.C_kernels, self.bias, strict=True
        ):
            # All K experts at once: (B, K, r) -> (B, K, r) -> (B, K, N).
            h = self._activation(torch.einsum("kin,bn->bki", v, xl))
            h = self._activation(torch.einsum("kij,bkj->bki", c, h))
            experts = x0 * (torch.einsum("kni,bki->bkn", u, h) + bias.squeeze(1))
            if self.gates is not None:
                logits = torch.cat([gate(xl) for gate in self.gates], dim=1)  # (B, K)
                weights = torch.softmax(logits, dim=1)
                xl = torch.einsum("bkn,bk->bn", experts, weights) + xl
            else:
                xl = experts.squeeze(1) + xl
        return xl
