"""`MLP` and `Perceptron`: linear layers with an activation, in TorchRec's layout.

The module tree is TorchRec's so that state_dict keys match (`_mlp.<i>._linear.weight`);
initialization is `nn.Linear`'s default, as in TorchRec.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from shardrec_models.activation import SwishLayerNorm

__all__ = ["MLP", "Activation", "Perceptron", "check_int", "check_layer_sizes"]


def check_layer_sizes(name: str, sizes: Sequence[int], *, min_len: int = 1) -> list[int]:
    """`sizes` as a list after checking it: at least `min_len` entries, each an int >= 1.

    Raises `ValueError` naming the argument `name` and the offending value.
    """
    if isinstance(sizes, str | bytes) or not isinstance(sizes, Sequence):
        raise TypeError(f"{name} must be a list of ints, got {sizes!r}")
    out = list(sizes)
    if len(out) < min_len:
        raise ValueError(
            f"{name} must list at least {min_len} layer size(s), got {out!r} (e.g. [512, 256, 64])"
        )
    for size in out:
        check_int(f"every size in {name}", size, why=f" in {out!r}")
    return out


def check_int(
    name: str,
    value: int,
    at_least: int = 1,
    why: str = "",
    error: type[ValueError] = ValueError,
) -> int:
    """`value` if it is an int (not a bool) of at least `at_least`, else `error` naming `name`
    and the value (`why`, when given, follows: what the value means)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < at_least:
        raise error(f"{name} must be an int >= {at_least}, got {value!r}{why}")
    return value


Activation = str | Callable[[Tensor], Tensor]
"""`"relu"`, `"sigmoid"`, a tensor function (`torch.relu`) or an `nn.Module` (copied per layer)."""

_BY_NAME: dict[str, Callable[[Tensor], Tensor]] = {"relu": torch.relu, "sigmoid": torch.sigmoid}


def _activation(activation: Activation) -> Callable[[Tensor], Tensor]:
    if isinstance(activation, str):
        fn = _BY_NAME.get(activation)
        if fn is None:
            raise ValueError(
                f"activation {activation!r} is not one of {sorted(_BY_NAME)}; pass a callable "
                "(a tensor function or an nn.Module) for anything else"
            )
        return fn
    if isinstance(activation, nn.Module):
        # One module per layer, as TorchRec: a module with parameters must not be shared.
        copied: nn.Module = copy.deepcopy(activation)
        return copied
    if callable(activation):
        return activation
    raise TypeError(f"activation must be a str or a callable, got {activation!r}")


def _as_device(device: torch.device | str | None) -> torch.device | None:
    return None if device is None else torch.device(device)


class Perceptron(nn.Module):
    """One `nn.Linear` (`_linear`) followed by `activation` (`_activation_fn`), as TorchRec's
    `torchrec.modules.mlp.Perceptron`.

    forward: `x: (B, in_size)` -> `(B, out_size)`.
    """

    def __init__(
        self,
        in_size: int,
        out_size: int,
        bias: bool = True,
        activation: Activation = torch.relu,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self._linear = nn.Linear(in_size, out_size, bias=bias, device=device, dtype=dtype)
        self._activation_fn: Callable[[Tensor], Tensor] = _activation(activation)

    def forward(self, x: Tensor) -> Tensor:
        return self._activation_fn(self._linear(x))


class MLP(nn.Module):
    """`len(layer_sizes)` perceptrons in a row (`_mlp`), as TorchRec's `torchrec.modules.mlp.MLP`.

    Args:
        in_size: input width.
        layer_sizes: each layer's output width; empty is the identity (TorchRec's OverArch wraps
            all but its last layer in an MLP; a one-layer over arch leaves that MLP empty).
        bias: linear layers with a bias.
        activation: applied after every layer (see `Activation`); `"swish_layernorm"` gives
            each layer its own `SwishLayerNorm` of its width, as TorchRec's MLP.
        device, dtype: of the parameters.
        activation_on_last: `False` leaves the last layer linear.

    forward: `x: (B, in_size)` -> `(B, layer_sizes[-1])`.
    """

    def __init__(
        self,
        in_size: int,
        layer_sizes: Sequence[int],
        bias: bool = True,
        activation: Activation = torch.relu,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float32,
        activation_on_last: bool = True,
    ) -> None:
        super().__init__()
        widths = [in_size, *layer_sizes]
        last = len(layer_sizes) - 1

        def layer_activation(i: int) -> Activation:
            if not activation_on_last and i == last:
                return nn.Identity()
            if activation == "swish_layernorm":
                return SwishLayerNorm(widths[i + 1], device=_as_device(device))
            return activation

        self._mlp = nn.Sequential(
            *[
                Perceptron(
                    widths[i],
                    widths[i + 1],
                    bias=bias,
                    activation=layer_activation(i),
                    device=device,
                    dtype=dtype,
                )
                for i in range(len(layer_sizes))
            ]
        )
        self.in_features = in_size
        self.out_features = widths[-1]

    def forward(self, x: Tensor) -> Tensor:
        y: Tensor = self._mlp(x)
        return y
