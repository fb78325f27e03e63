"""`set_dense_precision("bf16")` on CUDA: autocast on the input's device, float32 logits and
master weights, close to the float32 model (marked `gpu`: skipped without CUDA)."""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from models_reference import feature_limits, make_batch
from test_dense_precision import DENSE_IN, TABLES, build

from shardrec_testing import seeded_generator

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("dcn", [False, True])
def test_bf16_dense_part_on_cuda(dcn: bool) -> None:
    model = build(dcn).model.cuda()
    batch = make_batch(feature_limits(TABLES), DENSE_IN, 16, seeded_generator("gpu-bf16"))
    batch = batch.to(torch.device("cuda"))
    exact = model(batch.dense_features, batch.sparse_features)
    model.set_dense_precision("bf16")
    got = model(batch.dense_features, batch.sparse_features)
    assert got.dtype == torch.float32 and got.device.type == "cuda"
    assert all(p.dtype == torch.float32 for p in model.parameters())
    torch.testing.assert_close(got, exact, rtol=0.05, atol=0.05)
