"""JSON serialization of collections inside an exported program (TorchRec's
`torchrec.ir.serializer`).

`JsonSerializer.module_to_serializer_cls` maps a class's `qualname` to its serializer; one
serializer per supported class: EmbeddingBagCollection, EmbeddingCollection, the quantized
EmbeddingBagCollection / EmbeddingCollection, FeatureProcessedEmbeddingBagCollection,
PositionWeightedModule(Collection), KTRegroupAsDict. Register your own module the same way
(subclass `JsonSerializer`, set `_module_cls`, `serialize_to_dict`, `deserialize_from_dict`,
optionally `_children` / `children` and `swap_meta_forward`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import torch
from torch import nn

from shardrec_embedding._grouping import TablePlan
from shardrec_embedding.configs import (
    DataType,
    EmbeddingBagConfig,
    EmbeddingConfig,
    PoolingType,
    data_type_to_dtype,
)
from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_embedding.feature_processors import (
    FeatureProcessedEmbeddingBagCollection,
    FeatureProcessor,
    FeatureProcessorsCollection,
    PositionWeightedModule,
    PositionWeightedModuleCollection,
)
from shardrec_embedding.ir import _ops
from shardrec_embedding.ir.schema import (
    EBCMetadata,
    ECMetadata,
    EmbeddingBagConfigMetadata,
    EmbeddingConfigMetadata,
    FPEBCMetadata,
    KTRegroupAsDictMetadata,
    PositionWeightedModuleCollectionMetadata,
    PositionWeightedModuleMetadata,
    QuantEBCMetadata,
    QuantECMetadata,
)
from shardrec_embedding.ir.types import SerializerInterface
from shardrec_embedding.ir.utils import qualname
from shardrec_embedding.quant import QuantEmbeddingBagCollection, QuantEmbeddingCollection
from shardrec_embedding.regroup import KTRegroupAsDict
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor

__all__ = [
    "EBCJsonSerializer",
    "ECJsonSerializer",
    "FPEBCJsonSerializer",
    "JsonSerializer",
    "KTRegroupAsDictJsonSerializer",
    "PWMCJsonSerializer",
    "PWMJsonSerializer",
    "QuantEBCJsonSerializer",
    "QuantECJsonSerializer",
    "ebc_meta_forward",
    "ec_meta_forward",
    "embedding_bag_config_to_metadata",
    "embedding_metadata_to_config",
    "get_deserialized_device",
    "kt_regroup_meta_forward",
    "qebc_meta_forward",
    "qec_meta_forward",
]

logger = logging.getLogger(__name__)


# --- configs <-> metadata ------------------------------------------------------------------


def embedding_bag_config_to_metadata(
    table_config: EmbeddingBagConfig,
) -> EmbeddingBagConfigMetadata:
    return EmbeddingBagConfigMetadata(
        num_embeddings=table_config.num_embeddings,
        embedding_dim=table_config.embedding_dim,
        name=table_config.name,
        data_type=DataType(table_config.data_type).value,
        feature_names=list(table_config.feature_names),
        weight_init_max=table_config.weight_init_max,
        weight_init_min=table_config.weight_init_min,
        need_pos=table_config.need_pos,
        pooling=PoolingType(table_config.pooling).value,
    )


def embedding_metadata_to_config(table_config: EmbeddingBagConfigMetadata) -> EmbeddingBagConfig:
    return EmbeddingBagConfig(
        num_embeddings=table_config.num_embeddings,
        embedding_dim=table_config.embedding_dim,
        name=table_config.name,
        data_type=DataType(table_config.data_type),
        feature_names=list(table_config.feature_names),
        weight_init_max=table_config.weight_init_max,
        weight_init_min=table_config.weight_init_min,
        need_pos=table_config.need_pos,
        pooling=PoolingType(table_config.pooling),
    )


def _embedding_config_to_metadata(t: EmbeddingConfig) -> EmbeddingConfigMetadata:
    return EmbeddingConfigMetadata(
        num_embeddings=t.num_embeddings,
        embedding_dim=t.embedding_dim,
        name=t.name,
        data_type=DataType(t.data_type).value,
        feature_names=list(t.feature_names),
        weight_init_max=t.weight_init_max,
        weight_init_min=t.weight_init_min,
        need_pos=t.need_pos,
    )


def _metadata_to_embedding_config(t: EmbeddingConfigMetadata) -> EmbeddingConfig:
    return EmbeddingConfig(
        num_embeddings=t.num_embeddings,
        embedding_dim=t.embedding_dim,
        name=t.name,
        data_type=DataType(t.data_type),
        feature_names=list(t.feature_names),
        weight_init_max=t.weight_init_max,
        weight_init_min=t.weight_init_min,
        need_pos=t.need_pos,
    )


def _bag_tables(metadata_dict: dict[str, Any]) -> list[EmbeddingBagConfig]:
    return [
        embedding_metadata_to_config(EmbeddingBagConfigMetadata(**t))
        for t in metadata_dict["tables"]
    ]


def _tables(metadata_dict: dict[str, Any]) -> list[EmbeddingConfig]:
    return [
        _metadata_to_embedding_config(EmbeddingConfigMetadata(**t)) for t in metadata_dict["tables"]
    ]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype_of(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"serialized output_dtype {name!r} is not a torch dtype")
    return dtype


def get_deserialized_device(
    config_device: str | None, device: torch.device | None
) -> torch.device | None:
    """`device` when given (a note in the log when it moves the module to another device
    type), else the serialized device."""
    if config_device:
        original = torch.device(config_device)
        if device is None:
            return original
        if original.type != device.type:
            logger.info("deserialized device %s overrides the original %s", device, original)
    return device


# --- shape-only forwards --------------------------------------------------------------------


def _kjt_tensors(features: KeyedJaggedTensor) -> list[torch.Tensor | None]:
    return [
        features.values(),
        features.weights_or_none(),
        features.lengths_or_none(),
        features.offsets_or_none(),
    ]


def _pooled_meta(module: nn.Module, features: KeyedJaggedTensor, dtype: torch.dtype) -> KeyedTensor:
    dims = cast(list[int], module._lengths_per_embedding)
    batch = features.stride()
    if dims:
        outputs = _ops.ir_emb_lookup(_kjt_tensors(features), batch, dims, dtype)
        values = torch.cat(outputs, dim=1)
    else:  # no op: torch.export.load cannot read back an op returning an empty list
        values = torch.zeros(batch, 0, dtype=dtype, device=features.values().device)
    return KeyedTensor(
        keys=cast(list[str], module._embedding_names), length_per_key=dims, values=values
    )


def ebc_meta_forward(ebc: EmbeddingBagCollection, features: KeyedJaggedTensor) -> KeyedTensor:
    """An EmbeddingBagCollection's output shape and keys, through `shardrec::ir_emb_lookup`."""
    return _pooled_meta(ebc, features, torch.float32)


def qebc_meta_forward(
    qebc: QuantEmbeddingBagCollection, features: KeyedJaggedTensor
) -> KeyedTensor:
    return _pooled_meta(qebc, features, qebc.output_dtype())


def _sequence_meta(
    module: EmbeddingCollection | QuantEmbeddingCollection,
    features: KeyedJaggedTensor,
    need_indices: bool,
    dtype: torch.dtype,
) -> dict[str, JaggedTensor]:
    plan: TablePlan = module._plan
    segments = plan.segments
    if not segments:  # (an op returning an empty list does not load back)
        return {}
    keys = features.keys()
    feature_index = list(plan.feature_indices(keys))
    lengths = features.lengths()
    batch = features.stride()
    out = _ops.ir_ec_lookup(
        features.values(),
        lengths,
        len(keys),
        list(feature_index),
        [s.dim for s in segments],
        need_indices,
        dtype,
    )
    n = len(segments)
    result: dict[str, JaggedTensor] = {}
    for s, (seg, k) in enumerate(zip(segments, feature_index, strict=True)):
        result[seg.embedding_name] = JaggedTensor._unchecked(
            out[s],
            out[n + s] if need_indices else None,
            lengths[k * batch : (k + 1) * batch],
            None,
        )
    return result


def ec_meta_forward(
    ec: EmbeddingCollection, features: KeyedJaggedTensor
) -> dict[str, JaggedTensor]:
    """An EmbeddingCollection's output shapes, through `shardrec::ir_ec_lookup`."""
    return _sequence_meta(ec, features, ec.need_indices(), torch.float32)


def qec_meta_forward(
    qec: QuantEmbeddingCollection, features: KeyedJaggedTensor
) -> dict[str, JaggedTensor]:
    return _sequence_meta(qec, features, bool(qec._need_indices), qec.output_dtype())


def kt_regroup_meta_forward(
    op_module: KTRegroupAsDict, keyed_tensors: list[KeyedTensor]
) -> dict[str, torch.Tensor]:
    """A KTRegroupAsDict's output shapes, through `shardrec::ir_kt_regroup`."""
    width: dict[str, int] = {}
    for kt in keyed_tensors:
        width.update(zip(kt.keys(), kt.length_per_key(), strict=True))
    dims = [sum(width[k] for k in group) for group in op_module._groups]
    dtype = (
        data_type_to_dtype(DataType(op_module._emb_dtype))
        if op_module._emb_dtype is not None
        else torch.float32
    )
    outputs = _ops.ir_kt_regroup(
        [kt.values() for kt in keyed_tensors],
        keyed_tensors[0].values().size(0),
        dims,
        dtype,
    )
    return dict(zip(op_module._keys, outputs, strict=True))


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


class PWMJsonSerializer(JsonSerializer):
    _module_cls = PositionWeightedModule

    @classmethod
    def serialize_to_dict(cls, module: nn.Module) -> dict[str, Any]:
        pwm = cast(PositionWeightedModule, module)
        return _as_dict(
            PositionWeightedModuleMetadata(max_feature_length=int(pwm.position_weight.shape[0]))
        )

    @classmethod
    def deserialize_from_dict(
        cls,
        metadata_dict: dict[str, Any],
        device: torch.device | None = None,
        unflatten_ep: nn.Module | None = None,
    ) -> nn.Module:
        metadata = PositionWeightedModuleMetadata(**metadata_dict)
        pwm = PositionWeightedModule(metadata.max_feature_length, device)
        _copy_tensors(unflatten_ep, pwm)
        return pwm


class PWMCJsonSerializer(JsonSerializer):
    _module_cls = PositionWeightedModuleCollection

    @classmethod
    def serialize_to_dict(cls, module: nn.Module) -> dict[str, Any]:
        pwmc = cast(PositionWeightedModuleCollection, module)
        # a list of pairs keeps the features' order through JSON
        return _as_dict(
            PositionWeightedModuleCollectionMetadata(
                max_feature_lengths=list(pwmc.max_feature_lengths.items())
            )
        )

    @classmethod
    def deserialize_from_dict(
        cls,
        metadata_dict: dict[str, Any],
        device: torch.device | None = None,
        unflatten_ep: nn.Module | None = None,
    ) -> nn.Module:
        metadata = PositionWeightedModuleCollectionMetadata(**metadata_dict)
        pwmc = PositionWeightedModuleCollection(
            {feature: int(n) for feature, n in metadata.max_feature_lengths}, device
        )
        _copy_tensors(unflatten_ep, pwmc)
        return pwmc


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


class KTRegroupAsDictJsonSerializer(JsonSerializer):
    _module_cls = KTRegroupAsDict

    @classmethod
    def swap_meta_forward(cls, module: nn.Module) -> None:
        _swap(module, kt_regroup_meta_forward)

    @classmethod
    def serialize_to_dict(cls, module: nn.Module) -> dict[str, Any]:
        regroup = cast(KTRegroupAsDict, module)
        emb_dtype = regroup._emb_dtype
        return _as_dict(
            KTRegroupAsDictMetadata(
                groups=[list(g) for g in regroup._groups],
                keys=list(regroup._keys),
                emb_dtype=None if emb_dtype is None else DataType(emb_dtype).value,
            )
        )

    @classmethod
    def deserialize_from_dict(
        cls,
        metadata_dict: dict[str, Any],
        device: torch.device | None = None,
        unflatten_ep: nn.Module | None = None,
    ) -> nn.Module:
        metadata = KTRegroupAsDictMetadata(**metadata_dict)
        groups: Sequence[Sequence[str]] = metadata.groups
        return KTRegroupAsDict(
            groups=groups,
            keys=metadata.keys,
            emb_dtype=None if metadata.emb_dtype is None else DataType(metadata.emb_dtype),
        )


for _cls, _serializer in (
    (EmbeddingBagCollection, EBCJsonSerializer),
    (EmbeddingCollection, ECJsonSerializer),
    (QuantEmbeddingBagCollection, QuantEBCJsonSerializer),
    (QuantEmbeddingCollection, QuantECJsonSerializer),
    (PositionWeightedModule, PWMJsonSerializer),
    (PositionWeightedModuleCollection, PWMCJsonSerializer),
    (FeatureProcessedEmbeddingBagCollection, FPEBCJsonSerializer),
    (KTRegroupAsDict, KTRegroupAsDictJsonSerializer),
):
    _register(_cls, _serializer)
