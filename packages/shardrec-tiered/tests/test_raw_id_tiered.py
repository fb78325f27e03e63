"""`RawIdTieredEmbeddingBag` over `MemoryRows` (no key-value store dependency; the RocksDB
store's tests are in shardrec-kvstore): negative raw ids hold cache slots and keep their
trained rows across evictions, unseen ids read their initial rows, the refusals; a
checkpoint (state_dict) holds every stored id and resumes training bit for bit."""

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
    state = module.state_dict()  # nothing was written: no rows to save
    assert state["tables.t.tier.0.ids"].numel() == 0 and state["tables.t.tier.0.rows"].shape == (
        0,
        3,
    )
    with pytest.raises(NotImplementedError, match="optimizer state is saved with each id's row"):
        module.fused_optimizer.state_dict()
    with pytest.raises(RuntimeError, match=r"Missing key\(s\).*tables.t.tier.0.ids"):
        module.load_state_dict({})


@pytest.mark.parametrize("optimizer", ["sgd", "exact_row_wise_adagrad"])
def test_state_dict_resumes_bit_for_bit(optimizer: str) -> None:
    """Train 4 steps, save, load into a fresh module, train 4 more == 8 straight: a cache of
    one batch's distinct ids evicting every step; the state holds more ids than the cache."""
    g = torch.Generator().manual_seed(7)
    batches = [torch.randint(-20, 20, (6,), generator=g) * 1_000_003 for _ in range(8)]
    cache = max(int(b.unique().numel()) for b in batches)

    def make() -> RawIdTieredEmbeddingBag:
        params = {"optimizer": optimizer, "learning_rate": 0.1}
        return RawIdTieredEmbeddingBag(TABLE, params, TieredOptions(cache_rows=cache))

    def step(module: RawIdTieredEmbeddingBag, i: int) -> torch.Tensor:
        out = module(batches[i], torch.tensor([0, 2, 6]))
        (out * (i + 1)).sum().backward()
        return out.detach()

    straight, first = make(), make()
    for i in range(4):
        step(straight, i), step(first, i)
    state = first.state_dict()
    assert state["tables.t.tier.0.ids"].numel() > cache
    again = make()
    again.load_state_dict(state)
    for i in range(4, 8):
        assert torch.equal(step(straight, i), step(again, i)), i
    ids = torch.cat(batches).unique()
    (w1, s1), (w2, s2) = straight.read_rows(ids), again.read_rows(ids)
    assert torch.equal(w1, w2) and s1.keys() == s2.keys()
    assert all(torch.equal(s1[k], s2[k]) for k in s1)
    stride = 3 if optimizer == "sgd" else 4  # weight, then rowwise Adagrad's one column
    with pytest.raises(
        ValueError, match=rf"rows of shape \(2, 9\), the table's rows are \(2, {stride}\)"
    ):
        again.load_state_dict(
            {"tables.t.tier.0.ids": torch.tensor([1, 2]), "tables.t.tier.0.rows": torch.zeros(2, 9),
             "tables.t.step": torch.tensor(0)}
        )  # fmt: skip
