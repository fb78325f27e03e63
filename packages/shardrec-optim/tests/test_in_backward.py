"""apply_optimizer_in_backward, the filter, and the torch -> fused translation."""

from __future__ import annotations

import pytest
import torch

from shardrec_optim import (
    EmbOptimType,
    apply_optimizer_in_backward,
    fused_spec_from_optimizer,
    fused_spec_of_param,
    in_backward_optimizer_filter,
)


def test_apply_records_intent_and_trains_in_backward() -> None:
    emb = torch.nn.Embedding(5, 2)
    lin = torch.nn.Linear(2, 1)
    before = emb.weight.detach().clone()
    apply_optimizer_in_backward(torch.optim.SGD, emb.parameters(), {"lr": 0.5})
    named = list(emb.named_parameters(prefix="emb")) + list(lin.named_parameters(prefix="lin"))
    assert [n for n, _ in in_backward_optimizer_filter(named)] == ["lin.weight", "lin.bias"]
    assert [n for n, _ in in_backward_optimizer_filter(named, include=True)] == ["emb.weight"]
    spec = fused_spec_of_param(emb.weight)
    assert spec is not None and spec.optimizer is EmbOptimType.EXACT_SGD
    assert spec.learning_rate == 0.5
    assert fused_spec_of_param(lin.weight) is None
    lin(emb(torch.tensor([1, 1]))).sum().backward()
    assert emb.weight.grad is None and not torch.equal(emb.weight.detach(), before)


@pytest.mark.parametrize(
    ("cls", "kwargs", "optimizer", "fields"),
    [
        (torch.optim.SGD, {"lr": 0.1}, EmbOptimType.EXACT_SGD, {}),
        (torch.optim.Adagrad, {"lr": 0.1}, EmbOptimType.EXACT_ADAGRAD, {"eps": 1e-10}),
        (torch.optim.Adam, {"lr": 0.1, "betas": (0.8, 0.9)}, EmbOptimType.ADAM, {"beta1": 0.8}),
        (torch.optim.AdamW, {"lr": 0.1}, EmbOptimType.ADAM, {"weight_decay": 0.01}),
    ],
)
def test_translation(
    cls: type[torch.optim.Optimizer],
    kwargs: dict[str, object],
    optimizer: EmbOptimType,
    fields: dict[str, float],
) -> None:
    spec = fused_spec_from_optimizer(cls, kwargs)
    assert spec.optimizer is optimizer and spec.learning_rate == 0.1
    for k, v in fields.items():
        assert getattr(spec, k) == v


@pytest.mark.parametrize(
    ("cls", "kwargs", "match"),
    [
        (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, "momentum=0.9"),
        (torch.optim.Adam, {"lr": 0.1, "weight_decay": 0.1}, "weight_decay=0.1.*AdamW"),
        (torch.optim.Adagrad, {"lr": 0.1, "lr_decay": 0.1}, "lr_decay=0.1"),
        (torch.optim.SGD, {"lr": -0.1}, "learning_rate.*-0.1"),
        (torch.optim.RMSprop, {"lr": 0.1}, "RMSprop"),
        (torch.optim.SGD, {"lr": 0.1, "bogus": 1}, "bogus"),
    ],
)
def test_translation_rejects(
    cls: type[torch.optim.Optimizer], kwargs: dict[str, object], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        fused_spec_from_optimizer(cls, kwargs)


def test_apply_rejects_non_optimizer_class() -> None:
    with pytest.raises(TypeError, match=r"int"):
        apply_optimizer_in_backward(int, [], {})  # type: ignore[arg-type]  # bad input under test


def test_two_optimizers_on_one_param_is_an_error() -> None:
    p = torch.nn.Parameter(torch.zeros(2))
    apply_optimizer_in_backward(torch.optim.SGD, [p], {"lr": 0.1})
    apply_optimizer_in_backward(torch.optim.Adagrad, [p], {"lr": 0.1})
    with pytest.raises(ValueError, match=r"SGD.*Adagrad"):
        fused_spec_of_param(p)
