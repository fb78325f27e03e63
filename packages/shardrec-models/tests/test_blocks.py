"""MLP, Perceptron and LowRankCrossNet: TorchRec's signatures and layouts, against references."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from shardrec_models import MLP, LowRankCrossNet, Perceptron
from shardrec_testing import assert_close, seeded_generator


def _torchrec_modules() -> tuple[type, type]:
    try:
        from torchrec.modules.crossnet import LowRankCrossNet as TrcCross
        from torchrec.modules.mlp import MLP as TrcMLP
    except Exception as exc:  # not installed (nox unit venvs), or its fbgemm fails to load
        pytest.skip(f"torchrec does not import here: {type(exc).__name__}: {exc}")
    return TrcMLP, TrcCross


@pytest.mark.parametrize(
    ("bias", "activation", "on_last"),
    [(True, "relu", True), (False, "sigmoid", False), (True, torch.tanh, True)],
)
def test_mlp_against_reference(bias: bool, activation: object, on_last: bool) -> None:
    mlp = MLP(3, [4, 2], bias=bias, activation=activation, activation_on_last=on_last)  # type: ignore[arg-type]
    fn = {"relu": torch.relu, "sigmoid": torch.sigmoid}.get(activation, activation)  # type: ignore[arg-type]
    x = torch.randn(5, 3, generator=seeded_generator("mlp", bias))
    want = x
    for i, layer in enumerate(mlp._mlp):
        linear = layer._linear  # type: ignore[union-attr]
        want = want @ linear.weight.t() + (linear.bias if bias else 0)
        if on_last or i == 0:
            want = fn(want)  # type: ignore[operator]
    assert_close(mlp(x), want.detach())
    assert (mlp._mlp[0]._linear.bias is None) == (not bias)  # type: ignore[union-attr]


def test_module_activation_is_copied_per_layer() -> None:
    mlp = MLP(2, [2, 2], activation=nn.PReLU())
    first, second = mlp._mlp[0]._activation_fn, mlp._mlp[1]._activation_fn  # type: ignore[union-attr]
    assert isinstance(first, nn.PReLU) and first is not second
    assert "_mlp.0._activation_fn.weight" in mlp.state_dict()


def test_bad_activation() -> None:
    with pytest.raises(ValueError, match="activation 'gelu_tanh' is not one of"):
        MLP(2, [2], activation="gelu_tanh")

    with pytest.raises(TypeError, match="activation must be a str or a callable, got 3"):
        Perceptron(2, 2, activation=3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bias", "activation", "on_last"), [(True, "relu", True), (False, "sigmoid", False)]
)
def test_mlp_matches_torchrec(bias: bool, activation: str, on_last: bool) -> None:
    trc_mlp, _ = _torchrec_modules()
    ours = MLP(6, [5, 3], bias=bias, activation=activation, activation_on_last=on_last)
    theirs = trc_mlp(6, [5, 3], bias=bias, activation=activation, activation_on_last=on_last)
    theirs.load_state_dict(ours.state_dict())
    assert sorted(ours.state_dict()) == sorted(theirs.state_dict())
    x = torch.randn(4, 6, generator=seeded_generator("trc-mlp", bias))
    assert_close(ours(x), theirs(x).detach())


def test_crossnet_matches_torchrec_with_default_rank() -> None:
    _, trc_cross = _torchrec_modules()
    ours = LowRankCrossNet(8, 2)  # low_rank defaults to 1, as TorchRec's
    assert ours.low_rank == 1
    theirs = trc_cross(in_features=8, num_layers=2)
    g = seeded_generator("cross")
    with torch.no_grad():
        for p in ours.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(3, 8, generator=g)
    assert_close(ours(x), theirs(x).detach())


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_interactions_refuse_a_bad_feature_count(bad: object) -> None:
    from shardrec_models import (
        InteractionArch,
        InteractionDCNArch,
        InteractionProjectionArch,
        ModelConfigError,
    )
    from shardrec_models.arches import InteractionTransformerArch

    builds = [
        lambda: InteractionArch(bad),  # type: ignore[arg-type]
        lambda: InteractionDCNArch(bad, LowRankCrossNet(4, 1)),  # type: ignore[arg-type]
        lambda: InteractionProjectionArch(bad, nn.Identity(), nn.Identity()),  # type: ignore[arg-type]
        lambda: InteractionTransformerArch(bad, 4, nhead=2),  # type: ignore[arg-type]
    ]
    message = re.escape(f"num_sparse_features must be an int >= 0, got {bad!r}")
    for build in builds:
        with pytest.raises(ModelConfigError, match=message):
            build()
    # zero features is a model of dense features only: accepted, the interaction passes them on
    dense = torch.randn(3, 4)
    assert_close(InteractionArch(0)(dense, torch.randn(3, 0, 4)), dense)
