"""build_sharder_data: a plain snapshot of a sharder's fused params, codecs and kind."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from shardrec_planner.sharder_data import (
    BaseEmbeddingSharder,
    BaseQuantEmbeddingSharder,
    StorageUsageType,
    build_sharder_data,
    build_sharder_data_map,
)


class _Float:
    def __init__(self) -> None:
        self.fused_params = {"optimizer": "adam", "learning_rate": 0.1}


class _Quant:
    fused_params = None


BaseEmbeddingSharder.register(_Float)
BaseQuantEmbeddingSharder.register(_Quant)


def test_kind_fused_params_and_codec_sizes() -> None:
    sharder = _Float()
    data = build_sharder_data(sharder)
    assert data.storage_usage_type is StorageUsageType.BASE
    assert data.fused_params == sharder.fused_params
    assert data.fused_params is not sharder.fused_params  # a copy
    assert data.qcomm_dtype_sizes == {}
    assert build_sharder_data(_Quant()).storage_usage_type is StorageUsageType.BASE_QUANT
    assert build_sharder_data(_Quant()).fused_params == {}
    codec = SimpleNamespace(
        forward=SimpleNamespace(quantized_dtype=torch.float16),
        backward=SimpleNamespace(quantized_dtype=torch.float32),
    )
    other = SimpleNamespace(
        qcomm_codecs_registry={"POOLED_EMBEDDINGS_ALL_TO_ALL": codec, "unknown_op": codec}
    )
    got = build_sharder_data_map({"m": other})["m"]
    assert got.storage_usage_type is StorageUsageType.DEFAULT
    assert got.qcomm_dtype_sizes == {"POOLED_EMBEDDINGS_ALL_TO_ALL": (2, 4)}
