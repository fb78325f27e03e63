"""A raw-id tiered table (`RawIdTieredEmbeddingBag`) with its rows in RocksDB (and in RAM):

- against a Python dict model of the table (id -> row, initial row drawn on first sight, SGD
  applied per id): random raw int64 id streams with negatives and the int64 extremes, caches
  of one batch's distinct ids (evicting every step), ids that leave the cache and come back;
- against the same table held in memory (`BatchedFusedEmbeddingBag` on ids mapped to rows up
  front, initial rows from `initial_rows`) for training exactness, SGD and rowwise Adagrad,
  LRU and LFU, with and without prefetch;
- its refusals (cache too small, float ids, policies it cannot honour, a store of another
  layout).
"""

from __future__ import annotations

import gc
import pathlib

import pytest
import torch

from shardrec_embedding import EmbeddingBagConfig
from shardrec_embedding.dynamic import DynamicTableConfig
from shardrec_embedding.dynamic.reset import table_seed
from shardrec_embedding.fused import BatchedFusedEmbeddingBag, FusedTableSpec
from shardrec_kvstore import RocksRowStore, RowLayout, StoreAccessError, StoreLayoutError
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_testing import random_lengths, seeded_generator
from shardrec_tiered import (
    CachePolicy,
    CacheTooSmallError,
    RawIdTieredEmbeddingBag,
    StoreLayout,
    TieredOptions,
    initial_rows,
)

DIM = 4
BAGS = 6
STEPS = 8
LR = 0.1
EXTREMES = [-(2**63), 2**63 - 1, -1, 0]


def config(**kw: object) -> EmbeddingBagConfig:
    return EmbeddingBagConfig(
        name="raw", num_embeddings=1000, embedding_dim=DIM, feature_names=["f"], **kw
    )  # type: ignore[arg-type]  # keyword overrides


def rocks(directory: pathlib.Path):  # type: ignore[no-untyped-def]  # a store factory
    def open_store(layout: StoreLayout) -> RocksRowStore:
        return RocksRowStore(
            str(directory),
            RowLayout(table=layout.table, dim=layout.dim, state=layout.state),
            block_cache_bytes=1 << 20,
            write_buffer_bytes=1 << 20,
        )

    return open_store


def stream(seed: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Batches of raw ids from a pool of 40 (negatives, extremes); each step draws from a
    window that moves by 7 ids, so a minimal cache evicts every step and ids return after
    they left it. Also the bags' loss coefficients."""
    g = seeded_generator("raw-pool", seed)
    pool = torch.cat(
        [torch.randint(-(2**62), 2**62, (36,), generator=g) * 2, torch.tensor(EXTREMES)]
    )
    out = []
    for step in range(STEPS):
        g = seeded_generator("raw-batch", seed, step)
        lengths = random_lengths(BAGS, 4, g)
        n = int(lengths.sum())
        ids = pool[(torch.randint(0, 10, (n,), generator=g) + 7 * step) % pool.numel()]
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        coefficients = torch.randn(BAGS, DIM, generator=g)
        out.append((ids, offsets, coefficients))
    return out


def min_cache(data: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> int:
    return max(int(ids.unique().numel()) for ids, _, _ in data)


class DictTable:
    """The reference: a dict id -> weight row; an id's row is its initial row until updated;
    SGD adds every occurrence's gradient, then steps each touched id once."""

    def __init__(self, table: EmbeddingBagConfig, seed: int) -> None:
        self.rows: dict[int, torch.Tensor] = {}
        self.table, self.seed = table, seed

    def row(self, key: int) -> torch.Tensor:
        if key not in self.rows:
            self.rows[key] = initial_rows(
                torch.tensor([key]),
                DIM,
                seed=self.seed,
                low=self.table.get_weight_init_min(),
                high=self.table.get_weight_init_max(),
            )[0]
        return self.rows[key]

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(offsets.numel() - 1, DIM)
        for b in range(offsets.numel() - 1):
            for key in ids[offsets[b] : offsets[b + 1]].tolist():
                out[b] += self.row(key)
        return out

    def sgd(self, ids: torch.Tensor, offsets: torch.Tensor, coefficients: torch.Tensor) -> None:
        grad: dict[int, torch.Tensor] = {}
        for b in range(offsets.numel() - 1):
            for key in ids[offsets[b] : offsets[b + 1]].tolist():
                grad[key] = grad.get(key, torch.zeros(DIM)) + coefficients[b]
        for key, g in grad.items():
            self.rows[key] = self.row(key) - LR * g


@pytest.mark.parametrize("where", ["rocks", "memory"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_a_dict_model(tmp_path: pathlib.Path, where: str, seed: int) -> None:
    data = stream(seed)
    table = config(dynamic=DynamicTableConfig(init_seed=seed))
    module = RawIdTieredEmbeddingBag(
        table,
        {"optimizer": "sgd", "learning_rate": LR},
        TieredOptions(cache_rows=min_cache(data)),
        rocks(tmp_path) if where == "rocks" else None,
    )
    model = DictTable(table, table_seed(seed, "raw"))
    for ids, offsets, coefficients in data:
        out = module(ids, offsets)
        torch.testing.assert_close(out.detach(), model.forward(ids, offsets))
        (out * coefficients).sum().backward()
        model.sgd(ids, offsets, coefficients)
    stats = module.stats()["raw"]
    assert stats["misses"] > len(model.rows)  # ids were evicted and read back
    keys = torch.tensor(sorted(model.rows))
    weight, _ = module.read_rows(keys)
    torch.testing.assert_close(weight, torch.stack([model.rows[k] for k in keys.tolist()]))
    # an id never seen reads its initial row, in evaluation too
    with torch.no_grad():
        fresh = module(torch.tensor([12345]), torch.tensor([0, 1]))
    torch.testing.assert_close(fresh, model.forward(torch.tensor([12345]), torch.tensor([0, 1])))


def reference(
    table: EmbeddingBagConfig, keys: torch.Tensor, spec: FusedOptimSpec
) -> BatchedFusedEmbeddingBag:
    seed = table_seed(table.dynamic.init_seed if table.dynamic else 0, table.name)
    weight = initial_rows(
        keys, DIM, seed=seed, low=table.get_weight_init_min(), high=table.get_weight_init_max()
    )
    return BatchedFusedEmbeddingBag(
        [FusedTableSpec(name=table.name, num_rows=keys.numel(), dim=DIM, weight=weight)], spec
    )


@pytest.mark.parametrize(
    ("optimizer", "policy", "prefetch"),
    [
        (EmbOptimType.EXACT_SGD, CachePolicy.LRU, False),
        (EmbOptimType.EXACT_ROWWISE_ADAGRAD, CachePolicy.LRU, False),
        (EmbOptimType.EXACT_ROWWISE_ADAGRAD, CachePolicy.LFU, False),
        (EmbOptimType.EXACT_ROWWISE_ADAGRAD, CachePolicy.LRU, True),
    ],
)
def test_trains_exactly_as_in_memory(
    tmp_path: pathlib.Path, optimizer: EmbOptimType, policy: CachePolicy, prefetch: bool
) -> None:
    data = stream(5)
    spec = FusedOptimSpec(optimizer=optimizer, learning_rate=LR)
    table = config()
    # a prefetched batch and the batch in flight must both fit
    rows = min_cache(data) * (2 if prefetch else 1)
    module = RawIdTieredEmbeddingBag(
        table, spec, TieredOptions(cache_rows=rows, policy=policy), rocks(tmp_path)
    )
    keys = torch.cat([ids for ids, _, _ in data]).unique()
    memory = reference(table, keys, spec)
    for i, (ids, offsets, coefficients) in enumerate(data):
        if prefetch and i == 0:
            module.prefetch(ids)
        out = module(ids, offsets)
        if prefetch and i + 1 < len(data):
            module.prefetch(data[i + 1][0], background=True)
        expected = memory(torch.searchsorted(keys, ids), offsets)
        assert torch.equal(out.detach(), expected.detach())
        (out * coefficients).sum().backward()
        (expected * coefficients).sum().backward()
    weight, state = module.read_rows(keys)
    # bit for bit: the same kernels update the same rows in the same order
    assert torch.equal(weight, memory.split_embedding_weights()[0].detach())
    for name, tensor in memory.optimizer_state().items():
        assert torch.equal(state[name], tensor), name
    assert int(module.cache.pins.sum()) == 0, "pins left after backward"


def test_rows_outlive_the_module_store_of_another_layout(tmp_path: pathlib.Path) -> None:
    table = config()
    RawIdTieredEmbeddingBag(
        table, {"optimizer": "sgd"}, TieredOptions(cache_rows=4), rocks(tmp_path)
    )
    gc.collect()  # the module (a reference cycle with its optimizer view) closes its store
    with pytest.raises(StoreLayoutError, match=r"another layout.*state: this table has"):
        RawIdTieredEmbeddingBag(
            table,
            {"optimizer": "exact_row_wise_adagrad"},
            TieredOptions(cache_rows=4),
            rocks(tmp_path),
        )


def test_refusals(tmp_path: pathlib.Path) -> None:
    module = RawIdTieredEmbeddingBag(
        config(), {"optimizer": "sgd"}, TieredOptions(cache_rows=2), rocks(tmp_path)
    )
    with pytest.raises(CacheTooSmallError, match=r"table 'raw': a batch touches 3 distinct"):
        module(torch.tensor([-5, 7, 2**40]), torch.tensor([0, 3]))
    with pytest.raises(TypeError, match="raw ids must be an integer tensor"):
        module(torch.tensor([1.0]), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="admits every id"):
        RawIdTieredEmbeddingBag(
            config(dynamic=DynamicTableConfig(admission="THRESHOLD", admission_threshold=2)),
            {"optimizer": "sgd"},
            TieredOptions(cache_rows=2),
        )
    with pytest.raises(ValueError, match="never forgets an id"):
        RawIdTieredEmbeddingBag(
            config(dynamic=DynamicTableConfig(eviction="TTL", ttl_steps=3)),
            {"optimizer": "sgd"},
            TieredOptions(cache_rows=2),
        )
    with pytest.raises(ValueError, match="init_fn is not supported"):
        RawIdTieredEmbeddingBag(
            config(init_fn=torch.nn.init.zeros_), {"optimizer": "sgd"}, TieredOptions(cache_rows=2)
        )
    with pytest.raises(TypeError, match="takes an EmbeddingBagConfig, got FusedTableSpec"):
        RawIdTieredEmbeddingBag(
            FusedTableSpec(name="raw", num_rows=4, dim=DIM),  # type: ignore[arg-type]  # the refusal under test
            {"optimizer": "sgd"},
            TieredOptions(cache_rows=2),
        )
    with pytest.raises(NotImplementedError, match="raw-id table"):
        module.read_table("raw")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(StoreAccessError, match="table 'raw': cannot create store directory"):
        RawIdTieredEmbeddingBag(
            config(), {"optimizer": "sgd"}, TieredOptions(cache_rows=2), rocks(blocker / "s")
        )
