"""The quantized-communication codecs (TorchRec's `QuantizedCommCodec` API): `CommType` names
a precision, `QuantizedCommCodec` encodes/decodes one direction with the formats of
`_qformats`, `QuantizedCommCodecs` pairs a collective's forward and backward codecs. Public
through `shardrec_collectives.qcomm`."""

from __future__ import annotations

import dataclasses
import enum
import logging
from typing import Any

import torch

from shardrec_collectives._qformats import (
    HFP8_MAX,
    HFP8_SHIFT,
    ROW_DIM_DEFAULT,
    _fp8_rowwise_decode,
    _fp8_rowwise_encode,
    _fp8_to_float,
    _group_bytes,
    _int8_decode,
    _int8_encode,
    _mx4_decode,
    _mx4_encode,
)

# Logged under the public module's name, as before the split.
logger = logging.getLogger("shardrec_collectives.qcomm")


class CommType(enum.Enum):
    """Precision of a collective's payload (TorchRec's names and values)."""

    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
    INT8 = "int8"
    MX4 = "mx4"

    def __str__(self) -> str:
        return self.value


def _comm_type(name: str, value: object, owner: str = "QCommsConfig") -> CommType:
    """`value` as a CommType: a member, its value ("fp16"), or another enum with such a value
    (fbgemm's `SparseType.FP16`, what TorchRec's codec takes)."""
    if isinstance(value, CommType):
        return value
    raw = value.value if isinstance(value, enum.Enum) else value
    try:
        return CommType(raw)
    except ValueError:
        choices = ", ".join(f"CommType.{t.name} or {t.value!r}" for t in CommType)
        raise ValueError(
            f"{owner}: {name}={value!r} is not a CommType; pass one of {choices}"
        ) from None


_WIRE_DTYPE = {
    CommType.FP32: torch.float32,
    CommType.FP16: torch.float16,
    CommType.BF16: torch.bfloat16,
    CommType.FP8: torch.uint8,
    CommType.INT8: torch.uint8,
    CommType.MX4: torch.uint8,
}


@dataclasses.dataclass
class QuantizationContext:
    """What an encode leaves for its decode (TorchRec's `QuantizationContext`): the group size
    `row_dim` (<= 0: FP8's fixed format) and the bytes per encoded group `row_dim_quant`."""

    row_dim: int = ROW_DIM_DEFAULT
    row_dim_quant: int = -1
    mx_group_size: int = ROW_DIM_DEFAULT
    rounding_mode: object = None
    padded_dim_sum_per_rank: list[int] | None = None


class QuantizedCommCodec:
    """One direction's codec (TorchRec's `QuantizedCommCodec`, fbgemm's implementation).

    encode(x, ctx) -> the wire tensor (`quantized_dtype`, flat for FP8/INT8);
    decode(wire, ctx) -> float32 (flat for FP8/INT8, padded to whole groups).
    """

    def __init__(
        self,
        comm_precision: CommType,
        loss_scale: float | None = None,
        row_dim: int | None = None,
        is_fwd: bool = True,
    ) -> None:
        precision = _comm_type("comm_precision", comm_precision, "QuantizedCommCodec")
        if loss_scale is not None and precision not in (CommType.FP16, CommType.BF16):
            logger.info(
                "loss_scale %s applies to FP16 and BF16 only; %s ignores it", loss_scale, precision
            )
            loss_scale = None
        self._comm_precision = precision
        self._loss_scale = loss_scale
        self._row_dim = -1 if row_dim is None else row_dim
        self._is_fwd = is_fwd

    @property
    def comm_precision(self) -> CommType:
        return self._comm_precision

    @property
    def quantized_dtype(self) -> torch.dtype:
        """The dtype of `encode`'s result."""
        return _WIRE_DTYPE[self._comm_precision]

    def create_context(self) -> QuantizationContext:
        if self._comm_precision is CommType.FP8:
            return QuantizationContext(row_dim=self._row_dim)
        if self._comm_precision is CommType.MX4:
            group = ROW_DIM_DEFAULT if self._row_dim <= 0 else self._row_dim
            return QuantizationContext(row_dim=group, mx_group_size=group)
        return QuantizationContext()

    def _grouped(self, ctx: QuantizationContext) -> bool:
        return self._comm_precision is CommType.INT8 or (
            self._comm_precision is CommType.FP8 and ctx.row_dim > 0
        )

    def calc_quantized_size(self, input_len: int, ctx: QuantizationContext | None = None) -> int:
        """Length of `encode`'s result for `input_len` values."""
        ctx = ctx if ctx is not None else self.create_context()
        if self._grouped(ctx):
            return -(-input_len // ctx.row_dim) * _group_bytes(ctx.row_dim)
        if self._comm_precision is CommType.MX4:
            return -(-input_len // ctx.mx_group_size) * (ctx.mx_group_size // 2 + 1)
        return input_len

    def padded_size(
        self,
        input_tensor: torch.Tensor,
        dim_per_rank: list[int],
        my_rank: int,
        qcomm_ctx: QuantizationContext,
    ) -> tuple[int, int]:
        """(padded dim sum, padding) of this rank's columns: MX4 pads each rank's columns to
        whole groups (and records every rank's in `qcomm_ctx.padded_dim_sum_per_rank`); the
        other codecs need no padding."""
        if input_tensor.ndim == 1:
            return input_tensor.shape[0], 0
        if self._comm_precision is not CommType.MX4:
            return input_tensor.shape[1], 0
        group = qcomm_ctx.mx_group_size
        padded = [-(-d // group) * group for d in dim_per_rank]
        qcomm_ctx.padded_dim_sum_per_rank = padded
        return padded[my_rank], padded[my_rank] - dim_per_rank[my_rank]

    def encode(
        self, input_tensor: torch.Tensor, ctx: QuantizationContext | None = None
    ) -> torch.Tensor:
        x = input_tensor
        p = self._comm_precision
        if self._loss_scale is not None:
            x = x * self._loss_scale
        if p is CommType.FP32:
            return x.float()
        if p in (CommType.FP16, CommType.BF16):
            dtype = _WIRE_DTYPE[p]
            biggest = torch.finfo(dtype).max
            return x.float().clamp(-biggest, biggest).to(dtype)
        ctx = ctx if ctx is not None else self.create_context()
        if p is CommType.INT8:
            ctx.row_dim_quant = _group_bytes(ctx.row_dim)
            return _int8_encode(x, ctx.row_dim)
        if p is CommType.MX4:
            return _mx4_encode(x, ctx.mx_group_size)
        if ctx.row_dim > 0:
            ctx.row_dim_quant = _group_bytes(ctx.row_dim)
            return _fp8_rowwise_encode(x, ctx.row_dim, self._is_fwd)
        fixed = (x.float().clamp(-HFP8_MAX, HFP8_MAX) * HFP8_SHIFT).to(torch.float8_e4m3fn)
        return fixed.view(torch.uint8)

    def decode(
        self, input_tensor: torch.Tensor, ctx: QuantizationContext | None = None
    ) -> torch.Tensor:
        p = self._comm_precision
        if p in (CommType.FP8, CommType.INT8, CommType.MX4):
            ctx = ctx if ctx is not None else self.create_context()
            if p is CommType.MX4:
                out = _mx4_decode(input_tensor, ctx.mx_group_size)
            elif p is CommType.INT8:
                out = _int8_decode(input_tensor, ctx.row_dim)
            elif ctx.row_dim > 0:
                out = _fp8_rowwise_decode(input_tensor, ctx.row_dim, self._is_fwd)
            else:
                out = _fp8_to_float(input_tensor, torch.float8_e4m3fn) / HFP8_SHIFT
        else:
            out = input_tensor.float()
        if self._loss_scale is not None:
            out = out / self._loss_scale
        return out


class NoOpQuantizedCommCodec:
    """The identity codec (TorchRec's default for a direction without quantization)."""

    @property
    def quantized_dtype(self) -> torch.dtype:
        return torch.float32

    def create_context(self) -> None:
        return None

    def calc_quantized_size(self, input_len: int, ctx: object = None) -> int:
        return input_len

    def padded_size(
        self, input_tensor: torch.Tensor, dim_per_rank: list[int], my_rank: int, qcomm_ctx: object
    ) -> tuple[int, int]:
        return (input_tensor.shape[0] if input_tensor.ndim == 1 else input_tensor.shape[1]), 0

    def encode(self, input_tensor: torch.Tensor, ctx: object = None) -> torch.Tensor:
        return input_tensor

    def decode(self, input_tensor: torch.Tensor, ctx: object = None) -> torch.Tensor:
        return input_tensor


Codec = QuantizedCommCodec | NoOpQuantizedCommCodec


@dataclasses.dataclass
class QuantizedCommCodecs:
    """The codecs of one collective: `forward` (its payload) and `backward` (its gradient)."""

    forward: Any = dataclasses.field(default_factory=NoOpQuantizedCommCodec)
    backward: Any = dataclasses.field(default_factory=NoOpQuantizedCommCodec)
