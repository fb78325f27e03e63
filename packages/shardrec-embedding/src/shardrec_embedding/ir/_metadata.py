"""Collection configs <-> their serialized metadata (`ir/schema.py`), dtypes by name, and the
device a deserialized module lands on (part of `shardrec_embedding.ir.serializer`)."""

from __future__ import annotations

import logging
from typing import Any

import torch

from shardrec_embedding.configs import (
    DataType,
    EmbeddingBagConfig,
    EmbeddingConfig,
    PoolingType,
)
from shardrec_embedding.ir.schema import (
    EmbeddingBagConfigMetadata,
    EmbeddingConfigMetadata,
)

# the log name of the module these came from, so log filters keep working
logger = logging.getLogger("shardrec_embedding.ir.serializer")


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
