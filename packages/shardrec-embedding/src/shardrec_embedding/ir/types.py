"""The serializer interface of the export IR (TorchRec's `torchrec.ir.types`)."""

import abc
from typing import Any, ClassVar

import torch
from torch import nn

__all__ = ["SerializerInterface"]


class SerializerInterface(abc.ABC):
    """Turns collections into export-friendly modules carrying their own description, and back.

    `encapsulate_module` stores what rebuilds `module` inside it (a buffer) and swaps its
    forward for a shape-only one that `torch.export` records as one opaque op; it returns the
    children (attribute names) that need the same treatment. `decapsulate_module` rebuilds the
    real module from such an (unflattened) module.
    """

    module_to_serializer_cls: ClassVar[dict[str, Any]] = {}

    @classmethod
    @abc.abstractmethod
    def encapsulate_module(cls, module: nn.Module) -> list[str]:
        raise NotImplementedError

    @classmethod
    @abc.abstractmethod
    def decapsulate_module(cls, module: nn.Module, device: torch.device | None = None) -> nn.Module:
        raise NotImplementedError
