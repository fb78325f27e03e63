"""What the quantized-comms tests share (test_qcomm.py, test_qcomm_rs_seq.py, test_qcomm_vb.py):
the codec configs they exchange with, `through`, the reference of one sent chunk, and `bound`,
the documented error bound of one decoded value."""

from __future__ import annotations

import torch

from shardrec_collectives.qcomm import CommType, NoOpQuantizedCommCodec, QCommsConfig

PRECISIONS = [
    QCommsConfig(forward_precision=CommType.BF16, backward_precision=CommType.FP16),
    QCommsConfig(forward_precision=CommType.FP16, backward_precision=CommType.BF16,
                 backward_loss_scale=128.0),
    QCommsConfig(forward_precision=CommType.INT8, backward_precision=CommType.FP8,
                 fp8_quantize_dim=4),
    QCommsConfig(forward_precision=CommType.FP8, fp8_quantize_dim=8, backward_precision="fp32"),
    QCommsConfig(forward_precision=CommType.MX4, backward_precision=CommType.INT8),
]  # fmt: skip


def through(codec: object, x: torch.Tensor) -> torch.Tensor:
    """What a segment `x` becomes after the codec (the reference of one sent segment)."""
    if isinstance(codec, NoOpQuantizedCommCodec) or codec.comm_precision is CommType.FP32:  # type: ignore[attr-defined]
        return x
    ctx = codec.create_context()  # type: ignore[attr-defined]
    flat = x.reshape(-1)
    return codec.decode(codec.encode(flat, ctx), ctx)[: flat.numel()].view(x.shape).to(x.dtype)  # type: ignore[attr-defined]


def groups_of(x: torch.Tensor, size: int) -> torch.Tensor:
    flat = x.reshape(-1)
    pad = -flat.numel() % size
    return torch.cat([flat, flat.new_zeros(pad)]).view(-1, size)


def per_group(x: torch.Tensor, size: int, fn: str) -> torch.Tensor:
    """fn ('amax' or 'span') of each value's group, broadcast back to the values."""
    g = groups_of(x, size)
    if fn == "amax":
        v = g.abs().amax(1, keepdim=True)
    else:
        v = g.amax(1, keepdim=True) - g.amin(1, keepdim=True)
    return v.expand_as(g).reshape(-1)[: x.numel()].view(x.shape)


def bound(precision: CommType, x: torch.Tensor, row_dim: int | None, is_fwd: bool) -> torch.Tensor:
    """The documented |error| bound of one decoded value (qcomm's module docstring)."""
    a = x.abs()
    slack = 1e-6 * a + 1e-30  # float32 arithmetic of scales
    if precision is CommType.FP16:
        return 2.0**-11 * a + 2.0**-25 + slack
    if precision is CommType.BF16:
        return 2.0**-8 * a + 2.0**-133 + slack
    if precision is CommType.INT8:
        return per_group(x, row_dim or 32, "span") / 510 * (1 + 1e-5) + 1e-8 + slack
    if precision is CommType.MX4:
        return a / 4 + per_group(x, row_dim or 32, "amax") / 16 + slack
    if precision is CommType.FP8 and row_dim:
        amax = per_group(x, row_dim, "amax")
        if is_fwd:
            return 2.0**-4 * a + amax * 2.0**-17 + 1e-6 * amax
        return 2.0**-3 * a + amax * 2.0**-32 + 1e-6 * amax
    assert precision is CommType.FP8
    return 2.0**-4 * a + 2.0**-18 + slack
