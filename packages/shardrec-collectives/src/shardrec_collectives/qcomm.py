"""Quantized communication: TorchRec's `fbgemm_qcomm_codec` API with codecs in plain torch.

A `QCommsConfig` names a precision for each direction of a collective (`forward_precision` for
the pooled embeddings, `backward_precision` for their gradients); `get_qcomm_codecs_registry`
turns it into `{CommOp name: QuantizedCommCodecs}`, which the embedding sharders take as
`qcomm_codecs_registry=` (as TorchRec's do). A codec `encode`s a float tensor into what goes on
the wire and `decode`s it back to float32; `linked_all_to_all` is the all-to-all that does both
around the exchange, forward and backward. No fbgemm-gpu: every codec is a few torch ops.

Precisions (the wire dtype; the error of one decoded element, round to nearest):

- FP32: exact (no codec runs).
- FP16: float16, values clamped to +-65504; |error| <= 2^-11 |x| for |x| >= 2^-14, <= 2^-25
  below.
- BF16: bfloat16, clamped to its finite range; |error| <= 2^-8 |x| (2^-133 absolute below
  2^-126).
- FP8 with `fp8_quantize_dim` (row-wise): groups of that many consecutive values share one
  float32 scale (largest |x| of the group -> the format's largest value); forward e4m3
  (|error| <= 2^-4 |x| + amax * 2^-17), backward e5m2 (2^-3 |x| + amax * 2^-32; e4m3 with
  `fp8_bwd_uses_143`). uint8 on the wire: per group the values (padded to 4 bytes) + 8 bytes.
- FP8 without a row dim: TorchRec's fixed "hfp8" format (1 sign, 4 exponent bits with bias 15,
  3 mantissa bits): values clamped to +-0.9375, |error| <= 2^-4 |x| for |x| >= 2^-14, <= 2^-18
  below. For values of unknown range prefer the row-wise form.
- INT8: groups of `row_dim` values (32) stored as uint8 steps between the group's min and max
  with a float32 scale and bias: |error| <= (max - min) / 510 of the group + 1e-8 (fbgemm's
  epsilon in the step) + float32 rounding.
  The wire holds `ceil(row_dim / 4) * 4 + 8` bytes per group.
- MX4 (OCP MX FP4): groups of `mx4_quantize_dim` values (32) share a power-of-two scale
  `2^s` (s = floor(log2(amax)) - 2, one more when amax's mantissa rounds up past 1.75); each
  value is the nearest of +-{0, 0.5, 1, 1.5, 2, 3, 4, 6} x 2^s (saturating at 6):
  |error| <= |x| / 4 + amax / 16. Half a byte per value plus one byte per group (uint8).

Loss scales (`forward_loss_scale`, `backward_loss_scale`; FP16 and BF16 only, as TorchRec):
encode multiplies by the scale before the cast, decode divides after it (so small gradients
stay above float16's subnormal range).

Differences from TorchRec 1.8 (docs/porting.md): `output_dtype`, and MX4 rounding modes other
than `even`, are refused with a message (not implemented); BF16 is kept on CPU/gloo (TorchRec
falls back to FP16 there: its gloo lacked bfloat16); a tensor whose length is not a multiple
of the row dim is padded (TorchRec refuses it); `QCommsConfig` is frozen and keyword-only.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from shardrec_collectives import _primitives as prim
from shardrec_collectives.env import ShardingEnv

__all__ = [
    "CommOp",
    "CommType",
    "NoOpQuantizedCommCodec",
    "QCommsConfig",
    "QuantizationContext",
    "QuantizedCommCodec",
    "QuantizedCommCodecs",
    "checked_codecs",
    "codecs_for",
    "get_qcomm_codecs",
    "get_qcomm_codecs_registry",
    "linked_all_to_all",
]

logger = logging.getLogger(__name__)

ROW_DIM_DEFAULT = 32
"""Values per INT8 group (TorchRec's default)."""
HFP8_MAX = 0.9375
"""Largest value of TorchRec's fixed FP8 format (4 exponent bits, bias 15, 3 mantissa bits)."""
HFP8_SHIFT = 256.0
"""That format is float8_e4m3fn scaled by 2^-8 (bias 15 vs 7), capped one exponent lower."""


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


class CommOp(enum.Enum):
    """The collectives a codec registry may name (TorchRec's `CommOp`)."""

    POOLED_EMBEDDINGS_ALL_TO_ALL = "pooled_embeddings_all_to_all"
    POOLED_EMBEDDINGS_REDUCE_SCATTER = "pooled_embeddings_reduce_scatter"
    SEQUENCE_EMBEDDINGS_ALL_TO_ALL = "sequence_embeddings_all_to_all"


_WIRE_DTYPE = {
    CommType.FP32: torch.float32,
    CommType.FP16: torch.float16,
    CommType.BF16: torch.bfloat16,
    CommType.FP8: torch.uint8,
    CommType.INT8: torch.uint8,
    CommType.MX4: torch.uint8,
}


def _comm_type(name: str, value: object) -> CommType:
    try:
        found = CommType(value) if not isinstance(value, CommType) else value
    except ValueError:
        choices = ", ".join(t.name for t in CommType)
        raise ValueError(f"QCommsConfig: {name}={value!r} is not a CommType ({choices})") from None
    return found


@dataclasses.dataclass(frozen=True, kw_only=True)
class QCommsConfig:
    """Precisions of the quantized collectives (TorchRec's `QCommsConfig`).

    forward_precision / backward_precision: of the pooled embeddings / of their gradients.
    forward_loss_scale / backward_loss_scale: FP16 and BF16 only; ignored otherwise (logged).
    fp8_quantize_dim: values per FP8 scale group (row-wise FP8; None: the fixed format).
    fp8_quantize_dim_bwd: the same for the backward (default: fp8_quantize_dim).
    fp8_bwd_uses_143: FP8 gradients as e4m3 instead of e5m2.
    """

    forward_precision: CommType = CommType.FP32
    backward_precision: CommType = CommType.FP32
    forward_loss_scale: float | None = None
    backward_loss_scale: float | None = None
    fp8_quantize_dim: int | None = None
    fp8_quantize_dim_bwd: int | None = None
    fp8_bwd_uses_143: bool | None = False
    fp8_output_dtype: object = None
    mx4_quantize_dim: int | None = None
    mx4_quantize_dim_bwd: int | None = None
    mx4_rounding_mode: object = None
    output_dtype: object = None

    def __post_init__(self) -> None:
        forward = _comm_type("forward_precision", self.forward_precision)
        backward = _comm_type("backward_precision", self.backward_precision)
        object.__setattr__(self, "forward_precision", forward)
        object.__setattr__(self, "backward_precision", backward)
        rounding = self.mx4_rounding_mode
        if rounding is not None and getattr(rounding, "name", rounding) not in ("even", 2):
            raise ValueError(
                f"QCommsConfig: mx4_rounding_mode={rounding!r}: shardrec's MX4 codec rounds the "
                "shared exponent as RoundingMode.even only; leave it None"
            )
        for name in ("output_dtype", "fp8_output_dtype"):
            if getattr(self, name) is not None:
                raise ValueError(
                    f"QCommsConfig: {name}={getattr(self, name)!r} is not supported by shardrec "
                    "(decoded values are float32, cast to the sender's dtype); leave it None"
                )
        for name in (
            "fp8_quantize_dim",
            "fp8_quantize_dim_bwd",
            "mx4_quantize_dim",
            "mx4_quantize_dim_bwd",
        ):
            dim = getattr(self, name)
            if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
                raise ValueError(
                    f"QCommsConfig: {name}={dim!r} must be a positive int (values per shared "
                    "scale) or None"
                )
        for name in ("forward_loss_scale", "backward_loss_scale"):
            scale = getattr(self, name)
            if scale is not None and not (math.isfinite(scale) and scale > 0):
                raise ValueError(f"QCommsConfig: {name}={scale!r} must be a finite number > 0")
        if backward is CommType.FP8 and self.fp8_quantize_dim_bwd is None:
            object.__setattr__(self, "fp8_quantize_dim_bwd", self.fp8_quantize_dim)
        if backward is CommType.MX4 and self.mx4_quantize_dim_bwd is None:
            object.__setattr__(self, "mx4_quantize_dim_bwd", self.mx4_quantize_dim)


@dataclasses.dataclass
class QuantizationContext:
    """What an encode leaves for its decode (TorchRec's `QuantizationContext`): the group size
    `row_dim` (<= 0: FP8's fixed format) and the bytes per encoded group `row_dim_quant`."""

    row_dim: int = ROW_DIM_DEFAULT
    row_dim_quant: int = -1
    mx_group_size: int = ROW_DIM_DEFAULT
    rounding_mode: object = None
    padded_dim_sum_per_rank: list[int] | None = None


def _group_bytes(row_dim: int) -> int:
    """Bytes of one encoded group: the values padded to 4 bytes, then 8 bytes of scales."""
    return (row_dim + 3) // 4 * 4 + 8


def _groups(x: torch.Tensor, row_dim: int) -> torch.Tensor:
    """`x` flattened as float32 and zero-padded to whole groups: `(groups, row_dim)`."""
    flat = x.reshape(-1).float()
    pad = -flat.numel() % row_dim
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    return flat.view(-1, row_dim)


def _pack(values: torch.Tensor, scales: torch.Tensor, row_dim: int) -> torch.Tensor:
    """`(groups, row_dim)` uint8 values + `(groups, 2)` float32 -> the flat uint8 wire form."""
    groups = values.shape[0]
    out = values.new_zeros((groups, _group_bytes(row_dim)))
    out[:, :row_dim] = values
    out[:, -8:] = scales.contiguous().view(torch.uint8).view(groups, 8)
    return out.view(-1)


def _unpack(wire: torch.Tensor, row_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows = wire.view(-1, _group_bytes(row_dim))
    scales = rows[:, -8:].contiguous().view(torch.float32)
    return rows[:, :row_dim], scales


def _int8_encode(x: torch.Tensor, row_dim: int) -> torch.Tensor:
    g = _groups(x, row_dim)
    low = g.amin(1, keepdim=True)
    span = g.amax(1, keepdim=True) - low
    q = torch.sub(g, low).mul_(255.0 / (span + 1e-8)).round_().clamp_(0, 255).to(torch.uint8)
    return _pack(q, torch.cat([span / 255.0, low], 1), row_dim)


def _int8_decode(wire: torch.Tensor, row_dim: int) -> torch.Tensor:
    q, scales = _unpack(wire, row_dim)
    return (q.float() * scales[:, :1] + scales[:, 1:]).view(-1)


def _fp8_format(is_fwd: bool) -> torch.dtype:
    return torch.float8_e4m3fn if is_fwd else torch.float8_e5m2


_FP8_TABLES: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def _fp8_to_float(wire: torch.Tensor, fmt: torch.dtype) -> torch.Tensor:
    """uint8 codes of `fmt` -> float32 through a 256-entry table (torch's own float8 -> float
    conversion is an unvectorized loop on CPU, 20x slower)."""
    key = (fmt, wire.device)
    table = _FP8_TABLES.get(key)
    if table is None:
        codes = torch.arange(256, dtype=torch.uint8, device=wire.device)
        table = _FP8_TABLES[key] = codes.view(fmt).float()
    return table.index_select(0, wire.reshape(-1).int()).view(wire.shape)


def _fp8_rowwise_encode(x: torch.Tensor, row_dim: int, is_fwd: bool) -> torch.Tensor:
    fmt = _fp8_format(is_fwd)
    biggest = torch.finfo(fmt).max
    g = _groups(x, row_dim)
    amax = g.abs().amax(1, keepdim=True)
    scale = torch.where(amax > 0, biggest / amax, torch.ones_like(amax))
    q = (g * scale).clamp_(-biggest, biggest).to(fmt).view(torch.uint8)
    return _pack(q, torch.cat([1.0 / scale, torch.zeros_like(scale)], 1), row_dim)


def _fp8_rowwise_decode(wire: torch.Tensor, row_dim: int, is_fwd: bool) -> torch.Tensor:
    q, scales = _unpack(wire, row_dim)
    values = _fp8_to_float(q.contiguous(), _fp8_format(is_fwd))
    return (values * scales[:, :1]).view(-1)


MX4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
"""The magnitudes of FP4 e2m1, in the order of their 3-bit codes."""


def _mx4_encode(x: torch.Tensor, group: int) -> torch.Tensor:
    """Groups of `group` values -> per group `group / 2` bytes of 4-bit codes (even index in
    the low nibble) and one byte of shared exponent (+127). A 2-D input's rows are padded to
    whole groups first (so each row's groups stay its own), a flat one at its end."""
    if x.ndim == 2 and x.shape[1] % group:
        x = torch.nn.functional.pad(x.float(), (0, group - x.shape[1] % group))
    g = _groups(x, group)
    amax = g.abs().amax(1, keepdim=True)
    amax = torch.where(amax > 0, amax, torch.full_like(amax, 2.0**-126))
    mantissa, exponent = torch.frexp(amax)  # amax = mantissa * 2^exponent, mantissa in [0.5, 1)
    # RoundingMode.even: the exponent of amax rounded to 2 significant bits (up past 1.75).
    exponent = exponent - 1 + (mantissa > 0.875).to(exponent.dtype)
    shared = (exponent - 2).clamp(-127, 125)
    scaled = g / torch.pow(2.0, shared.float())
    v = scaled.abs()
    # The nearest e2m1 magnitude (ties up), as its 3-bit code: steps of 0.5 below 2 (codes
    # 0-4), of 1 below 4 (4-6), of 2 above (6-7, saturating at 6 = code 7).
    # Branch-free (torch.where is slow on CPU): the step is 0.5 * 2^(v >= 2) * 2^(v >= 4).
    above2 = (v >= 2).to(v.dtype)
    above4 = (v >= 4).to(v.dtype)
    step = (above2 + 1).mul_(above4 + 1).mul_(0.5)
    rounded = torch.div(v, step).add_(0.5).floor_().mul_(step)  # the nearest magnitude
    # magnitude -> code: 2r below 2, r + 2 below 4, r / 2 + 4 above
    code = rounded.div_(step).add_(above2.mul_(2).add_(above4.mul_(2)))
    codes = code.clamp_(max=7).to(torch.uint8)
    codes |= (scaled < 0).to(torch.uint8) << 3
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return torch.cat([packed, (shared + 127).to(torch.uint8)], 1).view(-1)


_MX4_TABLES: dict[torch.device, torch.Tensor] = {}


def _mx4_table(device: torch.device) -> torch.Tensor:
    """4-bit code -> value (bit 3: the sign; MX4_VALUES), built on `device` once (from an
    arange: no host-to-device copy)."""
    table = _MX4_TABLES.get(device)
    if table is None:
        code = torch.arange(16, device=device)
        exponent, mantissa = (code & 7) >> 1, (code & 1).float()
        normal = torch.pow(2.0, (exponent - 1).float()) * (1 + mantissa / 2)
        magnitude = torch.where(exponent == 0, mantissa / 2, normal)
        table = _MX4_TABLES[device] = torch.where(code >= 8, -magnitude, magnitude)
    return table


def _mx4_decode(wire: torch.Tensor, group: int) -> torch.Tensor:
    rows = wire.view(-1, group // 2 + 1)
    packed = rows[:, :-1]
    codes = torch.stack([packed & 0xF, packed >> 4], 2).view(-1).int()
    signed = _mx4_table(wire.device).index_select(0, codes).view(rows.shape[0], group)
    scale = torch.pow(2.0, rows[:, -1:].float() - 127)
    return (signed * scale).view(-1)


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
        precision = _comm_type("comm_precision", comm_precision)
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


def get_qcomm_codecs(qcomms_config: QCommsConfig | None) -> QuantizedCommCodecs:
    """The forward and backward codecs of `qcomms_config` (no-op codecs for None)."""
    codecs = QuantizedCommCodecs()
    if qcomms_config is None:
        return codecs
    c = qcomms_config
    dims = {
        CommType.FP8: (c.fp8_quantize_dim, c.fp8_quantize_dim_bwd),
        CommType.MX4: (c.mx4_quantize_dim, c.mx4_quantize_dim_bwd),
    }
    fwd_dim = dims.get(c.forward_precision, (None, None))[0]
    bwd_dim = dims.get(c.backward_precision, (None, None))[1]
    codecs.forward = QuantizedCommCodec(
        c.forward_precision, c.forward_loss_scale, row_dim=fwd_dim, is_fwd=True
    )
    codecs.backward = QuantizedCommCodec(
        c.backward_precision,
        c.backward_loss_scale,
        row_dim=bwd_dim,
        is_fwd=bool(c.fp8_bwd_uses_143),
    )
    return codecs


def get_qcomm_codecs_registry(
    qcomms_config: QCommsConfig,
    comm_ops: Sequence[CommOp] | None = None,
    device: torch.device | None = None,
) -> dict[str, QuantizedCommCodecs] | None:
    """`{CommOp name: QuantizedCommCodecs}` for `comm_ops` (default: the pooled all-to-all,
    the pooled reduce-scatter and the sequence all-to-all), or None when both precisions are
    FP32. As TorchRec: the reduce-scatter falls back from FP8 and MX4 to FP16 (forward) / BF16
    (backward). shardrec applies the pooled all-to-all's codecs (docs/collectives.md); `device`
    is accepted for TorchRec's signature (shardrec keeps BF16 on CPU)."""
    if not isinstance(qcomms_config, QCommsConfig):
        raise TypeError(
            f"get_qcomm_codecs_registry: expected a QCommsConfig, got {qcomms_config!r}"
        )
    if (
        qcomms_config.forward_precision is CommType.FP32
        and qcomms_config.backward_precision is CommType.FP32
    ):
        return None
    ops = list(comm_ops) if comm_ops is not None else list(CommOp)
    registry: dict[str, QuantizedCommCodecs] = {}
    for op in ops:
        config = qcomms_config
        if op is CommOp.POOLED_EMBEDDINGS_REDUCE_SCATTER:
            if config.forward_precision in (CommType.FP8, CommType.MX4):
                config = dataclasses.replace(config, forward_precision=CommType.FP16)
            if config.backward_precision in (CommType.FP8, CommType.MX4):
                config = dataclasses.replace(config, backward_precision=CommType.BF16)
        registry[CommOp(op).name] = get_qcomm_codecs(config)
    return registry


def codecs_for(
    registry: Mapping[str, object] | None, op: CommOp = CommOp.POOLED_EMBEDDINGS_ALL_TO_ALL
) -> QuantizedCommCodecs | None:
    """The codecs `registry` gives `op`, or None when it quantizes nothing there. Raises for a
    registry that is not `{CommOp name: QuantizedCommCodecs}`."""
    if not registry:
        return None
    if not isinstance(registry, Mapping):
        raise TypeError(
            f"qcomm_codecs_registry must map CommOp names to QuantizedCommCodecs "
            f"(get_qcomm_codecs_registry builds one), got {registry!r}"
        )
    names = {o.name for o in CommOp}
    for key, value in registry.items():
        if key not in names:
            raise ValueError(
                f"qcomm_codecs_registry: unknown key {key!r}; keys are CommOp names "
                f"({', '.join(sorted(names))})"
            )
        if not isinstance(value, QuantizedCommCodecs):
            raise TypeError(
                f"qcomm_codecs_registry[{key!r}] = {value!r}: expected QuantizedCommCodecs"
            )
    found = registry.get(op.name)
    assert found is None or isinstance(found, QuantizedCommCodecs)
    if found is None or (
        isinstance(found.forward, NoOpQuantizedCommCodec)
        and isinstance(found.backward, NoOpQuantizedCommCodec)
    ):
        return None
    return found


def checked_codecs(codecs: object, owner: str) -> QuantizedCommCodecs | None:
    """`codecs` as a collective's codecs (None when it quantizes nothing); raises TypeError
    naming `owner` for anything but a `QuantizedCommCodecs` or None."""
    if codecs is None:
        return None
    if not isinstance(codecs, QuantizedCommCodecs):
        raise TypeError(
            f"{owner}(codecs={codecs!r}): expected QuantizedCommCodecs (get_qcomm_codecs "
            "builds one from a QCommsConfig) or None"
        )
    return codecs_for({CommOp.POOLED_EMBEDDINGS_ALL_TO_ALL.name: codecs})


# -- the quantized all-to-all -----------------------------------------------------------------


def _is_noop(codec: Codec) -> bool:
    return isinstance(codec, NoOpQuantizedCommCodec) or (
        isinstance(codec, QuantizedCommCodec) and codec.comm_precision is CommType.FP32
    )


def _encode(
    codec: Codec, send: torch.Tensor, splits: Sequence[int]
) -> tuple[torch.Tensor, list[int]]:
    """`send` (flat, one segment per rank of `splits` values) encoded segment by segment (each
    decodable alone); the wire tensor and its splits."""
    if _is_noop(codec):
        return send, list(splits)
    ctx = codec.create_context()
    sizes = [codec.calc_quantized_size(n, ctx) for n in splits]
    if sizes == list(splits):  # element-wise codecs: one encode for all segments
        return codec.encode(send, ctx), sizes
    parts = [codec.encode(seg, ctx) for seg in torch.split(send, list(splits)) if seg.numel()]
    wire = torch.cat(parts) if parts else send.new_empty((0,), dtype=codec.quantized_dtype)
    return wire, sizes


def _decode(
    codec: Codec,
    wire: torch.Tensor,
    wire_splits: Sequence[int],
    splits: Sequence[int],
    dtype: torch.dtype,
) -> torch.Tensor:
    """The inverse of `_encode` on received segments: `sum(splits)` values of `dtype`."""
    if _is_noop(codec):
        return wire
    ctx = codec.create_context()
    if list(wire_splits) == list(splits):
        return codec.decode(wire, ctx).to(dtype)
    parts = [
        codec.decode(seg, ctx)[:n]
        for seg, n in zip(torch.split(wire, list(wire_splits)), splits, strict=True)
        if n
    ]
    out = torch.cat(parts) if parts else wire.new_empty((0,), dtype=torch.float32)
    return out.to(dtype)


def linked_all_to_all(
    env: ShardingEnv,
    send: torch.Tensor,
    in_splits: Sequence[int],
    out_splits: Sequence[int],
    codecs: QuantizedCommCodecs,
) -> Callable[[], torch.Tensor]:
    """`_primitives.linked_all_to_all` of a flat float tensor with `codecs`: the forward codec
    encodes each destination's segment before the exchange and decodes each received one
    after it; the backward does the same to the gradient with the backward codec. The result
    has `send`'s dtype. Every rank must pass the same codecs."""
    fwd, bwd = codecs.forward, codecs.backward
    wire, wire_in = _encode(fwd, send.detach(), in_splits)
    wire_out = [fwd.calc_quantized_size(n, fwd.create_context()) for n in out_splits]
    pending = prim.all_to_all(env, wire, wire_in, wire_out)
    grad = prim.needs_grad(env, send)

    def reverse(g: torch.Tensor) -> torch.Tensor:
        g_wire, g_in = _encode(bwd, g.contiguous(), out_splits)
        g_out = [bwd.calc_quantized_size(n, bwd.create_context()) for n in in_splits]
        got = prim.all_to_all_sync(env, g_wire, g_in, g_out)
        return _decode(bwd, got, g_out, in_splits, g.dtype)

    def finish() -> torch.Tensor:
        received = _decode(fwd, pending.wait(), wire_out, out_splits, send.dtype)
        return prim.link(send, received, reverse, grad)

    return finish
