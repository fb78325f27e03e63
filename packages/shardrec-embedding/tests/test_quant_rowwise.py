"""Row-wise quantization kernels: layout, error bound (property test), bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shardrec_embedding import DataType
from shardrec_embedding.quant import dequantize, quantize, row_bytes, scale_bias

INT_TYPES = [DataType.INT8, DataType.INT4, DataType.INT2]


def _fp32_slack(x: torch.Tensor) -> torch.Tensor:
    # code * scale + bias is evaluated in fp32: a few ulps of the operands' magnitude
    return 4 * torch.finfo(torch.float32).eps * (x.abs().amax(1, keepdim=True) + 1)


@settings(max_examples=60, deadline=None)
@given(
    data_type=st.sampled_from(INT_TYPES),
    rows=st.integers(1, 6),
    dim=st.integers(1, 37),
    magnitude=st.sampled_from([1e-6, 1e-2, 1.0, 300.0, 60000.0]),
    offset=st.floats(-1000, 1000),
    seed=st.integers(0, 2**31 - 1),
)
def test_error_at_most_half_scale(
    data_type: DataType, rows: int, dim: int, magnitude: float, offset: float, seed: int
) -> None:
    gen = torch.Generator().manual_seed(seed)
    x = (torch.rand(rows, dim, generator=gen) * 2 - 1) * magnitude + offset
    x = x.clamp(-65504, 65504)
    q = quantize(x, data_type)
    assert q.shape == (rows, row_bytes(dim, data_type)) and q.dtype == torch.uint8
    scale, _ = scale_bias(q)
    err = (x - dequantize(q, dim, data_type)).abs()
    assert bool((err <= scale.unsqueeze(1) / 2 + _fp32_slack(x)).all())


@pytest.mark.parametrize("data_type", INT_TYPES)
def test_layout_matches_torch_kernels(data_type: DataType) -> None:
    """Codes then fp16 scale then fp16 bias; torch's 4/2-bit kernels read our rows as is."""
    x = torch.randn(9, 16, generator=torch.Generator().manual_seed(1))
    q = quantize(x, data_type)
    bits = {DataType.INT8: 8, DataType.INT4: 4, DataType.INT2: 2}[data_type]
    assert q.shape[1] == 16 * bits // 8 + 4
    _, bias = scale_bias(q)
    assert torch.equal(bias, bias.half().float()) and bool((bias <= x.amin(1)).all())
    if data_type is not DataType.INT8:
        op = {
            DataType.INT4: torch.ops.quantized.embedding_bag_4bit_rowwise_offsets,
            DataType.INT2: torch.ops.quantized.embedding_bag_2bit_rowwise_offsets,
        }[data_type]
        ids, offsets = torch.arange(9), torch.arange(10)
        rows = op(q, ids, offsets, False, 0, False, None, None, True)
        assert torch.equal(rows, dequantize(q, 16, data_type))


@pytest.mark.parametrize("data_type", [DataType.FP16, DataType.BF16, DataType.FP32])
def test_float_types_cast(data_type: DataType) -> None:
    x = torch.randn(5, 7)
    q = quantize(x, data_type)
    assert q.shape == (5, 7)
    assert torch.equal(dequantize(q, 7, data_type), x.to(q.dtype).float())


def test_constant_row_and_padding() -> None:
    x = torch.full((2, 5), 0.1)
    for dt in INT_TYPES:
        q = quantize(x, dt)
        scale, _ = scale_bias(q)
        err = (dequantize(q, 5, dt) - x).abs()
        assert bool((err <= scale.unsqueeze(1) / 2 + 1e-7).all())


def test_unsupported_data_type() -> None:
    with pytest.raises(ValueError, match="NFP8"):
        quantize(torch.zeros(2, 2), DataType.NFP8)
    with pytest.raises(ValueError, match="'int3'"):
        quantize(torch.zeros(2, 2), "int3")


def test_non_finite_and_out_of_fp16_range() -> None:
    x = torch.zeros(3, 4)
    x[1, 2] = float("inf")
    with pytest.raises(ValueError, match=r"\[1, 2\] = inf"):
        quantize(x, DataType.INT8)
    x[1, 2] = 1e6
    with pytest.raises(ValueError, match=r"1000000\.0"):
        quantize(x, DataType.INT4)


def test_dequantize_wrong_width() -> None:
    with pytest.raises(ValueError, match=r"\(12,\) uint8"):
        dequantize(torch.zeros(3, 5, dtype=torch.uint8), 8, DataType.INT8)
