"""Optimizer names, fused_params parsing and validation."""

from __future__ import annotations

import pytest

from shardrec_optim import (
    SUPPORTED_OPTIONS,
    EmbOptimType,
    FusedOptimSpec,
    WeightDecayMode,
    split_fused_params,
)


@pytest.mark.parametrize("member", list(EmbOptimType))
def test_optim_type_accepts_member_value_and_name(member: EmbOptimType) -> None:
    assert EmbOptimType(member) is member
    assert EmbOptimType(member.value) is member
    assert EmbOptimType(member.name) is member
    assert EmbOptimType(member.name.lower()) is member


def test_unknown_optimizer_name_is_named_in_error() -> None:
    with pytest.raises(ValueError, match=r"'adamax'"):
        EmbOptimType("adamax")
    with pytest.raises(ValueError, match=r"'shampoo'"):
        FusedOptimSpec.from_fused_params({"optimizer": "shampoo", "learning_rate": 0.1})


@pytest.mark.fbgemm
def test_optim_type_accepts_fbgemm_member() -> None:
    fb = pytest.importorskip("fbgemm_gpu.split_embedding_configs")
    for member in EmbOptimType:
        assert EmbOptimType(fb.EmbOptimType[member.name]) is member
    with pytest.raises(ValueError, match=r"SHAMPOO"):
        EmbOptimType(fb.EmbOptimType.SHAMPOO)
    spec = FusedOptimSpec.from_fused_params(
        {"optimizer": fb.EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": 0.02, "eps": 0.002}
    )
    assert spec.optimizer is EmbOptimType.EXACT_ROWWISE_ADAGRAD
    cfg = pytest.importorskip("fbgemm_gpu.tbe.config")
    assert WeightDecayMode(cfg.WeightDecayMode.DECOUPLE) is WeightDecayMode.DECOUPLE
    with pytest.raises(ValueError, match=r"COUNTER"):
        WeightDecayMode(cfg.WeightDecayMode.COUNTER)


def test_fused_params_torchrec_keys_and_lr_alias() -> None:
    spec = FusedOptimSpec.from_fused_params(
        {"optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD, "learning_rate": 0.02, "eps": 0.002}
    )
    assert (spec.learning_rate, spec.eps) == (0.02, 0.002)
    alias = FusedOptimSpec.from_fused_params({"optimizer": "adam", "lr": 0.5, "beta1": 0.8})
    assert alias.learning_rate == 0.5 and alias.beta1 == 0.8
    assert FusedOptimSpec.from_fused_params(alias.to_fused_params()) == alias


def test_fused_params_keeps_lookup_keys() -> None:
    spec, rest = split_fused_params(
        {"optimizer": "exact_sgd", "lr": 0.1, "stochastic_rounding": False}
    )
    assert spec.optimizer is EmbOptimType.EXACT_SGD
    assert rest == {"stochastic_rounding": False}


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"learning_rate": 0.1}, "'optimizer'"),
        ({"optimizer": "exact_sgd", "learning_rate": -0.1}, "learning_rate.*-0.1"),
        ({"optimizer": "exact_sgd", "lr": 0.1, "learning_rate": 0.2}, "lr=0.1"),
        ({"optimizer": "exact_sgd", "lr": 0.1, "momentun": 0.9}, "momentun"),
        ({"optimizer": "exact_sgd", "lr": 0.1, "eps": 0.01}, "eps=0.01.*EXACT_SGD"),
        ({"optimizer": "exact_adagrad", "weight_decay": 0.1}, "weight_decay=0.1.*EXACT_ADAGRAD"),
        ({"optimizer": "adam", "momentum": 0.5}, "momentum=0.5.*ADAM"),
        ({"optimizer": "lars_sgd", "beta1": 0.5}, "beta1=0.5.*LARS_SGD"),
        ({"optimizer": "exact_row_wise_adagrad", "weight_decay": 0.1}, "weight_decay_mode"),
        ({"optimizer": "adam", "beta2": 1.0}, "beta2.*1.0"),
        ({"optimizer": "adam", "eps": float("nan")}, "eps.*nan"),
        # eps=0: a row looked up with a zero gradient updates by 0 / 0 (session 12).
        ({"optimizer": "exact_row_wise_adagrad", "eps": 0.0}, "eps=0.0 for EXACT_ROWWISE_ADAGRAD"),
        ({"optimizer": "exact_adagrad", "eps": 0}, "eps=0.0 for EXACT_ADAGRAD.*eps > 0"),
        ({"optimizer": "adam", "eps": 0.0}, "eps=0.0 for ADAM"),
        ({"optimizer": "partial_row_wise_lamb", "eps": 0.0}, "eps=0.0 for PARTIAL_ROWWISE_LAMB"),
        ({"optimizer": "exact_sgd", "eps": 0.0}, "eps=0.0 is not supported by optimizer EXACT_SGD"),
        ({"optimizer": "exact_row_wise_adagrad", "weight_decay_mode": "l3"}, "'l3'"),
    ],
)
def test_bad_fused_params(params: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FusedOptimSpec.from_fused_params(params)


def test_non_number_option_is_type_error() -> None:
    with pytest.raises(TypeError, match=r"'fast'"):
        FusedOptimSpec(optimizer=EmbOptimType.SGD, learning_rate="fast")  # type: ignore[arg-type]  # the bad input under test


def test_weight_decay_mode_spellings() -> None:
    assert WeightDecayMode(1) is WeightDecayMode.L2
    assert WeightDecayMode("decoupled") is WeightDecayMode.DECOUPLE
    spec = FusedOptimSpec(
        optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, weight_decay=0.1, weight_decay_mode="l2"
    )  # type: ignore[arg-type]  # plain string accepted at runtime
    assert spec.weight_decay_mode is WeightDecayMode.L2


def test_every_optimizer_has_an_option_table() -> None:
    assert set(SUPPORTED_OPTIONS) == set(EmbOptimType)
