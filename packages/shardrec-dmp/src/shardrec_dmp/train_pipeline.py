"""`TrainPipelineSparseDist`: start batch i+1's input distribution while batch i computes.

One `progress()` call, for the batch `i` whose ids were sent during the previous call:

```
fetch batch i+1 -> copy to device -> input_dist(i+1) started (all-to-all in flight)
forward(i) with the ids already received for i -> backward(i) -> optimizer.step()
```

Every rank issues the same collectives in the same order as in the plain loop, only earlier,
and the arithmetic is unchanged, so the losses equal the plain loop's bit for bit.

What is in flight: the strategies' input dist launches its one id exchange
(`kjt_all_to_all(..., defer=True)`) and returns; its headers are read when batch i+1's inputs
are waited in forward(i+1), or, at the latest, by the next `input_dist` call of the same module
(the start of the next `progress`), which keeps every rank's exchange capacities in step. So
batch i+1's exchange travels under forward(i), backward(i) and the optimizer step. Its rare
extra exchanges (the ids beyond the learned capacity, the messages of an input error) are issued
at those same points, which every rank reaches in the same order (the call order above and the
model's forward order); an input error in batch i+1 raises on every rank where its inputs are
waited (forward(i+1), or the prefetch stage below).

Prefetch stage (sharded modules with tiered tables, `key_value`): once forward(i) has run,
batch i+1's received ids go to `prefetch(dist_input, background=True)`, so its missing rows
load from disk into the cache while backward(i) and the optimizer step run; rows held by
batch i (until its backward) and by batch i+1 (until its forward) are never evicted. The
input distribution of i+1 is then waited before backward(i) on every rank alike (its
collectives were all issued by `input_dist`). `PrefetchTrainPipelineSparseDist`
(`prefetch_pipeline.py`) runs one batch further ahead, so the reads overlap forward(i) too.

The sharded modules' own `forward` is bypassed for the duration of one forward: the pipeline
sets an instance attribute `forward` on each sharded module that runs `compute` and
`output_dist` on the input distribution already received, after checking that the module was
given the batch's own `sparse_features` object.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from shardrec_collectives import Awaitable, LazyAwaitable
from shardrec_dmp.model_parallel import DistributedModelParallel
from shardrec_jagged import KeyedJaggedTensor

__all__ = ["Pipelineable", "TrainPipelineSparseDist"]


@runtime_checkable
class Pipelineable(Protocol):
    """What the pipeline needs of a batch: `sparse_features` and a way to move to a device."""

    @property
    def sparse_features(self) -> KeyedJaggedTensor: ...

    def to(self, device: torch.device, non_blocking: bool = False) -> Pipelineable: ...


class _PhasedModule(Protocol):
    def input_dist(self, features: KeyedJaggedTensor) -> Awaitable[object]: ...
    def compute(self, dist_input: object) -> object: ...
    def output_dist(self, dist_input: object, local: object) -> LazyAwaitable[object]: ...


@runtime_checkable
class _Prefetching(Protocol):
    def has_tiered_tables(self) -> bool: ...
    def prefetch(self, dist_input: object, *, background: bool = False) -> None: ...
    def cancel_prefetches(self) -> None: ...


@dataclasses.dataclass
class _InFlight:
    batch: Pipelineable
    pending: dict[str, Awaitable[object]]
    prefetched: bool = False


class TrainPipelineSparseDist:
    """Runs `model(batch) -> (loss, output)`, `loss.backward()`, `optimizer.step()` per batch,
    with the next batch's id all-to-all already in flight.

    Requirements (checked; a violation raises `TypeError` / `ValueError` naming it):

    - `model` is a `DistributedModelParallel` whose sharded modules have the three phases
      (`input_dist`, `compute`, `output_dist`);
    - a batch has `sparse_features` (a `KeyedJaggedTensor`) and `to(device, non_blocking)`;
    - in `model(batch)`, every sharded module is called exactly once, with
      `batch.sparse_features` itself (not a copy or a part of it);
    - `model(batch)` returns `(loss, output)` with a scalar tensor `loss`.

    `progress(dataloader_iter)` trains one batch and returns its `output`; it raises
    `StopIteration` when the iterator and the pipeline are both empty. The pipeline calls
    `optimizer.zero_grad()` before each forward.

    As in TorchRec:

    - `execute_all_batches=True` (the default) runs every batch of the iterator; with `False`,
      the pipeline stops (`StopIteration`) as soon as the iterator cannot supply the batch two
      ahead of the current one, so the last two batches are not run (TorchRec's pipeline
      holds them when it finds the iterator empty). Those batches are dropped: a later
      iterator starts afresh (TorchRec would run them first);
    - a new iterator object given to `progress` after an earlier one ran out is read from the
      start (an evaluation loop after training);
    - with the model in eval mode (`model.training` False) `progress` runs the forward only:
      no `zero_grad`, backward or optimizer step, so it works under `torch.no_grad()`.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        device: torch.device | str,
        execute_all_batches: bool = True,
    ) -> None:
        if not isinstance(execute_all_batches, bool):
            raise TypeError(f"execute_all_batches must be a bool, got {execute_all_batches!r}")
        if not isinstance(model, DistributedModelParallel):
            raise TypeError(
                "TrainPipelineSparseDist needs a DistributedModelParallel model, got "
                f"{type(model).__name__}"
            )
        for path, sub in model.sharded_modules.items():
            missing = [m for m in ("input_dist", "compute", "output_dist") if not hasattr(sub, m)]
            if missing:
                raise TypeError(
                    f"sharded module {path!r} ({type(sub).__name__}) lacks {missing}; the "
                    "pipeline needs input_dist, compute and output_dist"
                )
        self._model = model
        self._optimizer = optimizer
        self._device = torch.device(device)
        # On a GPU, batches are copied on a side stream so that the copy of batch i+1 overlaps
        # the tail of batch i-1's kernels; on CPU, `to` is a plain (usually no-op) copy.
        self._copy_stream = (
            torch.cuda.Stream(device=self._device)  # type: ignore[no-untyped-call]  # untyped in torch
            if self._device.type == "cuda"
            else None
        )
        self._execute_all_batches = execute_all_batches
        self._next: _InFlight | None = None
        # Batches copied to the device whose input distribution has not started (with
        # execute_all_batches=False, the two batches ahead of the current one).
        self._queued: collections.deque[Pipelineable] = collections.deque()
        self._iter: Iterator[Pipelineable] | None = None
        self._exhausted = False
        self._model_fwd: Callable[[Pipelineable], object] = model
        # Sharded modules with tiered tables (the same on every rank: from the plan).
        self._tiered = [
            path
            for path, sub in model.sharded_modules.items()
            if isinstance(sub, _Prefetching) and sub.has_tiered_tables()
        ]

    def reset(self) -> None:
        """Forget the batches in the pipeline (their input distributions are completed, then
        dropped, and rows prefetched for them unpinned); the next `progress` reads its
        iterator afresh."""
        self._drop(self._next)
        self._next = None
        self._queued.clear()
        self._iter = None
        self._exhausted = False

    def _drop(self, flight: _InFlight | None) -> None:
        """Complete `flight`'s input distributions and drop its prefetches."""
        if flight is None:
            return
        for pending in flight.pending.values():
            pending.wait()
        if flight.prefetched:
            for path in self._tiered:
                sub = self._model.sharded_modules[path]
                assert isinstance(sub, _Prefetching)
                sub.cancel_prefetches()
            flight.prefetched = False

    def _prefetch(self, flight: _InFlight | None) -> None:
        """The prefetch stage: wait `flight`'s input distribution to the modules with tiered
        tables and start loading their rows (background); a no-op without tiered tables."""
        if flight is None or flight.prefetched or not self._tiered:
            return
        for path in self._tiered:
            sub = self._model.sharded_modules[path]
            assert isinstance(sub, _Prefetching)
            sub.prefetch(flight.pending[path].wait(), background=True)
        flight.prefetched = True

    def _pull(self, it: Iterator[Pipelineable]) -> Pipelineable | None:
        """The next batch, on the device: a queued one, else one read from `it`."""
        if self._queued:
            return self._queued.popleft()
        return self._read(it)

    def _fetch(self, it: Iterator[Pipelineable]) -> _InFlight | None:
        """The next batch with its input distribution started."""
        batch = self._pull(it)
        if batch is None:
            return None
        features = batch.sparse_features
        pending: dict[str, Awaitable[object]] = {}
        for path, sub in self._model.sharded_modules.items():
            phased: _PhasedModule = sub  # type: ignore[assignment]  # checked in __init__
            pending[path] = phased.input_dist(features)
        return _InFlight(batch, pending)

    def _read(self, it: Iterator[Pipelineable]) -> Pipelineable | None:
        if it is not self._iter:  # a new iterator (TorchRec: the exhausted flag resets)
            self._iter = it
            self._exhausted = False
        if self._exhausted:
            return None
        try:
            batch = next(it)
        except StopIteration:
            self._exhausted = True
            return None
        features = getattr(batch, "sparse_features", None)
        if not isinstance(features, KeyedJaggedTensor) or not callable(getattr(batch, "to", None)):
            raise TypeError(
                "a pipelined batch needs a KeyedJaggedTensor `sparse_features` and a "
                f"`to(device, non_blocking)` method; got {type(batch).__name__} with "
                f"sparse_features of type {type(features).__name__}"
            )
        return self._to_device(batch)

    def _to_device(self, batch: Pipelineable) -> Pipelineable:
        """`batch.to(device, non_blocking=True)`; on CUDA on the side stream (host memory must
        be pinned for the copy to be asynchronous, e.g. `DataLoader(pin_memory=True)`)."""
        stream = self._copy_stream
        if stream is None:
            return batch.to(self._device, non_blocking=True)
        main = torch.cuda.current_stream(self._device)
        # No wait on the main stream first: the copy reads host memory only, so it may run
        # while the main stream still executes the previous batches' kernels.
        with torch.cuda.stream(stream):
            moved = batch.to(self._device, non_blocking=True)
        # input_dist runs on the main stream right after: it must see the finished copy, and
        # the allocator must not hand the copied tensors' memory (allocated on the side stream)
        # to the side stream's next copy while the main stream still reads them.
        main.wait_stream(stream)
        for t in tensors_of(moved):
            if t.device.type == "cuda":
                t.record_stream(main)
        return moved

    def _injected_forward(
        self, path: str, sub: nn.Module, current: _InFlight, used: set[str]
    ) -> Callable[[object], LazyAwaitable[object]]:
        phased: _PhasedModule = sub  # type: ignore[assignment]  # checked in __init__

        def forward(features: object) -> LazyAwaitable[object]:
            if features is not current.batch.sparse_features:
                raise ValueError(
                    f"sharded module {path!r} was called with {type(features).__name__} that is "
                    "not batch.sparse_features; under TrainPipelineSparseDist every sharded "
                    "module must read the batch's sparse_features unchanged"
                )
            if path in used:
                raise ValueError(
                    f"sharded module {path!r} was called twice in one forward; the pipeline "
                    "sends each batch's ids once per sharded module"
                )
            used.add(path)
            dist_input = current.pending[path].wait()
            return phased.output_dist(dist_input, phased.compute(dist_input))

        return forward

    def progress(self, dataloader_iter: Iterator[Pipelineable]) -> object:
        """Train on the next batch (in eval mode: only run the forward); returns the model's
        `output` for it."""
        if self._next is None:
            self._next = self._fetch(dataloader_iter)
        current = self._next
        if current is None:
            raise StopIteration
        self._require_ahead(dataloader_iter, 2)
        # Batch i+1's ids travel while batch i computes.
        self._next = self._fetch(dataloader_iter)
        return self._run(current, self._next)

    def _require_ahead(self, dataloader_iter: Iterator[Pipelineable], queued: int) -> None:
        """With execute_all_batches=False, TorchRec runs batch i only when the iterator still
        supplies batch i+2: read until `queued` batches wait in the queue, else stop."""
        if self._execute_all_batches:
            return
        while len(self._queued) < queued:
            ahead = self._read(dataloader_iter)
            if ahead is None:
                self.reset()
                raise StopIteration
            self._queued.append(ahead)

    def _run(self, current: _InFlight, following: _InFlight | None) -> object:
        """Forward of `current`, `following`'s prefetch stage, then backward and step."""
        training = self._model.training
        if training:
            self._optimizer.zero_grad()
        used: set[str] = set()
        sharded = self._model.sharded_modules
        for path, sub in sharded.items():
            sub.forward = self._injected_forward(
                path, sub, current, used
            )  # per-forward instance override, removed below
        try:
            result = self._model_fwd(current.batch)
        finally:
            for sub in sharded.values():
                del sub.forward
        unused = sorted(set(sharded) - used)
        if unused:
            raise ValueError(
                f"sharded modules {unused} were not called in the forward; the pipeline already "
                "sent their ids, so every sharded module must be used once per batch"
            )
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(
                "under TrainPipelineSparseDist the model must return (loss, output); got "
                f"{type(result).__name__}"
            )
        loss, output = result
        # Batch i+1's missing rows load while batch i's backward runs.
        self._prefetch(following)
        if not training:
            return output
        if not isinstance(loss, Tensor) or loss.dim() != 0:
            shape = tuple(loss.shape) if isinstance(loss, Tensor) else type(loss).__name__
            raise TypeError(f"the model's loss must be a scalar tensor, got {shape}")
        loss.backward()  # type: ignore[no-untyped-call]  # untyped in torch's stubs
        self._optimizer.step()
        return output


def tensors_of(obj: object) -> list[Tensor]:
    """Every tensor a batch holds, searched through dataclass fields, instance attributes
    (a KeyedJaggedTensor's values, lengths, offsets, weights) and the items of lists, tuples
    and dicts (for `record_stream`)."""
    out: list[Tensor] = []
    seen: set[int] = set()
    todo: list[object] = [obj]
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, Tensor):
            out.append(item)
        elif isinstance(item, dict):
            todo += list(item.values())
        elif isinstance(item, list | tuple):
            todo += list(item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            todo += [getattr(item, f.name) for f in dataclasses.fields(item)]
        elif hasattr(item, "__dict__") and not isinstance(item, type):
            todo += [v for k, v in vars(item).items() if not k.startswith("__")]
    return out
