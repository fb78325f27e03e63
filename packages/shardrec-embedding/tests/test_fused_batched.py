"""BatchedFusedEmbeddingBag from simple table specs (the form sharded lookups build)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from shardrec_embedding.configs import EmbeddingBagConfig, PoolingType
from shardrec_embedding.fused import BatchedFusedEmbeddingBag, FusedTableSpec
from shardrec_optim import EmbOptimType, FusedOptimSpec


def _specs() -> list[FusedTableSpec]:
    gen = torch.Generator().manual_seed(0)
    return [
        FusedTableSpec(name="a", num_rows=4, dim=3, weight=torch.randn(4, 3, generator=gen)),
        FusedTableSpec(name="b", num_rows=6, dim=3, init_range=(-0.1, 0.1)),
    ]


def test_forward_matches_embedding_bag_over_concatenated_tables() -> None:
    specs = _specs()
    m = BatchedFusedEmbeddingBag(specs, {"optimizer": "exact_sgd", "lr": 0.1})
    assert m.row_offsets == [0, 4]
    assert torch.equal(m.split_embedding_weights()[0].detach(), specs[0].weight)
    w = m.split_embedding_weights()[1].detach()
    assert float(w.abs().max()) <= 0.1
    ids = torch.tensor([0, 3, 4 + 5, 4 + 0, 4 + 0], dtype=torch.int32)
    offsets = torch.tensor([0, 2, 2, 5])  # bag 1 is empty
    psw = torch.tensor([1.0, 2.0, 0.5, 1.0, -1.0])
    full = torch.cat([t.detach() for t in m.split_embedding_weights()])
    want = F.embedding_bag(ids.long(), full, offsets[:-1], per_sample_weights=psw, mode="sum")
    torch.testing.assert_close(m(ids, offsets, psw), want)


def test_backward_updates_touched_rows_only_with_sgd() -> None:
    m = BatchedFusedEmbeddingBag(
        _specs(), FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.5)
    )
    before = torch.cat([t.detach().clone() for t in m.split_embedding_weights()])
    ids = torch.tensor([1, 1, 7])
    offsets = torch.tensor([0, 2, 3])
    m(ids, offsets).sum().backward()
    after = torch.cat([t.detach() for t in m.split_embedding_weights()])
    want = before.clone()
    want[1] -= 0.5 * 2  # twice in bag 0, d(sum)/d(row) = 1 per occurrence
    want[7] -= 0.5
    torch.testing.assert_close(after, want)
    assert int(m._step) == 1


def test_from_embedding_bag_config_uses_its_init() -> None:
    cfg = EmbeddingBagConfig(
        name="t",
        num_embeddings=5,
        embedding_dim=2,
        init_fn=lambda w: torch.nn.init.constant_(w, 0.25),
    )
    m = BatchedFusedEmbeddingBag([cfg], FusedOptimSpec(optimizer=EmbOptimType.ADAM))
    assert bool((m.split_embedding_weights()[0] == 0.25).all())
    assert sorted(m.optimizer_state()) == ["momentum1", "momentum2"]


def test_bad_specs() -> None:
    with pytest.raises(ValueError, match=r"dim=4.*'a'.*dim=3"):
        BatchedFusedEmbeddingBag(
            [*_specs(), FusedTableSpec(name="c", num_rows=2, dim=4)], {"optimizer": "sgd"}
        )
    with pytest.raises(ValueError, match=r"\['weight', 'init_range'\]"):
        FusedTableSpec(name="x", num_rows=2, dim=2, weight=torch.zeros(2, 2), init_range=(0, 1))
    with pytest.raises(ValueError, match=r"\(3, 2\).*\(2, 2\)"):
        FusedTableSpec(name="x", num_rows=2, dim=2, weight=torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"num_rows.*0"):
        FusedTableSpec(name="x", num_rows=0, dim=2)
    with pytest.raises(ValueError, match=r"NONE"):
        FusedTableSpec(name="x", num_rows=2, dim=2, pooling=PoolingType.NONE)
    with pytest.raises(ValueError, match=r"unique.*\['a', 'a'\]"):
        BatchedFusedEmbeddingBag([_specs()[0], _specs()[0]], {"optimizer": "sgd"})
    m = BatchedFusedEmbeddingBag(
        [FusedTableSpec(name="m", num_rows=3, dim=2, pooling=PoolingType.MEAN)],
        {"optimizer": "sgd"},
    )
    with pytest.raises(ValueError, match=r"per_sample_weights.*MEAN"):
        m(torch.tensor([0]), torch.tensor([0, 1]), torch.ones(1))
