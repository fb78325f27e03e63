"""Checkpoints of a tiered lookup against the in-memory table (`BatchedFusedEmbeddingBag`):
train tiered with a cache evicting every step, move its state_dict and fused optimizer state
into an in-memory table (and back), continue both: bit for bit the uninterrupted in-memory
run. Streaming state_dict slices read and write the store a chunk at a time."""

from __future__ import annotations

import pathlib

import pytest
import torch

from shardrec_embedding.fused import BatchedFusedEmbeddingBag, FusedTableSpec
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_testing import random_lengths, seeded_generator
from shardrec_tiered import StoreLayoutError, TieredFusedEmbeddingBag, TieredOptions
from shardrec_tiered import checkpoint as tiered_checkpoint
from shardrec_tiered.checkpoint import StoreSlice, streaming_state_dict

ROWS = {"a": 40, "b": 25}
DIM = 4
STEPS = 8
OPTIMIZERS = [
    EmbOptimType.EXACT_SGD,
    EmbOptimType.EXACT_ADAGRAD,
    EmbOptimType.EXACT_ROWWISE_ADAGRAD,
    EmbOptimType.ADAM,
    EmbOptimType.PARTIAL_ROWWISE_ADAM,
]


def specs() -> list[FusedTableSpec]:
    g = seeded_generator("tiered-ckpt-init")
    return [
        FusedTableSpec(name=n, num_rows=r, dim=DIM, weight=torch.randn(r, DIM, generator=g))
        for n, r in ROWS.items()
    ]


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = seeded_generator("tiered-ckpt-batch", step)
    lengths = random_lengths(5, 4, g)
    ids = (torch.randint(0, 10, (int(lengths.sum()),), generator=g) + step * 13) % sum(
        ROWS.values()
    )
    return ids, torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])


def train(module: torch.nn.Module, steps: range) -> None:
    for step in steps:
        ids, offsets = batch(step)
        out = module(ids, offsets)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()


def in_memory(optimizer: EmbOptimType) -> BatchedFusedEmbeddingBag:
    spec = FusedOptimSpec(optimizer=optimizer, learning_rate=0.05)
    return BatchedFusedEmbeddingBag(specs(), spec)


def tiered(optimizer: EmbOptimType, store: pathlib.Path) -> TieredFusedEmbeddingBag:
    spec = FusedOptimSpec(optimizer=optimizer, learning_rate=0.05)
    return TieredFusedEmbeddingBag(
        specs(), spec, TieredOptions(store_dir=str(store), cache_rows=10)
    )


def tables_of(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items()}


def assert_same(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sorted(sa) == sorted(sb)
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    oa, ob = a.fused_optimizer.state_dict(), b.fused_optimizer.state_dict()  # type: ignore[operator, union-attr]
    assert oa.keys() == ob.keys()
    for key, entry in oa["state"].items():
        other = ob["state"][key]
        assert sorted(entry) == sorted(other), key
        for name, value in entry.items():
            assert torch.equal(value.reshape(-1), other[name].reshape(-1)), name


@pytest.mark.parametrize("optimizer", OPTIMIZERS, ids=lambda o: o.name)
def test_tiered_to_memory_and_back_bit_for_bit(
    optimizer: EmbOptimType, tmp_path: pathlib.Path
) -> None:
    reference = in_memory(optimizer)
    train(reference, range(STEPS))

    first = tiered(optimizer, tmp_path / "one")
    train(first, range(STEPS // 2))
    middle = in_memory(optimizer)
    middle.load_state_dict(first.state_dict())
    middle.fused_optimizer.load_state_dict(first.fused_optimizer.state_dict())
    train(middle, range(STEPS // 2, STEPS))
    assert_same(middle, reference)

    # in memory -> tiered, continue tiered
    start = in_memory(optimizer)
    train(start, range(STEPS // 2))
    second = tiered(optimizer, tmp_path / "two")
    train(second, range(1))  # its cache holds rows (some dirty) that the load must replace
    second.load_state_dict(start.state_dict())
    second.fused_optimizer.load_state_dict(start.fused_optimizer.state_dict())
    train(second, range(STEPS // 2, STEPS))
    assert_same(second, reference)


def test_streaming_slices_move_a_chunk_at_a_time(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside `streaming_state_dict()` values are StoreSlices; chunks of 3 rows: reading and
    writing through them gives the same table as the plain state_dict, and a load through a
    slice refreshes the cached rows."""
    monkeypatch.setattr(tiered_checkpoint, "CHUNK_BYTES", 3 * (DIM + 1) * 4)
    module = tiered(EmbOptimType.EXACT_ROWWISE_ADAGRAD, tmp_path / "s")
    train(module, range(3))
    plain = module.state_dict()
    with streaming_state_dict():
        streamed = module.state_dict()
        state = module.fused_optimizer.state_dict()["state"]
    view = streamed["tables.a.weight"]
    assert isinstance(view, StoreSlice) and tuple(view.size()) == (40, DIM)
    assert len(view.chunks()) == 14  # 40 rows, 3 a chunk
    pieces = [view.read_chunk(o, s) for o, s in view.chunks()]
    assert torch.equal(torch.cat(pieces), plain["tables.a.weight"])
    momentum = state["b.weight"]["b.momentum1"]
    assert isinstance(momentum, StoreSlice) and tuple(momentum.size()) == (25,)
    new = torch.arange(40 * DIM, dtype=torch.float32).view(40, DIM)
    for offsets, sizes in view.chunks():
        view.write_region(offsets, new[offsets[0] : offsets[0] + sizes[0]])
    assert torch.equal(module.state_dict()["tables.a.weight"], new)
    ids, offsets = torch.tensor([0, 39]), torch.tensor([0, 2])
    with torch.no_grad():
        assert torch.equal(module(ids, offsets), new[[0, 39]].sum(0, keepdim=True))


def test_load_refuses_a_wrong_shape(tmp_path: pathlib.Path) -> None:
    module = tiered(EmbOptimType.EXACT_ADAGRAD, tmp_path / "w")
    state = module.state_dict()
    state["tables.a.weight"] = torch.zeros(41, DIM)
    with pytest.raises(RuntimeError, match=r"tables.a.weight.*\(41, 4\).*\(40, 4\)"):
        module.load_state_dict(state)
    bad = module.fused_optimizer.state_dict()
    bad["state"]["a.weight"].pop("a.momentum1")
    with pytest.raises(ValueError, match=r"a\.weight"):
        module.fused_optimizer.load_state_dict(bad)


@pytest.mark.parametrize("inside", ["", "rank-0"])
def test_store_refuses_a_checkpoint_directory(tmp_path: pathlib.Path, inside: str) -> None:
    (tmp_path / "shardrec.json").write_text("{}")
    store = tmp_path / inside if inside else tmp_path
    with pytest.raises(StoreLayoutError, match=r"is inside the checkpoint .* holds shardrec.json"):
        tiered(EmbOptimType.EXACT_SGD, store)
    assert not (tmp_path / "a.tier").exists() and not (tmp_path / "rank-0").exists()
