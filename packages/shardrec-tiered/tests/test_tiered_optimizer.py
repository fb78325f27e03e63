"""`TieredFusedEmbeddingBag.fused_optimizer`: a learning rate set through its `param_groups`
(by hand, by a torch LR scheduler, or through `learning_rate`) is the one the next backward
applies, as on an in-memory `BatchedFusedEmbeddingBag`."""

from __future__ import annotations

import pathlib

import pytest
import torch

from shardrec_embedding.fused import BatchedFusedEmbeddingBag, FusedTableSpec
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_testing import random_lengths, seeded_generator
from shardrec_tiered import TieredFusedEmbeddingBag, TieredOptions
from shardrec_tiered.checkpoint import TieredFusedOptimizer

SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
ROWS = {"a": 30, "b": 20}


def specs() -> list[FusedTableSpec]:
    g = seeded_generator("tiered-optimizer-init")
    return [
        FusedTableSpec(name=n, num_rows=r, dim=4, weight=torch.randn(r, 4, generator=g))
        for n, r in ROWS.items()
    ]


def batches() -> list[tuple[torch.Tensor, torch.Tensor, None]]:
    out = []
    for step in range(6):
        g = seeded_generator("tiered-optimizer-batch", step)
        lengths = random_lengths(4, 3, g)
        ids = torch.randint(0, sum(ROWS.values()), (int(lengths.sum()),), generator=g)
        out.append((ids, torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]), None))
    return out


def test_learning_rate_schedules_reach_the_tiered_tables(tmp_path: pathlib.Path) -> None:
    data = batches()
    plain = BatchedFusedEmbeddingBag(specs(), SPEC)
    options = TieredOptions(store_dir=str(tmp_path), cache_rows=12)
    tiered = TieredFusedEmbeddingBag(specs(), SPEC, options)
    optimizer = tiered.fused_optimizer
    assert isinstance(optimizer, TieredFusedOptimizer)
    assert sorted(optimizer.params) == sorted(plain.fused_optimizer.params)
    schedules = [
        torch.optim.lr_scheduler.LambdaLR(m.fused_optimizer, lambda s: 1.0 / (1 + s))
        for m in (plain, tiered)
    ]
    for step, (ids, offsets, psw) in enumerate(data):
        if step == 3:  # a hand-set rate, through either spelling
            plain.fused_optimizer.param_groups[0]["lr"] = 0.7
            tiered.learning_rate = 0.7
            assert optimizer.param_groups[0]["lr"] == 0.7
        for m, schedule in zip((plain, tiered), schedules, strict=True):
            out = m(ids, offsets, psw)
            (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
            m.fused_optimizer.step()
            schedule.step()
    tiered.flush()
    assert tiered.learning_rate == plain.fused_optimizer.learning_rate != SPEC.learning_rate
    for name, weight in zip(("a", "b"), plain.split_embedding_weights(), strict=True):
        assert torch.equal(tiered.read_table(name)[0], weight.detach())
    assert sum(c.misses for c in tiered.caches) > 0
    tiered.learning_rate = -1.0
    with pytest.raises(ValueError, match=r"learning rate must be >= 0, got -1\.0"):
        _ = tiered.learning_rate
