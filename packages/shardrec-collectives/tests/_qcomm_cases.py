"""What the quantized-comms tests on real ranks share (test_qcomm.py, test_qcomm_rs_seq.py):
the codec configs they exchange with, and `through`, the reference of one sent chunk."""

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
