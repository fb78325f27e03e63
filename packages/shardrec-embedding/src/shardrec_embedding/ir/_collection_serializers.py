"""Serializers of the embedding collections: EmbeddingBagCollection, EmbeddingCollection and
their quantized forms (part of `shardrec_embedding.ir.serializer`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_embedding.ir._json import BuildingSerializer
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


class EBCJsonSerializer(BuildingSerializer):
    _module_cls = EmbeddingBagCollection
    _meta_forward = staticmethod(ebc_meta_forward)

    @classmethod
    def _describe(cls, module: EmbeddingBagCollection) -> EBCMetadata:
        return EBCMetadata(
            tables=[embedding_bag_config_to_metadata(t) for t in module.embedding_bag_configs()],
            is_weighted=module.is_weighted(),
            device=str(module.device),
        )

    @classmethod
    def _build(cls, metadata_dict: dict[str, Any], device: torch.device | None) -> nn.Module:
        return EmbeddingBagCollection(
            tables=_bag_tables(metadata_dict),
            is_weighted=metadata_dict["is_weighted"],
            device=get_deserialized_device(metadata_dict.get("device"), device),
        )


class ECJsonSerializer(BuildingSerializer):
    _module_cls = EmbeddingCollection
    _meta_forward = staticmethod(ec_meta_forward)

    @classmethod
    def _describe(cls, module: EmbeddingCollection) -> ECMetadata:
        return ECMetadata(
            tables=[_embedding_config_to_metadata(t) for t in module.embedding_configs()],
            need_indices=module.need_indices(),
            device=str(module.device),
        )

    @classmethod
    def _build(cls, metadata_dict: dict[str, Any], device: torch.device | None) -> nn.Module:
        return EmbeddingCollection(
            tables=_tables(metadata_dict),
            device=get_deserialized_device(metadata_dict.get("device"), device),
            need_indices=metadata_dict["need_indices"],
        )


class QuantEBCJsonSerializer(BuildingSerializer):
    _module_cls = QuantEmbeddingBagCollection
    _meta_forward = staticmethod(qebc_meta_forward)

    @classmethod
    def _describe(cls, module: QuantEmbeddingBagCollection) -> QuantEBCMetadata:
        return QuantEBCMetadata(
            tables=[embedding_bag_config_to_metadata(t) for t in module.embedding_bag_configs()],
            is_weighted=module.is_weighted(),
            output_dtype=_dtype_name(module.output_dtype()),
            device=str(module.device),
        )

    @classmethod
    def _build(cls, metadata_dict: dict[str, Any], device: torch.device | None) -> nn.Module:
        return QuantEmbeddingBagCollection(
            tables=_bag_tables(metadata_dict),
            is_weighted=metadata_dict["is_weighted"],
            device=get_deserialized_device(metadata_dict.get("device"), device),
            output_dtype=_dtype_of(metadata_dict["output_dtype"]),
        )


class QuantECJsonSerializer(BuildingSerializer):
    _module_cls = QuantEmbeddingCollection
    _meta_forward = staticmethod(qec_meta_forward)

    @classmethod
    def _describe(cls, module: QuantEmbeddingCollection) -> QuantECMetadata:
        return QuantECMetadata(
            tables=[_embedding_config_to_metadata(t) for t in module.embedding_configs()],
            need_indices=bool(module._need_indices),
            output_dtype=_dtype_name(module.output_dtype()),
            device=str(module.device),
        )

    @classmethod
    def _build(cls, metadata_dict: dict[str, Any], device: torch.device | None) -> nn.Module:
        return QuantEmbeddingCollection(
            tables=_tables(metadata_dict),
            device=get_deserialized_device(metadata_dict.get("device"), device),
            output_dtype=_dtype_of(metadata_dict["output_dtype"]),
            need_indices=metadata_dict["need_indices"],
        )
