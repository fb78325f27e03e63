"""Row-wise quantization of embedding tables: INT8, INT4, INT2 codes with a per-row scale and
bias, or a plain cast to FP16 / BF16 / FP32.

Layout of one quantized row (TorchRec's, `FloatToFusedNBitRowwiseQuantizedSBHalf`):

```
| codes: ceil(D * bits / 8) bytes                     | scale: fp16 | bias: fp16 |
  INT8: one code per byte; INT4: two per byte, low nibble first; INT2: four per byte,
  lowest bit pair first. Codes past D (padding) are 0.
x ~= code * scale + bias    (code in [0, 2**bits - 1])
```

Error bound: every element satisfies `|x - dequantize(quantize(x))| <= scale / 2` (plus fp32
rounding of `code * scale + bias`). To keep that bound *after* scale and bias are rounded to
fp16, the bias is the row minimum rounded down and the scale is rounded up, so every element of
the row lies in `[bias, bias + (2**bits - 1) * scale]` and its nearest code is never clamped
(docs/design/quant-rounding.md).
"""

from __future__ import annotations

import torch

from shardrec_embedding.configs import DataType

__all__ = [
    "FLOAT_DATA_TYPES",
    "QUANT_DATA_TYPES",
    "SUPPORTED_DATA_TYPES",
    "bits_of",
    "dequantize",
    "float_dtype_of",
    "quantize",
    "row_bytes",
    "scale_bias",
]

QUANT_DATA_TYPES = (DataType.INT8, DataType.INT4, DataType.INT2)
FLOAT_DATA_TYPES = (DataType.FP32, DataType.FP16, DataType.BF16)
SUPPORTED_DATA_TYPES = QUANT_DATA_TYPES + FLOAT_DATA_TYPES

_BITS = {DataType.INT8: 8, DataType.INT4: 4, DataType.INT2: 2}
_FLOAT = {DataType.FP32: torch.float32, DataType.FP16: torch.float16, DataType.BF16: torch.bfloat16}
_FP16_MAX = 65504.0


def check_data_type(data_type: DataType | str, where: str) -> DataType:
    """`DataType(data_type)` when quantized storage supports it, else `ValueError`."""
    try:
        dt = DataType(data_type)
    except ValueError:
        dt = None
    if dt not in SUPPORTED_DATA_TYPES:
        valid = ", ".join(d.value for d in SUPPORTED_DATA_TYPES)
        raise ValueError(f"{where}: data type {data_type!r} is not supported; use one of {valid}")
    assert dt is not None
    return dt


def bits_of(data_type: DataType) -> int:
    """Bits per code of an integer data type (8, 4, 2)."""
    return _BITS[data_type]


def float_dtype_of(data_type: DataType) -> torch.dtype:
    """torch dtype of a float data type (FP32, FP16, BF16)."""
    return _FLOAT[data_type]


def row_bytes(dim: int, data_type: DataType) -> int:
    """Bytes of one stored row: packed codes plus 4 bytes of scale/bias, or D floats."""
    if data_type in _BITS:
        return -(-dim * _BITS[data_type] // 8) + 4
    return dim * _FLOAT[data_type].itemsize


def quantize(weight: torch.Tensor, data_type: DataType | str) -> torch.Tensor:
    """Quantize a float table row by row.

    weight: `(R, D)` float. Returns for INT8/INT4/INT2 `(R, ceil(D * bits / 8) + 4)` uint8 rows
    in the layout above; for FP32/FP16/BF16 `(R, D)` in that dtype. `ValueError` for an
    unsupported data type or (integer types) a non-finite value or one beyond fp16's range.
    """
    dt = check_data_type(data_type, "quantize")
    if weight.dim() != 2 or not weight.is_floating_point():
        raise ValueError(
            f"quantize takes a 2-d float table, got {tuple(weight.shape)} {weight.dtype}"
        )
    if dt in _FLOAT:
        return weight.detach().to(_FLOAT[dt]).contiguous()
    x = weight.detach().float()
    rows, dim = x.shape
    bits = _BITS[dt]
    levels = (1 << bits) - 1
    if x.numel() == 0:
        return torch.zeros(rows, row_bytes(dim, dt), dtype=torch.uint8, device=x.device)
    bad = ~torch.isfinite(x) | (x.abs() > _FP16_MAX)
    if bool(bad.any()):
        r, c = (int(v) for v in bad.nonzero()[0])
        raise ValueError(
            f"quantize: element [{r}, {c}] = {float(x[r, c])} is not finite or beyond fp16's "
            f"range (+/-{_FP16_MAX}); scale and bias are stored as fp16"
        )
    low = x.amin(1)
    high = x.amax(1)
    bias = _round_half(low, down=True)
    scale = _round_half((high - bias.float()) / levels, down=False)
    scale_f = scale.float().unsqueeze(1)
    inverse = torch.where(scale_f > 0, 1.0 / scale_f, torch.zeros_like(scale_f))
    codes = torch.round((x - bias.float().unsqueeze(1)) * inverse).clamp_(0, levels)
    codes_u8 = codes.to(torch.uint8)
    packed = _pack(codes_u8, bits)
    sb = (
        torch.stack([scale, bias], dim=1)
        .clone(memory_format=torch.contiguous_format)
        .view(torch.uint8)
    )
    return torch.cat([packed, sb], dim=1)


def scale_bias(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(scale, bias)`, each `(R,)` fp32, of quantized rows `(R, bytes)` uint8."""
    sb = rows[:, -4:].clone(memory_format=torch.contiguous_format).view(torch.float16).float()
    return sb[:, 0], sb[:, 1]


def dequantize(rows: torch.Tensor, dim: int, data_type: DataType | str) -> torch.Tensor:
    """Inverse of `quantize`: `(R, bytes)` stored rows -> `(R, D)` fp32."""
    dt = check_data_type(data_type, "dequantize")
    if dt in _FLOAT:
        return rows.float()
    bits = _BITS[dt]
    expected = row_bytes(dim, dt)
    if rows.dim() != 2 or rows.shape[1] != expected or rows.dtype != torch.uint8:
        raise ValueError(
            f"dequantize: {dt.value} rows of dim {dim} are ({expected},) uint8 each, got "
            f"{tuple(rows.shape)} {rows.dtype}"
        )
    codes = _unpack(rows[:, :-4], bits, dim).float()
    scale, bias = scale_bias(rows)
    return codes * scale.unsqueeze(1) + bias.unsqueeze(1)


def _round_half(x: torch.Tensor, *, down: bool) -> torch.Tensor:
    """fp16 nearest to `x` on the requested side (down: <= x, up: >= x)."""
    h = x.half()
    if down:
        off = h.float() > x
        toward = torch.full_like(h, float("-inf"))
    else:
        off = h.float() < x
        toward = torch.full_like(h, float("inf"))
    return torch.where(off, torch.nextafter(h, toward), h)


def _pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """`(R, D)` uint8 codes < 2**bits -> `(R, ceil(D * bits / 8))` bytes, lowest bits first."""
    if bits == 8:
        return codes
    per_byte = 8 // bits
    rows, dim = codes.shape
    padded = -(-dim // per_byte) * per_byte
    if padded != dim:
        codes = torch.cat([codes, codes.new_zeros(rows, padded - dim)], dim=1)
    grouped = codes.view(rows, padded // per_byte, per_byte).to(torch.int32)
    shifts = torch.arange(0, 8, bits, dtype=torch.int32, device=codes.device)
    return (grouped << shifts).sum(2).to(torch.uint8)


def _unpack(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """Inverse of `_pack`: `(R, bytes)` -> `(R, D)` uint8 codes."""
    if bits == 8:
        return packed
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=packed.device)
    mask = (1 << bits) - 1
    codes = (packed.unsqueeze(2) >> shifts) & mask
    return codes.reshape(packed.shape[0], -1)[:, :dim]
