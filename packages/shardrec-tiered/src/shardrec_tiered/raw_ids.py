"""Raw-id tiered tables: the rows of raw int64 ids in a key-value store, a row cache in memory.

`RawIdTieredEmbeddingBag` is the raw-id twin of `TieredFusedEmbeddingBag` for one table: its
ids are raw int64 values (the whole range, negatives included), the cache finds them through
the dynamic tables' hash map (`IdSlotMap`), and its backing store is a `KeyValueRows`
(`shardrec_kvstore.RocksRowStore` on disk, TorchRec's `ssd_virtual_table`; `MemoryRows` in
RAM). Nothing is ever lost: a row evicted from the cache is written back if it changed, and an
id that comes back reads its row back.

An id the store has never held reads its *initial row*, a pure function of the id:
`initial_rows` draws the table's uniform initializer `[weight_init_min, weight_init_max)` by
the dynamic tables' counter-based generator, keyed by `(table_seed(init_seed, name), id)`
(shardrec_embedding.dynamic.reset), and zero optimizer state. So the table needs no
initialization pass, an id first read in evaluation reads what training would have started
from, and an in-memory reference reproduces every row exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

import numpy as np
import torch
from torch import Tensor, nn

from shardrec_embedding.configs import EmbeddingBagConfig
from shardrec_embedding.dynamic import AdmissionPolicy, EvictionPolicy, IdMapBackend, IdSlotMap
from shardrec_embedding.dynamic.reset import table_seed, uniform_rows
from shardrec_embedding.fused.tables import FusedTableSpec
from shardrec_optim import FusedOptimSpec
from shardrec_tiered.cache import RowCache
from shardrec_tiered.checkpoint import TieredFusedOptimizer
from shardrec_tiered.layout import StoreLayout
from shardrec_tiered.lookup import TieredFusedEmbeddingBag, _Pins
from shardrec_tiered.options import TieredOptions
from shardrec_tiered.row_store import RowStore

__all__ = [
    "KeyValueRows",
    "MemoryRows",
    "RawIdRows",
    "RawIdTieredEmbeddingBag",
    "initial_rows",
]


class KeyValueRows(Protocol):
    """A raw-id row store: `(n, stride)` float32 rows keyed by int64 ids."""

    bytes_read: int
    bytes_written: int

    def get(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`(rows, found)`: rows of `ids` (anything where absent) and which are present."""
        ...

    def put(self, ids: np.ndarray, rows: np.ndarray) -> None: ...

    def ids(self, chunk: int = ...) -> Iterator[np.ndarray]:
        """Every id held, `chunk` at a time (a checkpoint's save iterates them)."""
        ...

    def clear(self) -> None:
        """Forget every row (a checkpoint's load replaces them)."""
        ...

    def flush(self) -> None: ...


class MemoryRows:
    """`KeyValueRows` in RAM (a dict of id -> row): TorchRec's `dram_virtual_table` tier, and
    a store for tests."""

    def __init__(self, stride: int) -> None:
        self.stride = stride
        self.rows: dict[int, np.ndarray] = {}
        self.bytes_read = 0
        self.bytes_written = 0

    def get(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = np.zeros((ids.size, self.stride), dtype=np.float32)
        found = np.zeros(ids.size, dtype=bool)
        for i, key in enumerate(ids.tolist()):
            row = self.rows.get(key)
            if row is not None:
                out[i], found[i] = row, True
        self.bytes_read += int(found.sum()) * self.stride * 4
        return out, found

    def put(self, ids: np.ndarray, rows: np.ndarray) -> None:
        for key, row in zip(ids.tolist(), np.array(rows, dtype=np.float32), strict=True):
            self.rows[key] = row
        self.bytes_written += rows.size * 4

    def ids(self, chunk: int = 1 << 16) -> Iterator[np.ndarray]:
        keys = np.array(sorted(self.rows), dtype=np.int64)
        for lo in range(0, keys.size, chunk):
            yield keys[lo : lo + chunk]

    def clear(self) -> None:
        self.rows.clear()

    def flush(self) -> None:
        pass


def initial_rows(ids: Tensor, dim: int, *, seed: int, low: float, high: float) -> Tensor:
    """`(n, dim)` float32 initial weights of raw `ids`: uniform in `[low, high)`, a pure
    function of `(seed, id)` (the module docstring; `seed` is `table_seed(init_seed, name)`)."""
    lo = torch.tensor(low, dtype=torch.float32)
    span = float(torch.tensor(high, dtype=torch.float32) - lo)
    return uniform_rows(ids.reshape(-1).long(), dim, seed, 0, float(lo), span)


class RawIdRows:
    """The `RowStore` of a raw-id table's cache: rows from `kv`, initial rows for ids `kv`
    does not hold (module docstring)."""

    def __init__(
        self, kv: KeyValueRows, layout: StoreLayout, *, seed: int, low: float, high: float
    ) -> None:
        self.kv = kv
        self.layout = layout
        self.seed, self.low, self.high = seed, low, high

    @property
    def bytes_read(self) -> int:
        return self.kv.bytes_read

    @property
    def bytes_written(self) -> int:
        return self.kv.bytes_written

    def read(self, ids: np.ndarray) -> np.ndarray:
        rows, found = self.kv.get(ids)
        if not found.all():
            rows = np.array(rows, dtype=np.float32)
            new = ~found
            rows[new] = 0.0
            fresh = initial_rows(
                torch.from_numpy(ids[new]),
                self.layout.dim,
                seed=self.seed,
                low=self.low,
                high=self.high,
            )
            rows[new, : self.layout.dim] = fresh.numpy()
        return rows

    def write(self, ids: np.ndarray, rows: np.ndarray) -> None:
        self.kv.put(ids, rows)

    def flush(self) -> None:
        self.kv.flush()


class RawIdTieredEmbeddingBag(TieredFusedEmbeddingBag):
    """Pooled lookup of one raw-id table whose rows live in a key-value store behind a cache.

    Args:
        table: the table (`num_embeddings`: the rows `options.load_factor` is a fraction of,
            i.e. the expected distinct ids; the store holds any number). Its `dynamic`
            config, if any, gives `init_seed`; admission must be ALWAYS and eviction not TTL
            (the store never forgets an id).
        optimizer: `FusedOptimSpec` (or `fused_params`).
        options: the cache (`cache_rows` or `load_factor` of `num_embeddings`, policy).
        store: called with the rows' `StoreLayout`, returns the table's `KeyValueRows`
            (e.g. a `shardrec_kvstore.RocksRowStore`); None: `MemoryRows` (RAM).
        id_map_backend: of the cache's `IdSlotMap`.

    `forward(ids, offsets, per_sample_weights)` takes raw int64 ids; `prefetch(ids)`,
    `flush()`, `stats()` as `TieredFusedEmbeddingBag`; `read_rows(ids)` reads rows back.
    """

    def __init__(
        self,
        table: EmbeddingBagConfig,
        optimizer: FusedOptimSpec | Mapping[str, object],
        options: TieredOptions,
        store: Callable[[StoreLayout], KeyValueRows] | None = None,
        *,
        id_map_backend: IdMapBackend = "auto",
    ) -> None:
        _check_table(table)
        dynamic = table.dynamic
        self.seed = table_seed(dynamic.init_seed if dynamic is not None else 0, table.name)
        self.init_range = (table.get_weight_init_min(), table.get_weight_init_max())
        self._kv_factory = store
        self._backend: IdMapBackend = id_map_backend
        spec = FusedTableSpec(
            name=table.name,
            num_rows=table.num_embeddings,
            dim=table.embedding_dim,
            pooling=table.pooling,
            init_range=self.init_range,
        )
        super().__init__([spec], optimizer, options)
        slots = self.caches[0].slots
        self.caches[0].map = IdSlotMap(
            1 << max(1, (2 * slots - 1).bit_length()), backend=self._backend
        )
        # Its rows have no range: the table's state is every stored id (raw_checkpoint.py).
        from shardrec_tiered.raw_checkpoint import RawIdTable  # it imports this module

        self.tables = nn.ModuleDict({table.name: RawIdTable(self)})
        self._optimizer = _RawIdOptimizer(self, self.spec)

    def _open_store(
        self, table: FusedTableSpec, layout: StoreLayout, options: TieredOptions
    ) -> RowStore:
        kv = MemoryRows(layout.stride) if self._kv_factory is None else self._kv_factory(layout)
        low, high = self.init_range
        return RawIdRows(kv, layout, seed=self.seed, low=low, high=high)

    @property
    def cache(self) -> RowCache:
        return self.caches[0]

    def _admit(self, ids: Tensor, *, pin: bool, count: bool = True) -> tuple[Tensor, _Pins]:
        unique, inverse, counts = torch.unique(ids, return_inverse=True, return_counts=True)
        slots = self.cache.admit(unique, counts, pin=pin, count=count)
        return slots[inverse], ([(self.cache, slots)] if pin else [])

    def _check(self, ids: Tensor) -> None:
        if ids.is_floating_point() or ids.is_complex() or ids.dtype is torch.bool:
            raise TypeError(
                f"table {self.table_specs[0].name!r}: raw ids must be an integer tensor, got "
                f"dtype {ids.dtype}; cast whole numbers with .long()"
            )

    def forward(
        self, ids: Tensor, offsets: Tensor, per_sample_weights: Tensor | None = None
    ) -> Tensor:
        """Pooled lookup of raw `ids` (any int64) in bags `offsets`."""
        self._check(ids)
        return super().forward(ids, offsets, per_sample_weights)

    def read_rows(self, ids: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """`(n, dim)` weights and the optimizer state of raw `ids` (distinct), as the store
        holds them after a flush (ids it never held: their initial rows)."""
        self._check(ids)
        self.flush()
        rows = torch.from_numpy(self.cache.store.read(ids.reshape(-1).long().numpy()))
        state: dict[str, Tensor] = {}
        col = self.dim
        for name, width in self.cache.store.layout.state:
            block = rows[:, col : col + width]
            state[name] = block if self.cache_state()[name].dim() == 2 else block.squeeze(1)
            col += width
        return rows[:, : self.dim], state

    def read_table(self, name: str) -> tuple[Tensor, dict[str, Tensor]]:
        raise NotImplementedError(
            f"table {name!r} is a raw-id table: it has no row range to read whole; use "
            "read_rows(ids)"
        )


class _RawIdOptimizer(TieredFusedOptimizer):
    """The fused optimizer view of a raw-id table: its learning rate; no state_dict of its
    own (the state of every id is in the module's state_dict, beside the id's weight)."""

    def state_dict(self) -> dict[str, object]:
        raise NotImplementedError(_OPTIMIZER_STATE)

    def load_state_dict(self, state_dict: Mapping[str, object]) -> None:
        raise NotImplementedError(_OPTIMIZER_STATE)


_OPTIMIZER_STATE = (
    "a raw-id tiered table's optimizer state is saved with each id's row in the module's "
    "state_dict (tables.<name>.tier.<rank>.rows, and .step): checkpoint the module; "
    "fused_optimizer.state_dict() has no row range to hold it by"
)


def _check_table(table: EmbeddingBagConfig) -> None:
    if not isinstance(table, EmbeddingBagConfig):
        raise TypeError(
            f"RawIdTieredEmbeddingBag takes an EmbeddingBagConfig, got {type(table).__name__}"
        )
    if table.init_fn is not None:
        raise ValueError(
            f"table {table.name!r}: a raw-id tiered table draws each id's initial row from "
            "its uniform initializer (weight_init_min / weight_init_max); init_fn is not "
            "supported"
        )
    dynamic = table.dynamic
    if dynamic is None:
        return
    if dynamic.admission is not AdmissionPolicy.ALWAYS:
        raise ValueError(
            f"table {table.name!r}: a raw-id tiered table admits every id (admission ALWAYS), "
            f"got admission {dynamic.admission.value}; drop the admission policy or keep the "
            "table in memory"
        )
    if dynamic.eviction is EvictionPolicy.TTL:
        raise ValueError(
            f"table {table.name!r}: a raw-id tiered table never forgets an id (its store "
            "keeps every row), got eviction TTL; use LRU or LFU (the cache's policy comes "
            "from CacheParams.algorithm)"
        )
