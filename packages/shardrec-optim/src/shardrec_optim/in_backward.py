"""Optimizers applied inside backward: recording the intent and translating it to a fused spec.

`apply_optimizer_in_backward(torch.optim.SGD, params, {"lr": 0.02})` marks each parameter the way
`torch.distributed.optim._apply_optimizer_in_backward` does (it delegates to it, so a parameter
marked with either function looks the same): the parameter gets `_optimizer_classes`,
`_optimizer_kwargs` and `_in_backward_optimizers`, and the unsharded model already trains with
the optimizer running in backward. Sharders read the intent with `fused_spec_of_param` and build
fused lookups from the resulting `FusedOptimSpec`:

| torch optimizer       | fused optimizer                          |
|-----------------------|------------------------------------------|
| torch.optim.SGD       | EXACT_SGD                                |
| torch.optim.Adagrad   | EXACT_ADAGRAD                            |
| torch.optim.Adam      | ADAM (weight_decay must be 0: see below) |
| torch.optim.AdamW     | ADAM with decoupled weight_decay         |
| `RowWiseAdagrad` (TorchRec's, by name) | EXACT_ROWWISE_ADAGRAD (L2) |

Options the fused kernel cannot honour (SGD momentum, Adagrad lr_decay, Adam's *coupled* L2
weight decay, amsgrad, ...) raise ValueError instead of being dropped: TorchRec passes Adam's
weight_decay to a kernel that applies it decoupled, a silent change of optimizer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import torch
from torch import nn

from shardrec_optim.spec import FusedOptimSpec
from shardrec_optim.types import EmbOptimType, WeightDecayMode


def apply_optimizer_in_backward(
    optimizer_class: type[torch.optim.Optimizer],
    params: Iterable[nn.Parameter],
    optimizer_kwargs: Mapping[str, object],
) -> None:
    """Run `optimizer_class(**optimizer_kwargs)` on each of `params` inside backward.

    Also records the choice on each parameter for sharders (see `fused_spec_of_param`).
    Raises TypeError when `optimizer_class` is not a torch optimizer class.
    """
    if not (
        isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer)
    ):
        raise TypeError(
            f"optimizer_class must be a torch.optim.Optimizer subclass, got {optimizer_class!r}"
        )
    # Imported here: torch builds without distributed support still import this package.
    from torch.distributed.optim import (  # type: ignore[attr-defined]  # private but stable; TorchRec's tutorials use it
        _apply_optimizer_in_backward,
    )

    _apply_optimizer_in_backward(optimizer_class, list(params), dict(optimizer_kwargs))


def in_backward_optimizer_filter(
    named_parameters: Iterable[tuple[str, nn.Parameter]], include: bool = False
) -> Iterator[tuple[str, nn.Parameter]]:
    """Yield the `(name, param)` pairs with (include=True) or without (default) an optimizer
    applied in backward — the latter are what a dense optimizer should own."""
    for name, param in named_parameters:
        if hasattr(param, "_in_backward_optimizers") == include:
            yield name, param


def fused_spec_of_param(param: nn.Parameter | torch.Tensor) -> FusedOptimSpec | None:
    """The fused spec of the optimizer applied in backward to `param`, or None if none was.

    Raises ValueError when several optimizers were applied to the same parameter.
    """
    classes = getattr(param, "_optimizer_classes", None)
    kwargs = getattr(param, "_optimizer_kwargs", None)
    if not classes or kwargs is None:
        return None
    if len(classes) != 1:
        names = [c.__name__ for c in classes]
        raise ValueError(f"a fused lookup applies one optimizer per table, got {names}")
    return fused_spec_from_optimizer(classes[0], kwargs[0])


_ADAM_FAMILY: Mapping[str, object] = {
    "amsgrad": False,
    "foreach": None,
    "maximize": False,
    "capturable": False,
    "differentiable": False,
    "fused": None,
}
"""Defaults Adam and AdamW share (torch's), each the only value the fused kernel implements."""

_DEFAULTS: Mapping[str, Mapping[str, object]] = {
    "SGD": {
        "momentum": 0,
        "dampening": 0,
        "weight_decay": 0,
        "nesterov": False,
        "maximize": False,
        "foreach": None,
        "differentiable": False,
        "fused": None,
    },
    "Adagrad": {
        "lr_decay": 0,
        "weight_decay": 0,
        "initial_accumulator_value": 0,
        "foreach": None,
        "maximize": False,
        "differentiable": False,
        "fused": None,
    },
    "Adam": {**_ADAM_FAMILY, "weight_decay": 0, "decoupled_weight_decay": False},
    "AdamW": _ADAM_FAMILY,  # its weight_decay goes to the kernel (decoupled)
    "RowWiseAdagrad": {"lr_decay": 0, "initial_accumulator_value": 0, "maximize": False},
}


def fused_spec_from_optimizer(
    optimizer_class: type[torch.optim.Optimizer], optimizer_kwargs: Mapping[str, object]
) -> FusedOptimSpec:
    """Translate a torch optimizer class and its kwargs to the equivalent `FusedOptimSpec`.

    Raises ValueError for an optimizer without a fused equivalent, or for an option the fused
    kernel does not implement (named in the message).
    """
    name = optimizer_class.__name__
    kw = dict(optimizer_kwargs)
    if optimizer_class is torch.optim.Adam and kw.get("decoupled_weight_decay"):
        name = "AdamW"
        kw.pop("decoupled_weight_decay")
    fixed = _DEFAULTS.get(name)
    if fixed is None or (
        name != "RowWiseAdagrad" and getattr(torch.optim, name) is not optimizer_class
    ):
        raise ValueError(
            f"{optimizer_class.__qualname__} has no fused equivalent; use one of "
            "torch.optim.SGD, Adagrad, Adam, AdamW, or RowWiseAdagrad"
        )
    for key, default in fixed.items():
        if key in kw:
            value = kw.pop(key)
            if value != default and not (default is None and value is False):
                hint = (
                    " (use torch.optim.AdamW for decoupled decay)" if key == "weight_decay" else ""
                )
                raise ValueError(
                    f"{name} option {key}={value!r} is not supported by the fused kernel{hint}"
                )
    lr = kw.pop("lr", 1e-3 if name in ("Adam", "AdamW") else 1e-2)
    fields: dict[str, object] = {"learning_rate": lr}
    if name == "SGD":
        optimizer = EmbOptimType.EXACT_SGD
    elif name == "Adagrad":
        optimizer = EmbOptimType.EXACT_ADAGRAD
        fields["eps"] = kw.pop("eps", 1e-10)
    elif name == "RowWiseAdagrad":
        optimizer = EmbOptimType.EXACT_ROWWISE_ADAGRAD
        fields["eps"] = kw.pop("eps", 1e-10)
        wd = kw.pop("weight_decay", 0.0)
        fields["weight_decay"] = wd
        if wd:
            fields["weight_decay_mode"] = WeightDecayMode.L2
    else:
        optimizer = EmbOptimType.ADAM
        betas = kw.pop("betas", (0.9, 0.999))
        assert isinstance(betas, tuple | list) and len(betas) == 2, f"betas={betas!r}"
        fields["beta1"], fields["beta2"] = betas
        fields["eps"] = kw.pop("eps", 1e-8)
        if name == "AdamW":
            fields["weight_decay"] = kw.pop("weight_decay", 1e-2)
    if kw:
        raise ValueError(f"{name} options {sorted(kw)} are not supported by the fused kernel")
    return FusedOptimSpec(optimizer=optimizer, **fields)  # type: ignore[arg-type]  # validated in __post_init__
