"""`TieredFusedEmbeddingBag`: a fused pooled lookup whose tables live on disk behind a row cache.

The tiered twin of `shardrec_embedding.fused.BatchedFusedEmbeddingBag` (same arguments, same
group-row ids, same forward contract). Its tables share one packed cache, each table owning a
block of slots with its own `RowCache` and `FlatFileStore`:

```
cache weight (sum of slots, D)   [0, S0) table 0's slots   [S0, S0 + S1) table 1's ...
cache state  (same rows)         momentum1 / momentum2 of the cached rows
```

forward: the batch's distinct ids are admitted (missing rows read from the store, pinned),
ids become slots, and `FusedLookupFunction` looks up and, in backward, updates the cache rows
with the same fused kernels (`pooled_update`) an in-memory table uses; a hook on the output's
backward node releases the pins. `prefetch(ids)` admits and pins a batch ahead of its forward.
Where every table qualifies (native caches, mapped stores) a batch is admitted for all tables
in one native call (`TableBatch`, table_batch.py), else table by table.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from shardrec_embedding.batched_lookup import batched_embedding_bag
from shardrec_embedding.configs import EmbeddingBagConfig, PoolingType
from shardrec_embedding.fused.lookup import FusedLookupFunction
from shardrec_embedding.fused.tables import FusedTableSpec
from shardrec_optim import FusedOptimSpec, init_state, state_shapes
from shardrec_tiered.cache import RowCache
from shardrec_tiered.checkpoint import StoreSlice, TieredFusedOptimizer, is_streaming
from shardrec_tiered.layout import StoreLayout
from shardrec_tiered.options import TieredOptions
from shardrec_tiered.row_store import RowStore
from shardrec_tiered.store import FlatFileStore
from shardrec_tiered.table_batch import BatchPins, TableBatch

__all__ = ["TieredFusedEmbeddingBag", "TieredTable"]

INIT_CHUNK_BYTES = 64 << 20
"""Rows are initialized and written to the store in chunks of this size. A table of at most one
chunk is initialized whole, exactly as an in-memory table with the same seed."""

_Pins = list[tuple[RowCache, Tensor]] | BatchPins
"""The pins a batch holds: per table (cache, slots), or all tables' at once (`TableBatch`)."""


class _Prefetched:
    """A prefetched batch: its group rows `ids`, their slots, and the pins holding them."""

    __slots__ = ("ids", "pins", "slots")

    def __init__(self, ids: Tensor, slots: Tensor, pins: _Pins) -> None:
        self.ids, self.slots, self.pins = ids, slots, pins

    def serves(self, ids: Tensor) -> bool:
        """Whether a forward of `ids` can use these slots as they are (the same ids)."""
        return ids.shape == self.ids.shape and torch.equal(ids, self.ids)


class TieredTable(nn.Module):
    """Stands for one tiered table among a module's tables. It holds no Parameter: the rows are
    in the store and the cache. Its state_dict entry `weight` is read from the store (the whole
    table as a tensor; a `StoreSlice` inside `streaming_state_dict()`), and loading one writes
    it into the store (checkpoint.py)."""

    def __init__(self, owner: TieredFusedEmbeddingBag, index: int) -> None:
        super().__init__()
        spec = owner.table_specs[index]
        self.name, self.rows, self.dim = spec.name, spec.num_rows, spec.dim
        self._owner = weakref.ref(owner)  # not a submodule: the owner holds this one
        self._index = index
        self._register_state_dict_hook(_save_weight)  # type: ignore[no-untyped-call]  # torch leaves it untyped

    def owner(self) -> TieredFusedEmbeddingBag:
        owner = self._owner()
        if owner is None:
            raise RuntimeError(f"tiered table {self.name!r}: its lookup module is gone")
        return owner

    def weight_slice(self) -> StoreSlice:
        return StoreSlice.local(self.owner(), self._index, 0, self.dim, vector=False)

    def _load_from_state_dict(
        self,
        state_dict: Mapping[str, Any],
        prefix: str,
        local_metadata: object,
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        key = prefix + "weight"
        if key not in state_dict:
            missing_keys.append(key)
            return
        target = self.weight_slice()
        value = state_dict[key]
        if target.same_place(value):
            return  # a streaming load wrote it in place
        if isinstance(value, StoreSlice):
            value = value.read()
        if not isinstance(value, Tensor) or tuple(value.shape) != (self.rows, self.dim):
            shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            error_msgs.append(
                f"size mismatch for {key}: copying a param with shape {shape} from checkpoint, "
                f"the shape in current model is {(self.rows, self.dim)} (tiered table "
                f"{self.name!r})"
            )
            return
        target.write(value)

    def extra_repr(self) -> str:
        return f"{self.name!r}, rows={self.rows}, dim={self.dim} (tiered)"


def _save_weight(
    module: TieredTable, state_dict: dict[str, object], prefix: str, local_metadata: object
) -> None:
    """state_dict hook: the table's weight, read from the store (a StoreSlice when streaming)."""
    view = module.weight_slice()
    state_dict[prefix + "weight"] = view if is_streaming() else view.read()


class TieredFusedEmbeddingBag(nn.Module):
    """Pooled lookup over tiered tables sharing (dim, pooling); backward updates cache rows.

    Args:
        tables: `FusedTableSpec`s or `EmbeddingBagConfig`s, equal `dim` and `pooling`.
        optimizer: `FusedOptimSpec` (or `fused_params`).
        options: `TieredOptions` for every table, or a mapping table name -> options.
    """

    def __init__(
        self,
        tables: Sequence[FusedTableSpec | EmbeddingBagConfig],
        optimizer: FusedOptimSpec | Mapping[str, object],
        options: TieredOptions | Mapping[str, TieredOptions],
    ) -> None:
        super().__init__()
        specs = [
            t if isinstance(t, FusedTableSpec) else FusedTableSpec.from_config(t) for t in tables
        ]
        if not specs:
            raise ValueError("TieredFusedEmbeddingBag needs at least one table")
        if len({(t.dim, t.pooling) for t in specs}) != 1:
            raise ValueError(
                f"tables of one tiered lookup share dim and pooling, got "
                f"{[(t.name, t.dim, t.pooling.value) for t in specs]}"
            )
        self.spec = (
            optimizer
            if isinstance(optimizer, FusedOptimSpec)
            else FusedOptimSpec.from_fused_params(optimizer)
        )
        self.table_specs = specs
        self.dim = specs[0].dim
        self.pooling: PoolingType = specs[0].pooling
        per_table = {
            t.name: options if isinstance(options, TieredOptions) else options[t.name]
            for t in specs
        }
        rows = [t.num_rows for t in specs]
        self.row_offsets = [sum(rows[:i]) for i in range(len(rows))]
        self.num_rows = sum(rows)
        slots = [per_table[t.name].slots_for(t.num_rows) for t in specs]
        self.slot_offsets = [sum(slots[:i]) for i in range(len(slots))]
        self.cache_weight = nn.Parameter(torch.zeros(sum(slots), self.dim))
        state = init_state(self.spec.optimizer, sum(slots), self.dim)
        self._state_names = list(state)
        for name, tensor in state.items():
            self.register_buffer(f"_cache_{name}", tensor, persistent=False)
        widths = tuple(
            (name, self.dim if len(shape) == 2 else 1)
            for name, shape in state_shapes(self.spec.optimizer, 1, self.dim).items()
        )
        self.caches: list[RowCache] = []
        pin_lock = threading.Lock()  # one for all the caches: a batch pins all in one call
        for t, lo, n in zip(specs, self.slot_offsets, slots, strict=True):
            opts = per_table[t.name]
            layout = StoreLayout(table=t.name, num_rows=t.num_rows, dim=self.dim, state=widths)
            store = self._open_store(t, layout, opts)
            cache_state = {k: v[lo : lo + n] for k, v in self.cache_state().items()}
            self.caches.append(
                RowCache(
                    store,
                    self.cache_weight.detach()[lo : lo + n],
                    cache_state,
                    opts.policy,
                    pin_lock=pin_lock,
                )
            )
        self._batch = TableBatch(self.caches, self.row_offsets, self.slot_offsets, pin_lock)
        self.tables = nn.ModuleDict({t.name: TieredTable(self, i) for i, t in enumerate(specs)})
        self._optimizer = TieredFusedOptimizer(self, self.spec)
        self.step = 0
        self._prefetched: deque[Future[_Prefetched]] = deque()
        self._lock = threading.Lock()  # admissions: a background prefetch vs a forward
        self._worker: ThreadPoolExecutor | None = None
        self.prefetch_seconds = 0.0
        """Time spent admitting prefetched batches (loading their rows)."""
        self.exposed_seconds = 0.0
        """Of it, time a forward or the caller waited for: a synchronous prefetch, or a forward
        blocked on a background prefetch that had not finished."""
        self.load_seconds = 0.0
        """Time forwards spent admitting their rows: loading the misses no prefetch had loaded
        (the whole load of a forward without prefetch), always exposed."""
        self._row_bounds = torch.tensor([*self.row_offsets, self.num_rows], dtype=torch.int64)

    def _save_to_state_dict(
        self, destination: dict[str, Any], prefix: str, keep_vars: bool
    ) -> None:
        """Nothing of its own: the cache is not state; the tables' rows are (`tables.<t>.weight`,
        the in-memory table's keys), saved by each `TieredTable`."""

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        """Nothing of its own to load (see `_save_to_state_dict`)."""

    @property
    def fused_optimizer(self) -> TieredFusedOptimizer:
        """The KeyedOptimizer view (checkpoint.py): state_dict, load_state_dict, and
        `param_groups[0]["lr"]`, the learning rate backward applies."""
        return self._optimizer

    @property
    def learning_rate(self) -> float:
        return self._optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: float) -> None:
        self._optimizer.param_groups[0]["lr"] = value

    def state_slices(self, table: int) -> dict[str, StoreSlice]:
        """Each optimizer state block of table `table` in its store, by state name."""
        out: dict[str, StoreSlice] = {}
        col = self.dim
        cache_state = self.cache_state()
        for name, width in self.caches[table].store.layout.state:
            vector = cache_state[name].dim() == 1
            out[name] = StoreSlice.local(self, table, col, width, vector=vector)
            col += width
        return out

    def read_columns(self, table: int, row: int, n: int, col: int, width: int) -> Tensor:
        """`(n, width)` store columns `[col, col + width)` of table `table`'s rows
        `[row, row + n)`, as they are now (dirty cached rows are written back first)."""
        self._drain()
        with self._lock:
            cache = self.caches[table]
            cache.write_back_dirty()
            rows = cache.store.read(np.arange(row, row + n, dtype=np.int64))
        return torch.from_numpy(np.ascontiguousarray(rows[:, col : col + width]))

    def write_columns(self, table: int, row: int, col: int, values: Tensor) -> None:
        """Write `(n, width)` `values` into store columns `[col, col + width)` of table
        `table`'s rows `[row, row + n)` (read, patch, write back); the cached copies of those
        rows are re-read, so the cache serves the written values."""
        values = values.detach().to(torch.float32).cpu()
        n, width = values.shape
        self._drain()
        with self._lock:
            cache = self.caches[table]
            cache.write_back_dirty()
            ids = np.arange(row, row + n, dtype=np.int64)
            rows = cache.store.read(ids)
            rows[:, col : col + width] = values.numpy()
            cache.store.write(ids, rows)
            cache.refresh(torch.from_numpy(ids))

    def cache_state(self) -> dict[str, Tensor]:
        return {name: getattr(self, f"_cache_{name}") for name in self._state_names}

    def _open_store(
        self, table: FusedTableSpec, layout: StoreLayout, options: TieredOptions
    ) -> RowStore:
        """The backing store of `table`, holding its initial rows (a subclass's hook)."""
        store = FlatFileStore(
            options.directory(), layout, threads=options.io_threads, mapped=options.mapped
        )
        _initialize(store, table)
        return store

    def _admit(self, ids: Tensor, *, pin: bool, count: bool = True) -> tuple[Tensor, _Pins]:
        """Slot of each group row in `ids` (loading misses), and the pins taken."""
        unique, inverse, counts = torch.unique(ids, return_inverse=True, return_counts=True)
        batched = self._batch.admit(unique, counts, pin=pin, count=count)
        if batched is not None:
            group, batch_pins = batched
            return group[inverse], batch_pins if batch_pins is not None else []
        bounds = torch.searchsorted(unique, self._row_bounds).tolist()
        slot_of_unique = torch.empty_like(unique)
        pins: list[tuple[RowCache, Tensor]] = []
        try:
            for i, cache in enumerate(self.caches):
                a, b = bounds[i], bounds[i + 1]
                if a == b:
                    continue
                local = unique[a:b] - self.row_offsets[i]
                slots = cache.admit(local, counts[a:b], pin=pin, count=count)
                slot_of_unique[a:b] = slots + self.slot_offsets[i]
                if pin:
                    pins.append((cache, slots))
        except BaseException:
            _release(pins)  # a refused batch holds nothing
            raise
        return slot_of_unique[inverse], pins

    def prefetch(self, ids: Tensor, *, background: bool = False) -> None:
        """Load the missing rows of a coming batch's group rows `ids` and hold them until that
        batch's forward (prefetches are consumed in order).

        background: load on a worker thread and return at once, so the reads overlap the
        current batch's backward; the next forward waits for it (its errors surface there).
        """
        self._check(ids)
        ids = ids.long().clone()  # the forward compares its ids with these (`serves`)
        if background:
            if self._worker is None:
                self._worker = ThreadPoolExecutor(
                    1, thread_name_prefix="tier-prefetch", initializer=_single_threaded
                )
            self._prefetched.append(self._worker.submit(self._timed_admit, ids))
            return
        done: Future[_Prefetched] = Future()
        start = time.perf_counter()
        done.set_result(self._timed_admit(ids))
        self.exposed_seconds += time.perf_counter() - start
        self._prefetched.append(done)

    def _timed_admit(self, ids: Tensor) -> _Prefetched:
        start = time.perf_counter()
        with self._lock:
            slots, pins = self._admit(ids, pin=True)
        self.prefetch_seconds += time.perf_counter() - start
        return _Prefetched(ids, slots, pins)

    def _next_prefetch(self) -> _Prefetched | None:
        """The pins of the oldest prefetch, waiting for it if it is still loading."""
        if not self._prefetched:
            return None
        pending = self._prefetched.popleft()
        if pending.done():
            return pending.result()
        start = time.perf_counter()
        try:
            return pending.result()
        finally:
            self.exposed_seconds += time.perf_counter() - start

    def _check(self, ids: Tensor) -> None:
        if ids.numel():
            low, high = torch.aminmax(ids)
            if int(low) < 0 or int(high) >= self.num_rows:
                bad = int(low) if int(low) < 0 else int(high)
                raise IndexError(
                    f"tiered lookup over {[t.name for t in self.table_specs]}: group row {bad} "
                    f"outside [0, {self.num_rows})"
                )

    def forward(
        self, ids: Tensor, offsets: Tensor, per_sample_weights: Tensor | None = None
    ) -> Tensor:
        """Pooled lookup of group rows `ids` (as `BatchedFusedEmbeddingBag.forward`)."""
        if per_sample_weights is not None and self.pooling is not PoolingType.SUM:
            raise ValueError(f"per_sample_weights need SUM pooling, got {self.pooling.value}")
        ids = ids.long()
        offsets = offsets.long()
        self._check(ids)
        train = torch.is_grad_enabled() and self.cache_weight.requires_grad
        prefetched = self._next_prefetch()
        if prefetched is not None and prefetched.serves(ids):
            # Its rows are loaded and pinned, so their slots stand: no admission, and no wait
            # for the lock a background prefetch of the next batch holds. The prefetch's pins
            # become this forward's (released by its backward).
            slots, pins = prefetched.slots, prefetched.pins
            if train:
                _mark_dirty(pins)
            else:
                _release(pins)
                pins = []
        else:
            start = time.perf_counter()
            with self._lock:
                slots, pins = self._admit(ids, pin=train, count=prefetched is None)
                _mark_dirty(pins)
            self.load_seconds += time.perf_counter() - start
            if prefetched is not None:
                _release(prefetched.pins)
        if not train:
            return batched_embedding_bag(
                [self.cache_weight],
                slots,
                offsets,
                pooling=self.pooling,
                per_sample_weights=per_sample_weights,
            )
        out: Tensor = FusedLookupFunction.apply(  # type: ignore[no-untyped-call]  # torch leaves apply untyped
            slots,
            offsets,
            per_sample_weights,
            self.pooling,
            self._update_context,
            self.cache_weight,
        )
        node = out.grad_fn
        assert node is not None
        node.register_hook(lambda *_: _release(pins))
        return out

    def _update_context(self) -> tuple[Tensor, Mapping[str, Tensor], FusedOptimSpec, float, int]:
        self.step += 1
        return self.cache_weight, self.cache_state(), self.spec, self.learning_rate, self.step

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> nn.Module:
        result: nn.Module = super()._apply(fn, recurse)  # type: ignore[no-untyped-call]  # torch leaves _apply untyped
        state = self.cache_state()
        for cache, lo in zip(self.caches, self.slot_offsets, strict=True):
            hi = lo + cache.slots
            cache.weight = self.cache_weight.detach()[lo:hi]
            cache.state = {k: v[lo:hi] for k, v in state.items()}
        self._batch.invalidate()
        return result

    def release_pins(self) -> None:
        """Drop every pin: pending prefetches and forwards whose backward will never run (a
        forward with grad enabled holds its rows until its backward)."""
        self._drain()
        self._prefetched.clear()
        for cache in self.caches:
            cache.pins.zero_()

    def cancel_prefetches(self) -> None:
        """Drop the prefetches no forward will consume (a pipeline reset): wait for them and
        release their pins; the rows stay cached. Pins of forwards awaiting backward stay."""
        while self._prefetched:
            pending = self._prefetched.popleft()
            if pending.exception() is None:
                _release(pending.result().pins)

    @property
    def pending_prefetches(self) -> int:
        """Prefetches queued for forwards to come."""
        return len(self._prefetched)

    def _drain(self) -> None:
        """Wait for every background prefetch (their pins stay queued)."""
        for pending in self._prefetched:
            pending.exception()

    def flush(self) -> None:
        """Write every dirty cached row back to the stores and make them durable."""
        self._drain()
        with self._lock:
            for cache in self.caches:
                cache.flush()

    def read_table(self, name: str) -> tuple[Tensor, dict[str, Tensor]]:
        """Table `name`'s `(rows, dim)` weight and its optimizer state, read whole from the
        store after a flush (small tables: tests, conversions)."""
        i = [t.name for t in self.table_specs].index(name)
        rows = torch.from_numpy(self.caches[i].read_all())
        weight = rows[:, : self.dim]
        state: dict[str, Tensor] = {}
        col = self.dim
        for (k, w), v in zip(self.caches[i].store.layout.state, self._state_names, strict=True):
            assert k == v
            block = rows[:, col : col + w]
            state[k] = block if w > 1 or self.cache_state()[k].dim() == 2 else block.squeeze(1)
            col += w
        return weight, state

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per table: hits, misses, bytes read and written, cache rows; and the module's
        prefetch time, the part of it the caller waited for, and the forwards' own loading
        time (`load_seconds`) (all tables together)."""
        return {
            c.table: {
                "hits": c.hits,
                "misses": c.misses,
                "bytes_read": c.store.bytes_read,
                "bytes_written": c.store.bytes_written,
                "cache_rows": c.slots,
                "prefetch_seconds": self.prefetch_seconds,
                "exposed_seconds": self.exposed_seconds,
                "load_seconds": self.load_seconds,
            }
            for c in self.caches
        }

    def extra_repr(self) -> str:
        return (
            f"tables={[t.name for t in self.table_specs]}, dim={self.dim}, "
            f"cache_rows={[c.slots for c in self.caches]}, optimizer={self.spec.optimizer.name}"
        )


def _single_threaded() -> None:
    """The prefetch worker's torch ops (gathers and scatters of a batch's rows) run on one
    thread: a second intra-op pool (OpenMP, per thread) would compete with the compute's for
    the same cores while the forward and backward run (measured: docs/tiered.md)."""
    torch.set_num_threads(1)


def _release(pins: _Pins) -> None:
    if isinstance(pins, BatchPins):
        pins.release()
        return
    for cache, slots in pins:
        cache.unpin(slots)


def _mark_dirty(pins: _Pins) -> None:
    if isinstance(pins, BatchPins):
        pins.mark_dirty()
        return
    for cache, slots in pins:
        cache.mark_dirty(slots)


def _initialize(store: FlatFileStore, spec: FusedTableSpec) -> None:
    """Write `spec`'s initial weights and zero optimizer state to every row of `store`."""
    layout = store.layout
    chunk = max(1, INIT_CHUNK_BYTES // layout.row_bytes)
    for lo in range(0, layout.num_rows, chunk):
        n = min(chunk, layout.num_rows - lo)
        rows = np.zeros((n, layout.stride), dtype=np.float32)
        weight = torch.from_numpy(rows[:, : layout.dim])
        if n == layout.num_rows:
            spec.init_(weight)
        elif spec.weight is not None:
            weight.copy_(spec.weight[lo : lo + n])
        elif spec.init_fn is not None:
            spec.init_fn(weight)
        else:
            FusedTableSpec(
                name=spec.name, num_rows=spec.num_rows, dim=spec.dim, init_range=spec.init_range
            ).init_(weight)
        store.write(np.arange(lo, lo + n, dtype=np.int64), rows)
