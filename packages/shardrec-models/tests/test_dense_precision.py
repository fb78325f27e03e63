"""`DLRM.set_dense_precision("bf16")`: the dense part under bfloat16 autocast.

A tiny DLRM and DLRM_DCN trained side by side from the same weights on the same batches, fp32
and bf16: every bf16 loss is finite and within 0.02 (relative, above a loss of 1) of the fp32
loss at that step (the stated tolerance; bfloat16 rounds to 2^-8 relative); parameters,
gradients and outputs stay float32; the embeddings are untouched (same pooled values); the
default is float32 with unchanged numerics (set back to "fp32", outputs equal bit for bit).
"""

from __future__ import annotations

import copy
import math
import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from models_reference import feature_limits, make_batch, make_ebc, randomize_

from shardrec_models import DLRM, DLRM_DCN, DLRMTrain
from shardrec_models.dlrm import DENSE_PRECISIONS
from shardrec_testing import seeded_generator

TABLES = [("t0", 50, ["f0"]), ("t1", 30, ["f1", "f2"])]
DIM, DENSE_IN, STEPS, TOLERANCE = 8, 6, 30, 0.02


def build(dcn: bool) -> DLRMTrain:
    ebc = make_ebc(TABLES, DIM)
    model = (
        DLRM_DCN(ebc, DENSE_IN, [16, DIM], [16, 8, 1], 2, 4)
        if dcn
        else DLRM(ebc, DENSE_IN, [16, DIM], [16, 8, 1])
    )
    randomize_(model, seeded_generator("bf16-weights", dcn), scale=0.2)
    return DLRMTrain(model)


@pytest.mark.parametrize("dcn", [False, True])
def test_bf16_dense_part_trains_close_to_fp32(dcn: bool) -> None:
    fp32 = build(dcn)
    bf16 = copy.deepcopy(fp32)
    bf16.model.set_dense_precision("bf16")
    assert (fp32.model.dense_precision, bf16.model.dense_precision) == ("fp32", "bf16")
    opts = [torch.optim.Adam(m.parameters(), lr=0.01) for m in (fp32, bf16)]
    limits = feature_limits(TABLES)
    differs = False
    for step in range(STEPS):
        batch = make_batch(limits, DENSE_IN, 32, seeded_generator("bf16-batch", step))
        losses = []
        for model, opt in zip((fp32, bf16), opts, strict=True):
            loss, (_, logits, _) = model(batch)
            assert logits.dtype == torch.float32
            opt.zero_grad()
            loss.backward()
            assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
            opt.step()
            losses.append(loss.item())
        assert math.isfinite(losses[1])
        assert abs(losses[1] - losses[0]) <= TOLERANCE * max(1.0, losses[0]), (step, losses)
        differs |= losses[0] != losses[1]
    assert differs  # bf16 really ran
    assert all(p.dtype == torch.float32 for p in bf16.parameters())  # master weights
    # The tables are looked up in float32 either way.
    batch = make_batch(limits, DENSE_IN, 8, seeded_generator("bf16-final"))
    ebc = bf16.model.sparse_arch.embedding_bag_collection
    pooled = ebc(batch.sparse_features).values()
    assert pooled.dtype == torch.float32


def test_default_is_fp32_and_unchanged() -> None:
    model = build(dcn=False).model
    assert model.dense_precision == "fp32"
    batch = make_batch(feature_limits(TABLES), DENSE_IN, 8, seeded_generator("bf16-default"))
    before = model(batch.dense_features, batch.sparse_features)
    model.set_dense_precision("bf16")
    during = model(batch.dense_features, batch.sparse_features)
    model.set_dense_precision("fp32")
    after = model(batch.dense_features, batch.sparse_features)
    assert torch.equal(before, after)
    assert not torch.equal(before, during) and during.dtype == torch.float32
    torch.testing.assert_close(during, before, rtol=0.05, atol=0.05)


def test_unknown_precision_is_refused() -> None:
    model = build(dcn=False).model
    with pytest.raises(ValueError, match=r"dense precision 'fp16' is not one of fp32, bf16"):
        model.set_dense_precision("fp16")
    assert DENSE_PRECISIONS == ("fp32", "bf16")
