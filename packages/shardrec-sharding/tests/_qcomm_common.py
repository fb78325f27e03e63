"""What the sharded quantized-comms tests share (test_qcomm_sharded*.py): the registries they
train with, each codec's relative bound, seeded tables and the gradient of the loss with
|coefficients| (which bounds what the backward codec changes in a table after linear-loss SGD)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from shardrec_collectives.qcomm import CommType, QCommsConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import seeded_generator

CONFIGS = {
    "bf16/fp16": QCommsConfig(forward_precision=CommType.BF16, backward_precision=CommType.FP16),
    "int8/bf16": QCommsConfig(forward_precision=CommType.INT8, backward_precision=CommType.BF16),
}
REL = {CommType.BF16: 2.0**-8, CommType.FP16: 2.0**-11}


def fill(tables: nn.ModuleDict, shapes: Sequence[tuple[str, int, int]], seed: str) -> None:
    """Every table `(name, rows, dim)` of `tables` gets seeded randn weights."""
    g = seeded_generator(seed)
    with torch.no_grad():
        for name, rows, dim in shapes:
            tables[name].weight.copy_(torch.randn(rows, dim, generator=g))


def abs_gradients(
    module: nn.Module,
    tables: nn.ModuleDict,
    batches: Sequence[tuple[KeyedJaggedTensor, torch.Tensor]],
    values: Callable[[object], torch.Tensor],
) -> dict[str, torch.Tensor]:
    """Per table name, the gradient of sum(|coefficients| * values(module(kjt))) over `batches`
    (every rank's, every step)."""
    for kjt, coefficients in batches:
        (values(module(kjt)) * coefficients.abs()).sum().backward()
    return {name: t.weight.grad.clone() for name, t in tables.items()}  # type: ignore[union-attr]
