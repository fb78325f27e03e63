"""A rank's fused lookup takes the segment path (one native call into the output columns) and
trains exactly as the per-group path it replaces.

The multi-rank exactness of every sharding type against an unsharded module is
test_training.py's; here one rank, both paths of `LocalLookup` on the same batches.
"""

from __future__ import annotations

import pytest
import torch

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_embedding._native import native_available
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import column_wise, construct_module_sharding_plan, table_wise
from shardrec_sharding import EmbeddingBagCollectionSharder, lookup
from shardrec_testing import assert_close, random_lengths, seeded_generator

CONFIGS = [
    EmbeddingBagConfig(name="a", num_embeddings=30, embedding_dim=8, feature_names=["x", "y"]),
    EmbeddingBagConfig(name="b", num_embeddings=20, embedding_dim=8, feature_names=["x"]),
    EmbeddingBagConfig(name="c", num_embeddings=10, embedding_dim=4, feature_names=["z"]),
]
FEATURES = ["x", "y", "z"]


def _sharded(optimizer: str) -> torch.nn.Module:
    ebc = EmbeddingBagCollection(CONFIGS)
    g = seeded_generator("segment-path-init")
    with torch.no_grad():
        for c in CONFIGS:
            w = torch.randn(c.num_embeddings, c.embedding_dim, generator=g)
            ebc.embedding_bags[c.name].weight.copy_(w)
    plan = construct_module_sharding_plan(
        ebc,
        {"a": table_wise(rank=0), "b": column_wise(ranks=[0, 0]), "c": table_wise(rank=0)},
        world_size=1,
    )
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": optimizer, "learning_rate": 0.1}
    )
    return sharder.shard(ebc, plan, ShardingEnv.from_local(1, 0))


@pytest.mark.skipif(not native_available(), reason="no C compiler")
@pytest.mark.parametrize("optimizer", ["exact_row_wise_adagrad", "exact_sgd"])
def test_segment_path_trains_as_the_group_path(
    monkeypatch: pytest.MonkeyPatch, optimizer: str
) -> None:
    fast, slow = _sharded(optimizer), _sharded(optimizer)
    taken: list[int] = []
    original = lookup.LocalLookup._fused_segments

    def counting(self: lookup.LocalLookup, *args: object) -> torch.Tensor | None:
        out = original(self, *args)  # type: ignore[arg-type]
        taken.append(int(out is not None))
        return out

    for step in range(3):
        g = seeded_generator("segment-path-batch", step)
        lengths = random_lengths(3 * 4, 4, g)
        values = torch.randint(0, 10, (int(lengths.sum()),), generator=g)
        kjt = KeyedJaggedTensor(FEATURES, values, lengths=lengths)
        coefficients = torch.randn(4, 28, generator=g)
        monkeypatch.setattr(lookup.LocalLookup, "_fused_segments", counting)
        out_fast = fast(kjt).wait().values()
        monkeypatch.setattr(lookup.LocalLookup, "_fused_segments", lambda *a: None)
        out_slow = slow(kjt).wait().values()
        assert_close(out_fast.detach(), out_slow.detach(), msg=f"step {step}")
        (out_fast * coefficients).sum().backward()
        (out_slow * coefficients).sum().backward()
    assert taken and all(taken)
    theirs = dict(slow.named_parameters())
    assert sorted(theirs) == [f"embedding_bags.{t}.weight" for t in "abc"]
    for name, weight in fast.named_parameters():
        assert torch.equal(weight, theirs[name]), name  # same native update, same order
