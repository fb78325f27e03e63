"""A tiered lookup trains exactly as the same tables held in memory (`BatchedFusedEmbeddingBag`),
for caches down to one batch's distinct rows (evicting on every step), with and without
prefetch; and its promised refusals (cache too small, store not usable, store of another
layout)."""

from __future__ import annotations

import os
import pathlib

import pytest
import torch

from shardrec_embedding.fused import BatchedFusedEmbeddingBag, FusedTableSpec
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_testing import random_lengths, seeded_generator
from shardrec_tiered import (
    CacheFullError,
    CachePolicy,
    CacheTooSmallError,
    StoreLayoutError,
    StoreSpaceError,
    TieredFusedEmbeddingBag,
    TieredOptions,
)

ROWS = {"a": 40, "b": 25}
DIM = 4
BAGS = 5
STEPS = 6


def specs(mean: bool = False) -> list[FusedTableSpec]:
    g = seeded_generator("tiered-init")
    pooling = "MEAN" if mean else "SUM"
    return [
        FusedTableSpec(
            name=n, num_rows=r, dim=DIM, pooling=pooling, weight=torch.randn(r, DIM, generator=g)
        )  # type: ignore[arg-type]  # the str is checked and converted
        for n, r in ROWS.items()
    ]


def batches(weighted: bool) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
    """Group-row batches; each step draws its ids from a window that moves by the table size
    every step, so consecutive steps share few rows and a minimal cache evicts every step."""
    total = sum(ROWS.values())
    out = []
    for step in range(STEPS):
        g = seeded_generator("tiered-batch", step)
        lengths = random_lengths(BAGS, 4, g)
        n = int(lengths.sum())
        ids = (torch.randint(0, 12, (n,), generator=g) + step * 13) % total
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        psw = torch.rand(n, generator=g) if weighted else None
        out.append((ids, offsets, psw))
    return out


def min_cache_rows(data: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]) -> int:
    """One batch's distinct rows of one table, the most over the batches (the smallest cache
    every batch fits in)."""
    most = 0
    for ids, _, _ in data:
        u = ids.unique()
        most = max(most, int((u < ROWS["a"]).sum()), int((u >= ROWS["a"]).sum()))
    return most


def train(module: torch.nn.Module, data: list, prefetch: bool, background: bool = False) -> None:
    for i, (ids, offsets, psw) in enumerate(data):
        if prefetch and i == 0:
            module.prefetch(ids, background=background)  # type: ignore[operator]
        out = module(ids, offsets, psw)
        if prefetch and i + 1 < len(data):
            # batch i+1 while batch i runs its backward
            module.prefetch(data[i + 1][0], background=background)  # type: ignore[operator]
        coefficients = torch.linspace(-1, 1, out.numel()).view_as(out)
        (out * coefficients).sum().backward()


OPTIMIZERS = [
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_ADAGRAD, learning_rate=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.ADAM, learning_rate=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.PARTIAL_ROWWISE_ADAM, learning_rate=0.1),
]


@pytest.mark.parametrize("spec", OPTIMIZERS, ids=lambda s: s.optimizer.value)
@pytest.mark.parametrize(
    ("cache", "policy", "prefetch", "weighted", "mean"),
    [
        ("min", CachePolicy.LRU, "no", False, False),
        ("min", CachePolicy.LFU, "sync", True, False),
        ("min", CachePolicy.LRU, "background", False, False),
        ("min+1", CachePolicy.LRU, "background", False, True),
        ("all", CachePolicy.LFU, "no", True, False),
    ],
)
def test_training_equals_in_memory_table(
    tmp_path: pathlib.Path,
    spec: FusedOptimSpec,
    cache: str,
    policy: CachePolicy,
    prefetch: str,
    weighted: bool,
    mean: bool,
) -> None:
    data = batches(weighted)
    smallest = min_cache_rows(data)
    # With a prefetch in flight the cache holds two batches.
    rows = {"min": smallest * (1 if prefetch == "no" else 2), "min+1": 2 * smallest + 1, "all": 100}
    reference = BatchedFusedEmbeddingBag(specs(mean), spec)
    options = TieredOptions(store_dir=str(tmp_path), cache_rows=rows[cache], policy=policy)
    tiered = TieredFusedEmbeddingBag(specs(mean), spec, options)
    train(reference, data, prefetch=False)
    train(tiered, data, prefetch=prefetch != "no", background=prefetch == "background")
    state = reference.optimizer_state()
    for name, weight, start in zip(
        ROWS, reference.split_embedding_weights(), reference.row_offsets, strict=True
    ):
        got_weight, got_state = tiered.read_table(name)
        assert torch.equal(got_weight, weight.detach()), name
        for k, v in state.items():
            assert torch.equal(got_state[k], v[start : start + ROWS[name]]), (name, k)
    stats = tiered.stats()
    if cache == "min":
        # Every step's window moved: rows were written back on eviction.
        assert all(s["bytes_written"] > 0 for s in stats.values()), stats
    assert all(int(c.pins.sum()) == 0 for c in tiered.caches), "pins left after backward"


def test_forward_without_grad_loads_without_pinning(tmp_path: pathlib.Path) -> None:
    spec = OPTIMIZERS[2]
    tiered = TieredFusedEmbeddingBag(
        specs(), spec, TieredOptions(store_dir=str(tmp_path), cache_rows=8)
    )
    reference = BatchedFusedEmbeddingBag(specs(), spec)
    ids = torch.tensor([0, 3, 41, 3, 60])
    offsets = torch.tensor([0, 2, 5])
    with torch.no_grad():
        assert torch.equal(tiered(ids, offsets), reference(ids, offsets))
    assert all(int(c.pins.sum()) == 0 for c in tiered.caches)


def test_cache_smaller_than_a_batch_names_table_and_sizes(tmp_path: pathlib.Path) -> None:
    tiered = TieredFusedEmbeddingBag(
        specs(), OPTIMIZERS[0], TieredOptions(store_dir=str(tmp_path), cache_rows=3)
    )
    ids = torch.tensor([0, 1, 2, 3, 1])
    with pytest.raises(CacheTooSmallError, match=r"table 'a'.*4 distinct rows.*holds 3 rows"):
        tiered(ids, torch.tensor([0, 5]))


def test_prefetching_more_than_the_cache_holds_is_refused(tmp_path: pathlib.Path) -> None:
    tiered = TieredFusedEmbeddingBag(
        specs(), OPTIMIZERS[0], TieredOptions(store_dir=str(tmp_path), cache_rows=4)
    )
    tiered.prefetch(torch.tensor([0, 1, 2]))
    with pytest.raises(CacheFullError, match=r"table 'a'.*pinned by in-flight batches"):
        tiered.prefetch(torch.tensor([5, 6]))


def test_store_of_another_layout_is_refused(tmp_path: pathlib.Path) -> None:
    TieredFusedEmbeddingBag(specs(), OPTIMIZERS[1], TieredOptions(store_dir=str(tmp_path)))
    other = [FusedTableSpec(name="a", num_rows=40, dim=8)]
    with pytest.raises(
        StoreLayoutError, match=r"table 'a'.*dim: this table has 8, the store has 4"
    ):
        TieredFusedEmbeddingBag(other, OPTIMIZERS[1], TieredOptions(store_dir=str(tmp_path)))
    # Same table, another optimizer: its state layout differs.
    with pytest.raises(StoreLayoutError, match="state: this table has"):
        TieredFusedEmbeddingBag(specs(), OPTIMIZERS[0], TieredOptions(store_dir=str(tmp_path)))


def test_a_file_that_is_not_a_store_is_refused(tmp_path: pathlib.Path) -> None:
    (tmp_path / "a.tier").write_bytes(b"not a store")
    with pytest.raises(StoreLayoutError, match="is not a shardrec tiered store"):
        TieredFusedEmbeddingBag(specs(), OPTIMIZERS[0], TieredOptions(store_dir=str(tmp_path)))


def test_unusable_store_directory_is_refused_with_bytes_needed(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreSpaceError, match=r"table 'a'.*cannot create.*needs \d+ bytes"):
        TieredFusedEmbeddingBag(specs(), OPTIMIZERS[0], TieredOptions(store_dir=str(blocker / "x")))
    huge = [FusedTableSpec(name="huge", num_rows=1 << 45, dim=DIM)]
    need = 4096 + (1 << 45) * DIM * 4
    with pytest.raises(StoreSpaceError, match=rf"table 'huge'.*needs {need} bytes"):
        TieredFusedEmbeddingBag(
            huge, OPTIMIZERS[0], TieredOptions(store_dir=str(tmp_path), cache_rows=4)
        )
    assert not os.path.exists(tmp_path / "huge.tier")


def test_empty_batch_and_released_pins(tmp_path: pathlib.Path) -> None:
    tiered = TieredFusedEmbeddingBag(
        specs(), OPTIMIZERS[2], TieredOptions(store_dir=str(tmp_path), cache_rows=4)
    )
    empty = tiered(torch.zeros(0, dtype=torch.int64), torch.zeros(3, dtype=torch.int64))
    assert torch.equal(empty, torch.zeros(2, DIM))
    empty.sum().backward()
    # A forward whose backward never runs keeps its rows; release_pins frees them.
    tiered(torch.tensor([0, 1, 2, 3]), torch.tensor([0, 4]))
    with pytest.raises(CacheFullError):
        tiered(torch.tensor([4, 5]), torch.tensor([0, 2]))
    tiered.release_pins()
    out = tiered(torch.tensor([4, 5]), torch.tensor([0, 2]))
    out.sum().backward()
    assert all(int(c.pins.sum()) == 0 for c in tiered.caches)


@pytest.mark.parametrize("seed", range(4))
def test_random_caches_and_schedules_equal_in_memory(tmp_path: pathlib.Path, seed: int) -> None:
    """Random cache size (one or two batches' rows up to the table), policy, prefetch or not,
    per step: the weights stay those of the in-memory table."""
    g = seeded_generator("tiered-random", seed)
    data = batches(weighted=bool(seed % 2))
    smallest = min_cache_rows(data)
    prefetch = bool(torch.randint(0, 2, (1,), generator=g))
    low = smallest * (2 if prefetch else 1)
    rows = int(torch.randint(low, max(ROWS.values()) + 1, (1,), generator=g))
    policy = [CachePolicy.LRU, CachePolicy.LFU][seed % 2]
    spec = OPTIMIZERS[seed % len(OPTIMIZERS)]
    reference = BatchedFusedEmbeddingBag(specs(), spec)
    options = TieredOptions(store_dir=str(tmp_path), cache_rows=rows, policy=policy)
    tiered = TieredFusedEmbeddingBag(specs(), spec, options)
    train(reference, data, prefetch=False)
    train(tiered, data, prefetch=prefetch, background=bool(seed // 2))
    for name, weight in zip(ROWS, reference.split_embedding_weights(), strict=True):
        assert torch.equal(tiered.read_table(name)[0], weight.detach()), (name, rows, policy)


def test_rows_of_an_in_flight_batch_are_never_evicted(tmp_path: pathlib.Path) -> None:
    spec = OPTIMIZERS[2]
    tiered = TieredFusedEmbeddingBag(
        specs(), spec, TieredOptions(store_dir=str(tmp_path), cache_rows=4)
    )
    reference = BatchedFusedEmbeddingBag(specs(), spec)
    first, second = torch.tensor([0, 1, 2]), torch.tensor([3, 4, 5, 6])
    out = tiered(first, torch.tensor([0, 3]))
    cache = tiered.caches[0]
    held = cache.map.find(first)
    # One free slot, three pinned: a prefetch needing four rows must not take them.
    with pytest.raises(CacheFullError, match="3 pinned"):
        tiered.prefetch(second)
    assert torch.equal(cache.map.find(first), held)
    tiered.prefetch(torch.tensor([7]))  # the free slot
    out.sum().backward()
    reference(first, torch.tensor([0, 3])).sum().backward()
    with torch.no_grad():
        tiered(torch.tensor([7]), torch.tensor([0, 1]))  # consumes the prefetch of row 7
    tiered.prefetch(second)  # now the batch's rows may go (written back first)
    assert bool((cache.map.find(first) < 0).all())
    weight, _ = tiered.read_table("a")
    assert torch.equal(weight, reference.split_embedding_weights()[0].detach())
