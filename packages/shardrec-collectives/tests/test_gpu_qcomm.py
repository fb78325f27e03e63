"""The quantized-comm codecs on CUDA give what they give on CPU (the wire bytes of the
element-wise and MX4 codecs, the decoded values of all within float32 rounding), and encode and
decode make no host sync (`torch.cuda.set_sync_debug_mode("error")`).

Marked `gpu`: skipped without CUDA (`nox -s gpu`, tools/gpu_check.py run them on a GPU).
"""

from __future__ import annotations

import pytest
import torch

from shardrec_collectives.qcomm import CommType, QuantizedCommCodec
from shardrec_testing import seeded_generator

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CODECS = [
    (CommType.FP16, None, True),
    (CommType.BF16, None, True),
    (CommType.FP8, None, True),
    (CommType.FP8, 32, True),
    (CommType.FP8, 16, False),
    (CommType.INT8, None, True),
    (CommType.MX4, None, True),
]


@pytest.mark.parametrize(("precision", "row_dim", "is_fwd"), CODECS)
def test_codec_on_cuda_equals_cpu(precision: CommType, row_dim: int | None, is_fwd: bool) -> None:
    codec = QuantizedCommCodec(precision, row_dim=row_dim, is_fwd=is_fwd)
    x = torch.randn(4096 + 96, generator=seeded_generator("gpu-qcomm", str(precision)))
    if precision is CommType.FP8 and row_dim is None:
        x = x / (x.abs().max() + 1)
    cpu_wire = codec.encode(x, codec.create_context())
    cpu_out = codec.decode(cpu_wire, codec.create_context())
    on_gpu = x.cuda()
    codec.decode(codec.encode(on_gpu[:64], codec.create_context()), codec.create_context())
    torch.cuda.synchronize()  # the first call builds the codec's lookup tables on the device
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        wire = codec.encode(on_gpu, codec.create_context())
        out = codec.decode(wire, codec.create_context())
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    assert wire.device.type == "cuda" and wire.dtype == cpu_wire.dtype
    if precision in (CommType.FP16, CommType.BF16, CommType.MX4):
        assert torch.equal(wire.cpu(), cpu_wire)
    torch.testing.assert_close(out.cpu(), cpu_out, rtol=1e-6, atol=1e-6)
