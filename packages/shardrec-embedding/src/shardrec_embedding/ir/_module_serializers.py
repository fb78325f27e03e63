"""Serializers of the modules around the collections: position-weighted feature processors,
FeatureProcessedEmbeddingBagCollection and KTRegroupAsDict (part of
`shardrec_embedding.ir.serializer`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, cast

import torch
from torch import nn

from shardrec_embedding.configs import (
    DataType,
)
from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.feature_processors import (
    FeatureProcessedEmbeddingBagCollection,
    FeatureProcessor,
    FeatureProcessorsCollection,
    PositionWeightedModule,
    PositionWeightedModuleCollection,
)
from shardrec_embedding.ir._json import BuildingSerializer, JsonSerializer, _as_dict
from shardrec_embedding.ir._meta_forward import kt_regroup_meta_forward
from shardrec_embedding.ir.schema import (
    FPEBCMetadata,
    KTRegroupAsDictMetadata,
    PositionWeightedModuleCollectionMetadata,
    PositionWeightedModuleMetadata,
)
from shardrec_embedding.ir.utils import qualname
from shardrec_embedding.regroup import KTRegroupAsDict


class PWMJsonSerializer(BuildingSerializer):
    _module_cls = PositionWeightedModule

    @classmethod
    def _describe(cls, module: PositionWeightedModule) -> PositionWeightedModuleMetadata:
        return PositionWeightedModuleMetadata(
            max_feature_length=int(module.position_weight.shape[0])
        )

    @classmethod
    def _build(cls, metadata_dict: dict[str, Any], device: torch.device | None) -> nn.Module:
        metadata = PositionWeightedModuleMetadata(**metadata_dict)
        return PositionWeightedModule(metadata.max_feature_length, device)


class PWMCJsonSerializer(BuildingSerializer):
    _module_cls = PositionWeightedModuleCollection

    @classmethod
    def _describe(
        cls, module: PositionWeightedModuleCollection
    ) -> PositionWeightedModuleCollectionMetadata:
        # a list of pairs keeps the features' order through JSON
        return PositionWeightedModuleCollectionMetadata(
            max_feature_lengths=list(module.max_feature_lengths.items())
        )

    @classmethod
    def _build(cls, metadata_dict: dict[str, Any], device: torch.device | None) -> nn.Module:
        metadata = PositionWeightedModuleCollectionMetadata(**metadata_dict)
        lengths = {feature: int(n) for feature, n in metadata.max_feature_lengths}
        return PositionWeightedModuleCollection(lengths, device)


class FPEBCJsonSerializer(JsonSerializer):
    """The feature processors and the inner collection are serialized on their own
    (children); this records only which form the processors took."""

    _module_cls = FeatureProcessedEmbeddingBagCollection
    _children: ClassVar[list[str] | None] = ["_feature_processors", "_embedding_bag_collection"]

    @classmethod
    def serialize_to_dict(cls, module: nn.Module) -> dict[str, Any]:
        processors = module._feature_processors
        if isinstance(processors, FeatureProcessorsCollection):
            return _as_dict(FPEBCMetadata(is_fp_collection=True, features=[]))
        names = list(cast(nn.ModuleDict, processors).keys())
        return _as_dict(FPEBCMetadata(is_fp_collection=False, features=names))

    @classmethod
    def deserialize_from_dict(
        cls,
        metadata_dict: dict[str, Any],
        device: torch.device | None = None,
        unflatten_ep: nn.Module | None = None,
    ) -> nn.Module:
        if unflatten_ep is None:
            raise ValueError("FPEBCJsonSerializer needs the unflattened module to rebuild from")
        metadata = FPEBCMetadata(**metadata_dict)
        processors_module = unflatten_ep._feature_processors
        ebc = unflatten_ep._embedding_bag_collection
        if not isinstance(ebc, EmbeddingBagCollection):
            raise ValueError(f"expected a rebuilt EmbeddingBagCollection, got {type(ebc)}")
        processors: FeatureProcessorsCollection | dict[str, FeatureProcessor]
        if metadata.is_fp_collection:
            if not isinstance(processors_module, FeatureProcessorsCollection):
                raise ValueError(
                    f"expected a rebuilt FeatureProcessorsCollection, got "
                    f"{qualname(cast(nn.Module, processors_module))}"
                )
            processors = processors_module
        else:
            processors = {}
            for feature in metadata.features:
                fp = getattr(processors_module, feature)
                if not isinstance(fp, FeatureProcessor):
                    raise ValueError(f"expected a rebuilt FeatureProcessor for {feature!r}")
                processors[feature] = fp
        return FeatureProcessedEmbeddingBagCollection(ebc, processors)


class KTRegroupAsDictJsonSerializer(BuildingSerializer):
    _module_cls = KTRegroupAsDict
    _meta_forward = staticmethod(kt_regroup_meta_forward)

    @classmethod
    def _describe(cls, module: KTRegroupAsDict) -> KTRegroupAsDictMetadata:
        emb_dtype = module._emb_dtype
        return KTRegroupAsDictMetadata(
            groups=[list(g) for g in module._groups],
            keys=list(module._keys),
            emb_dtype=None if emb_dtype is None else DataType(emb_dtype).value,
        )

    @classmethod
    def _build(cls, metadata_dict: dict[str, Any], device: torch.device | None) -> nn.Module:
        metadata = KTRegroupAsDictMetadata(**metadata_dict)
        groups: Sequence[Sequence[str]] = metadata.groups
        return KTRegroupAsDict(
            groups=groups,
            keys=metadata.keys,
            emb_dtype=None if metadata.emb_dtype is None else DataType(metadata.emb_dtype),
        )
