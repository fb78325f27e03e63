"""Module level: a `RawIdTieredEmbeddingBag`'s table moves into the same dynamic table of a
`FusedEmbeddingBagCollection` (in memory) and back (`shardrec_tiered.raw_interchange`).
Reference: train 3 steps one way, move, train 3 more == the first kind trained on, bit for
bit, on the ids both hold (a never-seen id's first row differs by kind), with a tier cache of
4 rows evicting every step and no eviction in memory; row-wise Adagrad. Refusals: another
embedding_dim, another optimizer, more ids than the in-memory capacity (then evict_to_fit
keeps the largest ids with their rows). A plain EmbeddingBagCollection moves its rows with
zero optimizer state."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

from shardrec_embedding import DynamicTableConfig, EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_embedding.fused.collection import FusedEmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import seeded_generator
from shardrec_tiered import RawIdTieredEmbeddingBag, TieredOptions
from shardrec_tiered.raw_checkpoint import store_ids
from shardrec_tiered.raw_interchange import load_from_dynamic, load_into_dynamic

DIM = 3
SPEC = {"optimizer": "exact_row_wise_adagrad", "learning_rate": 0.3}
POOL = torch.randint(-(2**62), 2**62, (12,), generator=seeded_generator("rawx-pool")) * 2


def config(capacity: int, dim: int = DIM) -> EmbeddingBagConfig:
    return EmbeddingBagConfig(
        name="t",
        num_embeddings=capacity,
        embedding_dim=dim,
        feature_names=["f"],
        weight_init_min=-0.5,
        weight_init_max=0.5,
        dynamic=DynamicTableConfig(init_seed=2),
    )


def memory(
    capacity: int = 32, dim: int = DIM, spec: dict[str, object] = SPEC
) -> FusedEmbeddingBagCollection:
    torch.manual_seed(3)
    return FusedEmbeddingBagCollection([config(capacity, dim)], spec)


def tier(dim: int = DIM, spec: dict[str, object] = SPEC) -> RawIdTieredEmbeddingBag:
    return RawIdTieredEmbeddingBag(config(32, dim), spec, TieredOptions(cache_rows=4))


def step_ids(step: int) -> tuple[Tensor, Tensor, Tensor]:
    """4 ids of a window moving by 3; from step 3 on, of the ids seen before it."""
    g = seeded_generator("rawx", step)
    pick = torch.randint(0, 4, (4,), generator=g) + 3 * step
    if step < 3:
        ids = POOL[pick]
    else:
        seen = torch.unique(torch.cat([step_ids(s)[0] for s in range(3)]))
        ids = seen[pick % seen.numel()]
    return ids, torch.tensor([0, 2, 4]), torch.randn(2, DIM, generator=g)


def train(module: object, steps: range) -> None:
    for step in steps:
        ids, offsets, coefficients = step_ids(step)
        if isinstance(module, RawIdTieredEmbeddingBag):
            out = module(ids, offsets)
        else:
            kjt = KeyedJaggedTensor(["f"], ids, lengths=offsets.diff())
            out = module(kjt).values()  # type: ignore[operator]
        (out * coefficients).sum().backward()


def table(module: object) -> tuple[Tensor, Tensor]:
    """`(sorted ids, rows: weight | momentum)` of either kind."""
    if isinstance(module, RawIdTieredEmbeddingBag):
        ids = store_ids(module.cache)
        weight, state = module.read_rows(ids)
        return ids, torch.cat([weight, state["momentum1"].reshape(-1, 1)], dim=1)
    assert isinstance(module, FusedEmbeddingBagCollection)
    t = module.dynamic_tables.table("t")
    slots = torch.nonzero(t.occupied).reshape(-1)
    ids, order = torch.sort(t.slot_ids[slots])
    state = module.fused_optimizer.state_dict()["state"]["embedding_bags.t.weight"]["t.momentum1"]
    weight = module.embedding_bags["t"].weight.detach()
    return ids, torch.cat([weight[slots], state[slots].reshape(-1, 1)], dim=1)[order]


@pytest.mark.parametrize("into_tier", [True, False])
def test_move_then_train_on_is_bit_for_bit(into_tier: bool) -> None:
    first, straight = (memory(), memory()) if into_tier else (tier(), tier())
    then = tier() if into_tier else memory()
    train(straight, range(6))
    train(first, range(3))
    if into_tier:
        load_from_dynamic(then, first)  # type: ignore[arg-type]
    else:
        load_into_dynamic(first, then)  # type: ignore[arg-type]
    saved, loaded = table(first), table(then)
    assert saved[0].numel() > 4  # more ids than the tier's cache
    assert torch.equal(saved[0], loaded[0]) and torch.equal(saved[1], loaded[1])
    train(then, range(3, 6))
    expected, got = table(straight), table(then)
    assert torch.equal(expected[0], got[0]) and torch.equal(expected[1], got[1])


def test_refusals_and_evict_to_fit() -> None:
    with pytest.raises(ValueError, match=r"'t'.*embedding_dim 4, the raw-id tier 3"):
        load_from_dynamic(tier(), memory(dim=4))
    with pytest.raises(ValueError, match=r"'t'.*optimizer keeps state \[\].*\['momentum1'\]"):
        load_into_dynamic(tier(), memory(spec={"optimizer": "exact_sgd", "learning_rate": 0.1}))
    trained = tier()
    train(trained, range(3))
    ids, rows = table(trained)
    small, n = memory(capacity=4), ids.numel()
    with pytest.raises(
        ValueError,
        match=rf"'t'.*holds {n} ids.*capacity 4.*num_embeddings >= {n}.*evict_to_fit=True",
    ):
        load_into_dynamic(trained, small)
    load_into_dynamic(trained, small, evict_to_fit=True)
    kept = table(small)
    assert torch.equal(kept[0], ids[-4:]) and torch.equal(kept[1], rows[-4:])


def test_plain_collection_moves_rows_with_zero_optimizer_state() -> None:
    torch.manual_seed(4)
    plain = EmbeddingBagCollection([config(32)])
    kjt = KeyedJaggedTensor(["f"], POOL[:5], lengths=torch.tensor([2, 3]))
    with torch.no_grad():
        plain(kjt)  # admits 5 ids (no optimizer: the rows are the initializer's)
    t = plain.dynamic_tables.table("t")
    slots = torch.nonzero(t.occupied).reshape(-1)
    ids, order = torch.sort(t.slot_ids[slots])
    weight = plain.embedding_bags["t"].weight.detach()[slots][order]
    moved = tier()
    load_from_dynamic(moved, plain)
    got = table(moved)
    assert torch.equal(got[0], ids) and torch.equal(got[1][:, :DIM], weight)
    assert not bool(got[1][:, DIM:].any())
    back = EmbeddingBagCollection([config(32)])
    load_into_dynamic(moved, back)
    t = back.dynamic_tables.table("t")
    slots = torch.nonzero(t.occupied).reshape(-1)
    assert torch.equal(t.slot_ids[slots], ids)
    assert torch.equal(back.embedding_bags["t"].weight.detach()[slots], weight)
