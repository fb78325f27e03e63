"""`JsonSerializer`, the dispatch from a module's `qualname` to its serializer, and the
helpers its subclasses share (part of `shardrec_embedding.ir.serializer`)."""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any, ClassVar, cast

import torch
from torch import nn

from shardrec_embedding.ir.types import SerializerInterface
from shardrec_embedding.ir.utils import qualname

# --- the serializers ------------------------------------------------------------------------


def _tensor_at(module: nn.Module, name: str) -> torch.Tensor | None:
    obj: object = module
    for part in name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if isinstance(obj, torch.Tensor) else None


def _copy_tensors(source: nn.Module | None, target: nn.Module) -> None:
    """Copy into `target`'s parameters and buffers the same-named tensors of `source` (the
    unflattened program's module, which holds the exported weights); `ValueError` naming the
    tensor when one is missing or differs in shape or dtype (an artifact that does not match
    its own description)."""
    if source is None:
        return
    with torch.no_grad():
        for name, t in itertools.chain(target.named_parameters(), target.named_buffers()):
            if t.device.type == "meta":
                continue
            src = _tensor_at(source, name)
            if src is None or src.shape != t.shape or src.dtype != t.dtype:
                found = "missing" if src is None else f"{tuple(src.shape)} {src.dtype}"
                raise ValueError(
                    f"the exported program's {type(target).__name__} has no tensor {name!r} "
                    f"of shape {tuple(t.shape)} {t.dtype} (found: {found}); the program does "
                    "not match its serialized description"
                )
            t.copy_(src)


def _own_storage(module: nn.Module) -> None:
    """Give each parameter that views a larger (packed) storage a storage of its own.

    A float collection packs its tables per lookup group; `torch.export.save` warns on (and
    reads back as copies anyway) tensors that are views into a larger storage. The shape-only
    forward of an encapsulated module never reads the packed group.
    """
    with torch.no_grad():
        for p in module.parameters():
            if p.untyped_storage().nbytes() != p.numel() * p.element_size():
                p.data = p.data.clone()


class JsonSerializer(SerializerInterface):
    """Serializer of the export IR using JSON: the description travels in the exported
    program as the module's `ir_metadata` buffer (UTF-8 JSON bytes)."""

    module_to_serializer_cls: ClassVar[dict[str, Any]] = {}
    _module_cls: ClassVar[type[nn.Module] | None] = None
    _children: ClassVar[list[str] | None] = None

    @classmethod
    def children(cls, module: nn.Module) -> list[str]:
        return list(cls._children or [])

    @classmethod
    def serialize_to_dict(cls, module: nn.Module) -> dict[str, Any]:
        raise NotImplementedError(f"{cls.__name__} does not serialize")

    @classmethod
    def deserialize_from_dict(
        cls,
        metadata_dict: dict[str, Any],
        device: torch.device | None = None,
        unflatten_ep: nn.Module | None = None,
    ) -> nn.Module:
        raise NotImplementedError(f"{cls.__name__} does not deserialize")

    @classmethod
    def swap_meta_forward(cls, module: nn.Module) -> None:
        """Replace `module.forward` by its shape-only form (default: keep the forward)."""

    @classmethod
    def _serializer_for(cls, typename: str) -> type[JsonSerializer]:
        serializer = cls.module_to_serializer_cls.get(typename)
        if serializer is None:
            raise ValueError(
                f"Expected typename to be one of {list(cls.module_to_serializer_cls)}, got "
                f"{typename}; register a JsonSerializer subclass for it in "
                "JsonSerializer.module_to_serializer_cls"
            )
        if serializer._module_cls is None:
            raise ValueError(f"{serializer.__name__} must set the class attribute _module_cls")
        return cast(type[JsonSerializer], serializer)

    @classmethod
    def encapsulate_module(cls, module: nn.Module) -> list[str]:
        typename = qualname(module)
        serializer = cls._serializer_for(typename)
        expected = cast(type[nn.Module], serializer._module_cls)
        if not isinstance(module, expected):
            raise ValueError(
                f"Expected module to be of type {qualname(expected)}, got {qualname(module)}"
            )
        raw = {"typename": typename, "metadata_dict": serializer.serialize_to_dict(module)}
        data = bytearray(json.dumps(raw).encode())
        module.register_buffer(
            "ir_metadata", torch.frombuffer(data, dtype=torch.uint8), persistent=False
        )
        serializer.swap_meta_forward(module)
        _own_storage(module)
        return serializer.children(module)

    @classmethod
    def decapsulate_module(cls, module: nn.Module, device: torch.device | None = None) -> nn.Module:
        raw = json.loads(module.get_buffer("ir_metadata").cpu().numpy().tobytes().decode())
        serializer = cls._serializer_for(raw["typename"])
        rebuilt = serializer.deserialize_from_dict(raw["metadata_dict"], device, module)
        expected = cast(type[nn.Module], serializer._module_cls)
        if not isinstance(rebuilt, expected):
            raise ValueError(
                f"Expected module to be of type {qualname(expected)}, got {qualname(rebuilt)}"
            )
        return rebuilt


def _register(module_cls: type[nn.Module], serializer: type[JsonSerializer]) -> None:
    JsonSerializer.module_to_serializer_cls[qualname(module_cls)] = serializer


def _as_dict(metadata: object) -> dict[str, Any]:
    return dataclasses.asdict(cast(Any, metadata))


def _swap(module: nn.Module, forward: Any) -> None:
    module.forward = forward.__get__(module, type(module))


class BuildingSerializer(JsonSerializer):
    """A serializer that describes a module by one metadata dataclass and rebuilds it from
    that description plus the exported tensors. Subclasses give `_describe` and `_build`, and
    `_meta_forward` (a shape-only forward, wrapped in `staticmethod`) where the module has one."""

    _meta_forward: ClassVar[Any] = None

    @classmethod
    def _describe(cls, module: Any) -> object:
        raise NotImplementedError(f"{cls.__name__} does not serialize")

    @classmethod
    def _build(cls, metadata_dict: dict[str, Any], device: torch.device | None) -> nn.Module:
        raise NotImplementedError(f"{cls.__name__} does not deserialize")

    @classmethod
    def swap_meta_forward(cls, module: nn.Module) -> None:
        if cls._meta_forward is not None:
            _swap(module, cls._meta_forward)

    @classmethod
    def serialize_to_dict(cls, module: nn.Module) -> dict[str, Any]:
        return _as_dict(cls._describe(module))

    @classmethod
    def deserialize_from_dict(
        cls,
        metadata_dict: dict[str, Any],
        device: torch.device | None = None,
        unflatten_ep: nn.Module | None = None,
    ) -> nn.Module:
        rebuilt = cls._build(metadata_dict, device)
        _copy_tensors(unflatten_ep, rebuilt)
        return rebuilt
