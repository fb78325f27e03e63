"""`QuantConfig`: how a float collection is quantized (TorchRec's, a NamedTuple of observers)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch

from shardrec_embedding.configs import DataType

__all__ = [
    "MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS",
    "QuantConfig",
    "data_type_of_dtype",
    "output_dtype_of",
    "weight_data_types",
]

# The attribute a float collection carries to ask `from_float` for TorchRec's split state dict
# (`weight_qscale` and `weight_qbias` instead of one `weight_qscaleshift`); TorchRec's value.
MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS = "__register_quant_state_dict_split_scale_bias"

# An observer factory: `torch.ao.quantization.PlaceholderObserver.with_args(dtype=...)`.
ObserverFactory = Callable[[], object]

_DTYPE_TO_DATA_TYPE: dict[torch.dtype, DataType] = {
    torch.int8: DataType.INT8,
    torch.qint8: DataType.INT8,
    torch.quint8: DataType.INT8,
    torch.uint8: DataType.INT8,
    torch.quint4x2: DataType.INT4,
    torch.quint2x4: DataType.INT2,
    torch.float16: DataType.FP16,
    torch.bfloat16: DataType.BF16,
    torch.float32: DataType.FP32,
}


class QuantConfig(NamedTuple):
    """activation: observer factory whose dtype is the lookup's output dtype (float or half).
    weight: observer factory whose dtype is the tables' storage (int8, quint4x2, quint2x4,
    float16, bfloat16, float32). per_table_weight_dtype: table name -> dtype overriding it."""

    activation: ObserverFactory
    weight: ObserverFactory
    per_table_weight_dtype: Mapping[str, torch.dtype] | None = None


def data_type_of_dtype(dtype: object, where: str) -> DataType:
    """The storage `DataType` of a quantization dtype; `ValueError` naming it otherwise."""
    if isinstance(dtype, torch.dtype) and dtype in _DTYPE_TO_DATA_TYPE:
        return _DTYPE_TO_DATA_TYPE[dtype]
    valid = ", ".join(str(d) for d in _DTYPE_TO_DATA_TYPE)
    raise ValueError(
        f"{where}: dtype {dtype!r} cannot be used for quantized tables; use one of {valid}"
    )


def _observer_dtype(factory: object, field: str) -> object:
    if not callable(factory):
        raise TypeError(f"QuantConfig.{field} must be an observer factory, got {factory!r}")
    observer = factory()
    dtype = getattr(observer, "dtype", None)
    if dtype is None:
        raise TypeError(f"QuantConfig.{field} made {observer!r}, which has no dtype")
    return dtype


def weight_data_types(qconfig: object, tables: list[str]) -> dict[str, DataType]:
    """Per table, the storage type `qconfig` asks for."""
    weight = getattr(qconfig, "weight", None)
    default = data_type_of_dtype(_observer_dtype(weight, "weight"), "qconfig.weight")
    per_table = getattr(qconfig, "per_table_weight_dtype", None) or {}
    unknown = sorted(set(per_table) - set(tables))
    if unknown:
        raise ValueError(
            f"per_table_weight_dtype names unknown table(s) {unknown}; tables: {tables}"
        )
    return {
        t: data_type_of_dtype(per_table[t], f"per_table_weight_dtype[{t!r}]")
        if t in per_table
        else default
        for t in tables
    }


def output_dtype_of(qconfig: object) -> torch.dtype:
    """The lookup output dtype the activation observer asks for (float32 or float16)."""
    dtype = _observer_dtype(getattr(qconfig, "activation", None), "activation")
    if dtype not in (torch.float32, torch.float16):
        raise ValueError(
            f"qconfig.activation dtype {dtype!r}: outputs are torch.float or torch.half"
        )
    assert isinstance(dtype, torch.dtype)
    return dtype
