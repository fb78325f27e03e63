"""`RawIdTieredEmbeddingBag` over `MemoryRows` (no key-value store dependency; the RocksDB
store's tests are in shardrec-kvstore): negative raw ids hold cache slots and keep their
trained rows across evictions, unseen ids read their initial rows, the refusals."""

from __future__ import annotations

import pytest
import torch

from shardrec_embedding import EmbeddingBagConfig
from shardrec_embedding.dynamic.reset import table_seed
from shardrec_tiered import MemoryRows, RawIdTieredEmbeddingBag, TieredOptions, initial_rows

TABLE = EmbeddingBagConfig(name="t", num_embeddings=64, embedding_dim=3, feature_names=["f"])
LR = 0.5


def initial(ids: list[int]) -> torch.Tensor:
    return initial_rows(
        torch.tensor(ids),
        3,
        seed=table_seed(0, "t"),
        low=TABLE.get_weight_init_min(),
        high=TABLE.get_weight_init_max(),
    )


def test_negative_ids_keep_their_rows_through_evictions() -> None:
    module = RawIdTieredEmbeddingBag(
        TABLE, {"optimizer": "sgd", "learning_rate": LR}, TieredOptions(cache_rows=2)
    )
    assert isinstance(module.cache.store.kv, MemoryRows)  # type: ignore[attr-defined]
    expected = {k: initial([k])[0] for k in (-(2**63), -1, -7, 2**63 - 1)}
    # each step's two ids evict the previous step's two; every id comes back
    for pair in ([-(2**63), -1], [-7, 2**63 - 1], [-1, -(2**63)], [2**63 - 1, -7]) * 2:
        out = module(torch.tensor(pair), torch.tensor([0, 1, 2]))
        assert torch.equal(out.detach(), torch.stack([expected[k] for k in pair]))
        out.sum().backward()  # grad 1 per row: each row drops by LR
        for k in pair:
            expected[k] = expected[k] - LR
    assert module.stats()["t"]["misses"] == 16  # every step missed both ids
    keys = list(expected)
    weight, _ = module.read_rows(torch.tensor(keys))
    assert torch.equal(weight, torch.stack([expected[k] for k in keys]))


def test_unseen_ids_read_their_initial_rows_without_writes() -> None:
    module = RawIdTieredEmbeddingBag(TABLE, {"optimizer": "sgd"}, TieredOptions(cache_rows=4))
    with torch.no_grad():
        out = module(torch.tensor([5, -5, 5]), torch.tensor([0, 1, 3]))
    rows = initial([5, -5])
    assert torch.equal(out, torch.stack([rows[0], rows[1] + rows[0]]))
    module.flush()
    assert module.stats()["t"]["bytes_written"] == 0
    with pytest.raises(NotImplementedError, match="raw-id tiered table"):
        module.state_dict()
    with pytest.raises(NotImplementedError, match="raw-id tiered table"):
        module.load_state_dict({})
