"""Reset rows of freed slots: the counter-based uniform initializer (`dynamic/reset.py`), its
native writer and torch twin against the one-value-at-a-time model
(`_dynamic_model.reset_row`), and the rows a collection's evicted slots get."""

from __future__ import annotations

import sys

import pytest
import torch
from _dynamic_model import reset_row

from shardrec_embedding.configs import EmbeddingBagConfig
from shardrec_embedding.dynamic import DynamicTableConfig
from shardrec_embedding.dynamic.id_map import idmap_native_available
from shardrec_embedding.dynamic.memory import HUGE_PAGE, huge_empty
from shardrec_embedding.dynamic.reset import fill_rows_, init_rows_, table_seed, uniform_rows
from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.fused import FusedEmbeddingBagCollection
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec

native = pytest.mark.skipif(not idmap_native_available(), reason="no C compiler")


@pytest.mark.parametrize("dim", [1, 7, 64])
@pytest.mark.parametrize(("low", "high"), [(-0.1, 0.1), (0.5, 0.5), (-3e-4, 2.0)])
def test_torch_twin_matches_model(dim: int, low: float, high: float) -> None:
    slots = torch.tensor([0, 5, 3, 99_999, 2**40])
    seed = table_seed(11, "t3")
    for generation in (0, 1, 2**33 + 7):
        rows = uniform_rows(
            slots,
            dim,
            seed,
            generation,
            low,
            float(torch.tensor(high, dtype=torch.float32) - torch.tensor(low, dtype=torch.float32)),
        )
        expected = [reset_row(11, "t3", s, generation, dim, low, high) for s in slots.tolist()]
        assert rows.dtype is torch.float32
        assert rows.tolist() == expected


@native
@pytest.mark.parametrize("dim", [1, 7, 64])
@pytest.mark.parametrize("threads", [1, 2])
def test_native_writer_equals_torch_twin(dim: int, threads: int) -> None:
    gen = torch.Generator().manual_seed(dim)
    slots = torch.randperm(5000, generator=gen)[:3000]
    seed = table_seed(0, "table")
    weight = torch.full((5010, dim + 3), 9.0)[:, 1 : dim + 1]  # strided rows, offset 10
    other = torch.full((5010, dim), 9.0)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        init_rows_(weight, slots, row_offset=10, seed=seed, generation=42, low=-0.05, high=0.05)
    finally:
        torch.set_num_threads(old)
    # the torch twin, forced (a float64 weight never takes the native writer)
    other64 = other.double()
    init_rows_(other64, slots, row_offset=10, seed=seed, generation=42, low=-0.05, high=0.05)
    assert torch.equal(weight[slots + 10], other64[slots + 10].float())
    untouched = torch.ones(5010, dtype=torch.bool)
    untouched[slots + 10] = False
    assert bool((weight[untouched] == 9.0).all())
    assert float(weight[slots + 10].min()) >= -0.05 and float(weight[slots + 10].max()) < 0.05


def test_rows_depend_on_seed_slot_generation_only() -> None:
    slots = torch.arange(64)
    s = table_seed(0, "t")
    torch.manual_seed(1)
    a = uniform_rows(slots, 16, s, 3, -1.0, 2.0)
    torch.manual_seed(2)
    assert torch.equal(a, uniform_rows(slots, 16, s, 3, -1.0, 2.0))  # not torch's RNG
    assert not torch.equal(a, uniform_rows(slots, 16, s, 4, -1.0, 2.0))
    assert not torch.equal(a, uniform_rows(slots, 16, table_seed(0, "u"), 3, -1.0, 2.0))
    assert not torch.equal(a, uniform_rows(slots, 16, table_seed(1, "t"), 3, -1.0, 2.0))
    assert torch.unique(a).numel() > 1000  # distinct draws across slots and columns
    # a row's values do not depend on the other slots reset with it
    assert torch.equal(a[5:6], uniform_rows(slots[5:6], 16, s, 3, -1.0, 2.0))


def _tables(init_fn: object = None, init_seed: int = 0) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name="t",
            num_embeddings=2,
            embedding_dim=8,
            feature_names=["f"],
            init_fn=init_fn,  # type: ignore[arg-type]
            dynamic=DynamicTableConfig(eviction="LRU", scan_per_step=1, init_seed=init_seed),
        )
    ]


def _one(ids: list[int]) -> KeyedJaggedTensor:
    return KeyedJaggedTensor(keys=["f"], values=torch.tensor(ids), lengths=torch.tensor([len(ids)]))


@pytest.mark.parametrize("fused", [True, False])
def test_evicted_slot_reads_the_counter_based_row(fused: bool) -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.5)
    m = (
        FusedEmbeddingBagCollection(_tables(init_seed=5), spec)
        if fused
        else (EmbeddingBagCollection(_tables(init_seed=5)))
    )
    for ids in ([10], [20]):
        m(_one(ids)).values().sum().backward()
    out = m(_one([30])).values()  # step 3 evicts 10 (slot 0): the row of (slot 0, gen 3)
    bound = 1.0 / 2**0.5  # the default initializer: uniform(-sqrt(1/n), sqrt(1/n))
    expected = torch.tensor([reset_row(5, "t", 0, 3, 8, -bound, bound)])
    assert m.dynamic_tables.table("t").find(torch.tensor([10, 30])).tolist() == [-1, 0]
    assert torch.equal(out.detach(), expected)


def test_custom_init_fn_is_still_called() -> None:
    def init(w: torch.Tensor) -> None:
        torch.nn.init.constant_(w, 0.25)

    m = EmbeddingBagCollection(_tables(init_fn=init))
    for ids in ([10], [20]):
        m(_one(ids))
    assert torch.equal(m(_one([30])).values(), torch.full((1, 8), 0.25))


@native
@pytest.mark.parametrize("spread", [3, 2**30])  # counting sort; too wide a range: torch sort
@pytest.mark.parametrize("eviction", ["LRU", "TTL"])
def test_native_victims_equal_torch_victims(spread: int, eviction: str) -> None:
    """The native LRU / TTL selection picks the torch selection's slots in its order, also
    when `last_seen` spans more steps than its counting sort takes (it hands back)."""
    from shardrec_embedding.dynamic.table import DynamicTable

    fields: dict[str, object] = {"eviction": eviction, "scan_per_step": 16}
    if eviction == "TTL":
        fields["ttl_steps"] = 1
    cfg = DynamicTableConfig(**fields)  # type: ignore[arg-type]
    cfg.validate("t", 64)
    gen = torch.Generator().manual_seed(spread)
    seen = torch.randint(0, spread, (64,), generator=gen) * (2**31 // spread)
    tables = [DynamicTable("t", cfg, 64, 2, backend=b) for b in ("native", "torch")]
    for t in tables:
        t.load_items(torch.arange(64) + 1000, torch.arange(64), last_seen=seen)
        t._counters["steps"] = 2**31 + 5  # every loaded row is older than the next step
    for step in range(6):
        ids = torch.randint(0, 40, (24,), generator=gen) + 100 * step
        a, b = (t.map_ids(ids, training=True) for t in tables)
        assert torch.equal(a, b)
    assert tables[0].stats() == tables[1].stats()
    assert tables[0].stats()["evictions"] > 0


@pytest.mark.parametrize("shape", [(50,), (50, 3), (50, 8)])
def test_fill_rows_equals_index_fill(shape: tuple[int, ...]) -> None:
    """The optimizer-state reset: the native pass (contiguous float32) and the index_fill_
    fallback (a column-sliced view, a float64 tensor) write the same rows, and only them."""
    gen = torch.Generator().manual_seed(3)
    slots = torch.tensor([0, 7, 7, 19, 3, 29])
    for dtype, sliced in ((torch.float32, False), (torch.float32, True), (torch.float64, False)):
        full = torch.rand(shape[0], shape[1] + 1 if len(shape) > 1 else 1, generator=gen)
        state = full.to(dtype)
        state = state[:, :-1] if len(shape) > 1 else state[:, 0].contiguous()
        if not sliced:
            state = state.contiguous()
        expected = state.clone().index_fill_(0, slots + 20, 0.25)
        fill_rows_(state, slots, row_offset=20, value=0.25)
        assert torch.equal(state, expected)
    empty = torch.ones(4)
    fill_rows_(empty, torch.empty(0, dtype=torch.int64), row_offset=0, value=0.0)
    assert torch.equal(empty, torch.ones(4))


def test_huge_empty_is_an_aligned_tensor_of_the_size_asked() -> None:
    """The id map's storage (memory.py): the asked size and dtype, writable, 2 MiB aligned
    when large (huge pages are advice only: the contents are the same either way)."""
    for numel in (3, 1 << 20):
        t = huge_empty(numel, torch.int64)
        assert t.shape == (numel,) and t.dtype is torch.int64 and t.is_contiguous()
        t.fill_(-1)
        assert int(t.sum()) == -numel
        if numel * 8 >= HUGE_PAGE and sys.platform.startswith("linux"):
            assert t.data_ptr() % HUGE_PAGE == 0


@native
@pytest.mark.parametrize("spread", [1, 5, 63, 64, 200])  # ages all below 64 / some above
@pytest.mark.parametrize("eviction", ["LRU", "TTL"])
def test_native_recent_age_victims_equal_torch_victims(spread: int, eviction: str) -> None:
    """The native selection's two-pass form (every candidate seen in the last 64 steps: a
    fixed age histogram) and its fallback pick the torch selection's slots in its order, with
    ties of age broken by position, for evictions of a few slots up to all of them."""
    from shardrec_embedding.dynamic.table import DynamicTable

    fields: dict[str, object] = {"eviction": eviction, "scan_per_step": 16}
    if eviction == "TTL":
        fields["ttl_steps"] = 2
    cfg = DynamicTableConfig(**fields)  # type: ignore[arg-type]
    cfg.validate("t", 256)
    gen = torch.Generator().manual_seed(spread)
    seen = 1000 - torch.randint(0, spread, (256,), generator=gen)
    tables = [DynamicTable("t", cfg, 256, 2, backend=b) for b in ("native", "torch")]
    for t in tables:
        t.load_items(torch.arange(256) + 10**6, torch.arange(256), last_seen=seen)
        t._counters["steps"] = 1000
    for step, new in enumerate([3, 40, 1, 120, 256, 7]):
        old = torch.randint(0, 256, (10,), generator=gen) + 10**6
        ids = torch.cat([old, torch.arange(new) + 10**7 * (step + 1)])
        a, b = (t.map_ids(ids, training=True) for t in tables)
        assert torch.equal(a, b)
        assert torch.equal(tables[0].slot_ids, tables[1].slot_ids)
    assert tables[0].stats() == tables[1].stats()
    assert tables[0].stats()["evictions"] > 0


@native
@pytest.mark.parametrize(("dim", "stride"), [(16, 16), (48, 48), (64, 64), (128, 128), (16, 20)])
@pytest.mark.parametrize(("low", "high"), [(-0.05, 0.05), (-3e-4, 2.0)])
def test_native_vector_rows_equal_torch_twin(
    dim: int, stride: int, low: float, high: float
) -> None:
    """Rows 64-byte aligned with a width of whole lines take the vector (AVX-512) writer where
    the CPU has it; stride 20 mixes aligned and unaligned rows. The same floats as the twin."""
    gen = torch.Generator().manual_seed(dim + stride)
    slots = torch.randperm(900, generator=gen)[:600]
    seed = table_seed(5, "wide")
    weight = torch.full((1000, stride), 9.0)[:, :dim]
    twin = torch.full((1000, dim), 9.0, dtype=torch.float64)
    for w in (weight, twin):
        init_rows_(w, slots, row_offset=7, seed=seed, generation=2**35 + 3, low=low, high=high)
    assert torch.equal(weight[slots + 7], twin[slots + 7].float())
    untouched = torch.ones(1000, dtype=torch.bool)
    untouched[slots + 7] = False
    assert bool((weight[untouched] == 9.0).all())
