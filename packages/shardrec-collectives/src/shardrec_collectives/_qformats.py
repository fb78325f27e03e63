"""The wire formats of the quantized collectives: INT8, row-wise FP8, TorchRec's fixed FP8
("hfp8") and MX4, each an encode into a flat uint8 tensor and its decode back to float32 (plain
torch ops). `qcomm`'s docstring gives each format's layout and error bound."""

from __future__ import annotations

import torch

ROW_DIM_DEFAULT = 32
"""Values per INT8 group (TorchRec's default)."""
HFP8_MAX = 0.9375
"""Largest value of TorchRec's fixed FP8 format (4 exponent bits, bias 15, 3 mantissa bits)."""
HFP8_SHIFT = 256.0
"""That format is float8_e4m3fn scaled by 2^-8 (bias 15 vs 7), capped one exponent lower."""


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
