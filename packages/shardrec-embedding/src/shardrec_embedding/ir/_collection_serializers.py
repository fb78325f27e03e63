"""Serializers of the embedding collections: EmbeddingBagCollection, EmbeddingCollection and
their quantized forms (part of `shardrec_embedding.ir.serializer`)."""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_embedding.ir._json import JsonSerializer, _as_dict, _copy_tensors, _swap
from shardrec_embedding.ir._meta_forward import (
    ebc_meta_forward,
    ec_meta_forward,
    qebc_meta_forward,
    qec_meta_forward,
)
from shardrec_embedding.ir._metadata import (
    _bag_tables,
    _dtype_name,
    _dtype_of,
    _embedding_config_to_metadata,
    _tables,
    embedding_bag_config_to_metadata,
    get_deserialized_device,
)
from shardrec_embedding.ir.schema import (
    EBCMetadata,
    ECMetadata,
    QuantEBCMetadata,
    QuantECMetadata,
)
from shardrec_embedding.quant import QuantEmbeddingBagCollection, QuantEmbeddingCollection


class EBCJsonSerializer(JsonSerializer):
    _module_cls = EmbeddingBagCollection

    @classmethod
    def swap_meta_forward(cls, module: nn.Module) -> None:
        _swap(module, ebc_meta_forward)

    @classmethod
    def serialize_to_dict(cls, module: nn.Module) -> dict[str, Any]:
        ebc = cast(EmbeddingBagCollection, module)
        return _as_dict(
            EBCMetadata(
                tables=[embedding_bag_config_to_metadata(t) for t in ebc.embedding_bag_configs()],
                is_weighted=ebc.is_weighted(),
                device=str(ebc.device),
            )
        )

    @classmethod
    def deserialize_from_dict(
        cls,
        metadata_dict: dict[str, Any],
        device: torch.device | None = None,
        unflatten_ep: nn.Module | None = None,
    ) -> nn.Module:
        ebc = EmbeddingBagCollection(
            tables=_bag_tables(metadata_dict),
            is_weighted=metadata_dict["is_weighted"],
            device=get_deserialized_device(metadata_dict.get("device"), device),
        )
        _copy_tensors(unflatten_ep, ebc)
        return ebc


class ECJsonSerializer(JsonSerializer):
    _module_cls = EmbeddingCollection

    @classmethod
    def swap_meta_forward(cls, module: nn.Module) -> None:
        _swap(module, ec_meta_forward)

    @classmethod
    def serialize_to_dict(cls, module: nn.Module) -> dict[str, Any]:
        ec = cast(EmbeddingCollection, module)
        return _as_dict(
            ECMetadata(
                tables=[_embedding_config_to_metadata(t) for t in ec.embedding_configs()],
                need_indices=ec.need_indices(),
                device=str(ec.device),
            )
        )

    @classmethod
    def deserialize_from_dict(
        cls,
        metadata_dict: dict[str, Any],
        device: torch.device | None = None,
        unflatten_ep: nn.Module | None = None,
    ) -> nn.Module:
        ec = EmbeddingCollection(
            tables=_tables(metadata_dict),
            device=get_deserialized_device(metadata_dict.get("device"), device),
            need_indices=metadata_dict["need_indices"],
        )
        _copy_tensors(unflatten_ep, ec)
        return ec


class QuantEBCJsonSerializer(JsonSerializer):
    _module_cls = QuantEmbeddingBagCollection

    @classmethod
    def swap_meta_forward(cls, module: nn.Module) -> None:
        _swap(module, qebc_meta_forward)

    @classmethod
    def serialize_to_dict(cls, module: nn.Module) -> dict[str, Any]:
        qebc = cast(QuantEmbeddingBagCollection, module)
        return _as_dict(
            QuantEBCMetadata(
                tables=[embedding_bag_config_to_metadata(t) for t in qebc.embedding_bag_configs()],
                is_weighted=qebc.is_weighted(),
                output_dtype=_dtype_name(qebc.output_dtype()),
                device=str(qebc.device),
            )
        )

    @classmethod
    def deserialize_from_dict(
        cls,
        metadata_dict: dict[str, Any],
        device: torch.device | None = None,
        unflatten_ep: nn.Module | None = None,
    ) -> nn.Module:
        qebc = QuantEmbeddingBagCollection(
            tables=_bag_tables(metadata_dict),
            is_weighted=metadata_dict["is_weighted"],
            device=get_deserialized_device(metadata_dict.get("device"), device),
            output_dtype=_dtype_of(metadata_dict["output_dtype"]),
        )
        _copy_tensors(unflatten_ep, qebc)
        return qebc


class QuantECJsonSerializer(JsonSerializer):
    _module_cls = QuantEmbeddingCollection

    @classmethod
    def swap_meta_forward(cls, module: nn.Module) -> None:
        _swap(module, qec_meta_forward)

    @classmethod
    def serialize_to_dict(cls, module: nn.Module) -> dict[str, Any]:
        qec = cast(QuantEmbeddingCollection, module)
        return _as_dict(
            QuantECMetadata(
                tables=[_embedding_config_to_metadata(t) for t in qec.embedding_configs()],
                need_indices=bool(qec._need_indices),
                output_dtype=_dtype_name(qec.output_dtype()),
                device=str(qec.device),
            )
        )

    @classmethod
    def deserialize_from_dict(
        cls,
        metadata_dict: dict[str, Any],
        device: torch.device | None = None,
        unflatten_ep: nn.Module | None = None,
    ) -> nn.Module:
        qec = QuantEmbeddingCollection(
            tables=_tables(metadata_dict),
            device=get_deserialized_device(metadata_dict.get("device"), device),
            output_dtype=_dtype_of(metadata_dict["output_dtype"]),
            need_indices=metadata_dict["need_indices"],
        )
        _copy_tensors(unflatten_ep, qec)
        return qec
