"""Cross-net variants against a per-sample loop of the formulas in shardrec_models.crossnet."""

from __future__ import annotations

import pytest
import torch
from torch.fx import GraphModule, Tracer

from shardrec_models import CrossNet, LowRankCrossNet, LowRankMixtureCrossNet, VectorCrossNet
from shardrec_testing import assert_close, seeded_generator


def _randomize(module: torch.nn.Module, seed: str) -> None:
    """Random values everywhere (biases included, which start at zero)."""
    gen = seeded_generator(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)


def _loop(x: torch.Tensor, layer: object, num_layers: int) -> torch.Tensor:
    rows = []
    for x0 in x:
        xl = x0.clone()
        for i in range(num_layers):
            xl = layer(i, x0, xl)  # type: ignore[operator]  # a per-layer function
        rows.append(xl)
    return torch.stack(rows)


def test_crossnet_full_rank() -> None:
    net = CrossNet(4, 3)
    _randomize(net, "full")
    x = torch.randn(5, 4, generator=seeded_generator("x-full"))

    def layer(i: int, x0: torch.Tensor, xl: torch.Tensor) -> torch.Tensor:
        return x0 * (net.kernels[i] @ xl + net.bias[i][:, 0]) + xl

    assert_close(net(x), _loop(x, layer, 3))


def test_vector_crossnet_adds_bias_outside_the_product() -> None:
    net = VectorCrossNet(4, 3)
    _randomize(net, "vector")
    x = torch.randn(5, 4, generator=seeded_generator("x-vector"))

    def layer(i: int, x0: torch.Tensor, xl: torch.Tensor) -> torch.Tensor:
        return x0 * torch.dot(net.kernels[i][:, 0], xl) + net.bias[i][:, 0] + xl

    assert_close(net(x), _loop(x, layer, 3))


@pytest.mark.parametrize("experts", [1, 3])
def test_mixture_crossnet(experts: int) -> None:
    net = LowRankMixtureCrossNet(4, 2, num_experts=experts, low_rank=2, activation=torch.tanh)
    _randomize(net, f"mixture{experts}")
    x = torch.randn(6, 4, generator=seeded_generator("x-mixture", experts))

    def layer(i: int, x0: torch.Tensor, xl: torch.Tensor) -> torch.Tensor:
        outs = []
        for k in range(experts):
            h = torch.tanh(net.V_kernels[i][k] @ xl)
            h = torch.tanh(net.C_kernels[i][k] @ h)
            outs.append(x0 * (net.U_kernels[i][k] @ h + net.bias[i][:, 0]))
        if net.gates is None:
            return outs[0] + xl
        gate = torch.softmax(torch.stack([g(xl)[0] for g in net.gates]), dim=0)
        return sum(w * o for w, o in zip(gate, outs, strict=True)) + xl

    assert_close(net(x), _loop(x, layer, 2))
    assert (net.gates is None) == (experts == 1)


def test_parameter_names_and_shapes_are_torchrec_s() -> None:
    shapes = {k: tuple(v.shape) for k, v in LowRankMixtureCrossNet(5, 1, 2, 3).state_dict().items()}
    assert shapes == {
        "U_kernels.0": (2, 5, 3),
        "V_kernels.0": (2, 3, 5),
        "bias.0": (5, 1),
        "gates.0.weight": (1, 5),
        "gates.1.weight": (1, 5),
        "C_kernels.0": (2, 3, 3),
    }
    assert {k: tuple(v.shape) for k, v in CrossNet(3, 1).state_dict().items()} == {
        "kernels.0": (3, 3),
        "bias.0": (3, 1),
    }


@pytest.mark.parametrize(
    "make",
    [
        lambda: CrossNet(3, 2),
        lambda: VectorCrossNet(3, 2),
        lambda: LowRankCrossNet(3, 2, 2),
        lambda: LowRankMixtureCrossNet(3, 2, num_experts=2),
    ],
)
def test_fx_traced_forms_script_and_agree(make: object) -> None:
    net = make()  # type: ignore[operator]  # a factory
    gm = GraphModule(net, Tracer().trace(net))
    scripted = torch.jit.script(gm)
    x = torch.randn(4, 3, generator=seeded_generator("fx-cross"))
    assert_close(scripted(x), net(x))


def test_bad_sizes() -> None:
    with pytest.raises(ValueError, match=r"num_layers must be an int >= 0, got -1"):
        CrossNet(3, -1)
    with pytest.raises(ValueError, match=r"num_experts must be an int >= 1, got 0"):
        LowRankMixtureCrossNet(3, 1, num_experts=0)
