"""The state engine of a RecMetric: named per-task states, batch windows, sync across ranks.

A computation keeps states of shape (n_tasks,): lifetime sums, and `window_<name>` sums over
this rank's most recent whole batches holding at most `window_size` samples:

    batches   b0(32) b1(32) b2(32) b3(32)        window 96 samples
    window          [ b1    b2    b3 ]           b0 left when b3 arrived (32 * 4 > 96)

`compute()` is a collective on every rank of the process group (the given one, else the
default one when initialized): sum states are summed over ranks in one all-reduce, sample
states (AUC) are gathered; `local_compute()` uses this rank's states only.
"""

from __future__ import annotations

import abc
import collections
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch
import torch.distributed as dist
from torch import Tensor, nn

from shardrec_metrics._comm import all_gather_columns, all_reduce_sum, resolve_group
from shardrec_metrics.rec._reductions import Reduction, gather_state, reduce_gathered
from shardrec_metrics.rec.metrics_config import RecComputeMode
from shardrec_metrics.rec.metrics_namespace import MetricName, MetricPrefix

__all__ = [
    "IGNORED_KWARGS",
    "BatchComputation",
    "MetricComputationReport",
    "RecMetricComputation",
    "RecMetricException",
    "WindowBuffer",
]

# Arguments TorchRec forwards to every computation that only tune its compilation or copying.
IGNORED_KWARGS = ("enable_pt2_compile", "should_clone_update_inputs", "batch_size_stages")


class RecMetricException(Exception):
    """A metric used against its contract (missing predictions, incompatible options)."""


@dataclass(frozen=True)
class MetricComputationReport:
    """One value a computation reports: (n_tasks,) `value` under `metric_prefix` + `name`."""

    name: MetricName
    metric_prefix: MetricPrefix
    value: Tensor
    description: str | None = None


class WindowBuffer:
    """The most recent whole batches' states whose sample count stays within `max_size`."""

    def __init__(self, max_size: int, max_buffer_count: int = 1_000_000) -> None:
        self._max_size = max_size
        self._buffers: collections.deque[Tensor] = collections.deque(maxlen=max_buffer_count)
        self._sizes: collections.deque[int] = collections.deque(maxlen=max_buffer_count)
        self._used = 0

    def aggregate_state(self, window_state: Tensor, curr_state: Tensor, size: int) -> None:
        """Add `curr_state` (a batch of `size` samples) into `window_state` in place."""
        if len(self._buffers) == self._buffers.maxlen:
            self._remove(window_state)
        self._buffers.append(curr_state.detach().clone())
        self._sizes.append(size)
        window_state += curr_state
        self._used += size
        while self._used > self._max_size:
            self._remove(window_state)

    def _remove(self, window_state: Tensor) -> None:
        window_state -= self._buffers.popleft()
        self._used -= self._sizes.popleft()

    @property
    def buffers(self) -> collections.deque[Tensor]:
        return self._buffers

    def exact_total(self, like: Tensor) -> Tensor:
        """The kept batches' states summed afresh: the running add/subtract leaves rounding
        residue (a sum that should be 0 reads 1e-17, and a rate of nothing becomes 0.75)."""
        if not self._buffers:
            return torch.zeros_like(like)
        return torch.stack(list(self._buffers)).sum(dim=0).to(like.dtype)


class RecMetricComputation(nn.Module, abc.ABC):
    """States and formulas of one metric for `n_tasks` tasks (subclasses: update, _compute).

    `_add_state(name, default, add_window_state, dist_reduce_fx)`: a tensor default is summed
    over ranks (`dist_reduce_fx="sum"`; `"max"` takes the largest rank's value, `"any"` whether
    any rank's is nonzero); a list default holds (n_tasks, N) sample tensors that
    are concatenated over ranks (`"cat"`).
    """

    def __init__(
        self,
        my_rank: int,
        batch_size: int,
        n_tasks: int,
        window_size: int,
        compute_on_all_ranks: bool = False,
        should_validate_update: bool = False,
        compute_mode: RecComputeMode = RecComputeMode.UNFUSED_TASKS_COMPUTATION,
        process_group: dist.ProcessGroup | None = None,
        fused_update_limit: int = 0,
        allow_missing_label_with_zero_weight: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        unknown = sorted(set(kwargs) - set(IGNORED_KWARGS))
        if unknown:
            raise TypeError(f"{type(self).__name__} got unexpected arguments {unknown}")
        self._my_rank = my_rank
        self._batch_size = batch_size
        self._n_tasks = n_tasks
        self._window_size = window_size
        self._compute_on_all_ranks = compute_on_all_ranks
        self._should_validate_update = should_validate_update
        self._compute_mode = compute_mode
        self._process_group = process_group
        self._fused_update_limit = fused_update_limit
        self._allow_missing_label_with_zero_weight = allow_missing_label_with_zero_weight
        self._defaults: dict[str, Tensor | list[Tensor]] = {}
        self._reductions: dict[str, Reduction] = {}
        self._windows: dict[str, WindowBuffer] = {}
        self._synced: dict[str, Tensor | list[Tensor]] | None = None
        if should_validate_update:
            self._add_state(
                "has_valid_update",
                torch.zeros(n_tasks, dtype=torch.uint8),
                add_window_state=False,
                dist_reduce_fx="any",
                persistent=True,
            )

    @property
    def _batch_window_buffers(self) -> dict[str, WindowBuffer]:
        """TorchRec's name for the windows, by window state name (`window_<state>`)."""
        return self._windows

    def valid_updates(self) -> Tensor:
        """(n_tasks,) uint8: whether each task got a batch with some weight (validation on)."""
        state = self.has_valid_update
        assert isinstance(state, Tensor)
        return state

    @staticmethod
    def get_window_state_name(state_name: str) -> str:
        return f"window_{state_name}"

    def get_window_state(self, state_name: str) -> Tensor:
        state = getattr(self, self.get_window_state_name(state_name))
        assert isinstance(state, Tensor)
        return state

    def add_state(
        self,
        name: str,
        default: Tensor | list[Tensor],
        dist_reduce_fx: Reduction = "sum",
        persistent: bool = False,
    ) -> None:
        """A state without window (torchmetrics' `add_state`, which TorchRec's custom
        computations call): a tensor, or `[]` for a list of per-batch tensors; reduced over ranks
        by name ('sum', 'max', 'any', 'cat') or by a function of the gathered values (stacked
        tensors, or a list of each rank's tensors concatenated on the last dimension); None
        keeps the gathered values."""
        self._add_state(name, default, False, dist_reduce_fx, persistent)

    def _add_state(
        self,
        name: str,
        default: Tensor | list[Tensor],
        add_window_state: bool = True,
        dist_reduce_fx: Reduction = "sum",
        persistent: bool = False,
    ) -> None:
        if not (callable(dist_reduce_fx) or dist_reduce_fx in (None, "sum", "any", "max", "cat")):
            raise ValueError(
                f"dist_reduce_fx must be 'sum', 'any', 'max', 'cat', a function or None, got "
                f"{dist_reduce_fx!r}"
            )
        names = [name]
        if add_window_state:
            if not isinstance(default, Tensor):
                raise RecMetricException(f"state {name!r}: only tensor states have windows")
            names.append(self.get_window_state_name(name))
            self._windows[names[1]] = WindowBuffer(self._window_size)
        for n in names:
            self._defaults[n] = default
            self._reductions[n] = dist_reduce_fx
            if isinstance(default, Tensor):
                self.register_buffer(
                    n, default.detach().clone(), persistent=persistent and n == name
                )
            else:
                setattr(self, n, [])

    def _aggregate_window_state(self, state_name: str, state: Tensor, num_samples: int) -> None:
        window_name = self.get_window_state_name(state_name)
        self._windows[window_name].aggregate_state(getattr(self, window_name), state, num_samples)

    def _add_states(
        self,
        states: Mapping[str, Tensor],
        num_samples: int,
        window: bool = True,
        latest: bool = False,
    ) -> None:
        """Add one batch's per-task sums to the lifetime (and window) states; with `latest`,
        the lifetime states become the batch's values instead (TorchRec's scalar, output)."""
        for name, value in states.items():
            state = getattr(self, name)
            if latest:
                state.copy_(value.expand_as(state))
            else:
                state += value.to(state.dtype)
            if window:
                self._aggregate_window_state(name, value.to(state.dtype), num_samples)

    # TorchRec's contract for a custom computation; shardrec's own implement it once, in
    # BatchComputation below (the same signature twice, on purpose: a custom computation
    # written for TorchRec still overrides `update` alone)
    @abc.abstractmethod
    def update(
        self,
        *,
        predictions: Tensor | None,
        labels: Tensor,
        weights: Tensor | None,
        **kwargs: Any,
    ) -> None:
        """Add a batch: tensors of shape (n_tasks, B)."""

    @abc.abstractmethod
    def _compute(self) -> list[MetricComputationReport]:
        """Reports from the current states (global while synced, local otherwise)."""

    def pre_compute(self) -> None:
        """Hook run before every compute (TorchRec's)."""

    def _group(self) -> dist.ProcessGroup | None:
        group = resolve_group(self._process_group)
        if group is None or dist.get_world_size(group) == 1:
            return None
        return group

    def load_states(self, states: Mapping[str, Any]) -> None:
        """Take states by name (`RecMetricModule.load_pre_compute_states`); a window state's
        value becomes its window's one (oldest) entry, so later batches add to it."""
        for name, value in states.items():
            setattr(self, name, value)
            window = self._windows.get(name)
            if window is not None and isinstance(value, Tensor):
                self._windows[name] = WindowBuffer(self._window_size)
                self._windows[name].aggregate_state(torch.zeros_like(value), value, 0)

    def _refresh_windows(self) -> None:
        for name, window in self._windows.items():
            current = getattr(self, name)
            setattr(self, name, window.exact_total(current))

    def sync(self) -> None:
        """Replace the states with their values over every rank (a collective)."""
        if self._synced is not None:
            return
        self._refresh_windows()
        group = self._group()
        local = {n: getattr(self, n) for n in self._defaults}
        self._synced = local
        if group is None:
            return
        sums = [n for n in self._defaults if self._reductions[n] in ("sum", "any", "max")]
        if sums:
            # one all-reduce for every tensor state; a "max" state is sent in this rank's row
            # of a (world, numel) block of zeros, so the sum holds every rank's values
            world, rank = dist.get_world_size(group), dist.get_rank(group)
            parts = [
                _row(cast(Tensor, local[n]), rank, world, cast(str, self._reductions[n]))
                for n in sums
            ]
            total = all_reduce_sum(torch.cat(parts), group)
            at = 0
            for n, sent in zip(sums, parts, strict=True):
                t = local[n]
                assert isinstance(t, Tensor)
                part = total[at : at + sent.numel()]
                at += sent.numel()
                if self._reductions[n] == "max":
                    value = part.reshape(world, *t.shape).amax(dim=0)
                else:
                    value = (part > 0) if self._reductions[n] == "any" else part
                setattr(self, n, value.reshape(t.shape).to(dtype=t.dtype, device=t.device))
        for n in self._defaults:
            reduction = self._reductions[n]
            if callable(reduction) or reduction is None:
                setattr(self, n, _gathered_and_reduced(local[n], reduction, group))
            elif reduction == "cat":
                samples = _cat_samples(cast(list[Tensor], local[n]), self._n_tasks)
                pooled = torch.cat(all_gather_columns(samples, group), dim=1)
                # the gather is differentiable; metric states never carry gradients
                setattr(self, n, [pooled.detach().to(samples.device)])

    def unsync(self) -> None:
        """Restore this rank's own states after `sync`."""
        if self._synced is None:
            return
        for n, value in self._synced.items():
            setattr(self, n, value)
        self._synced = None

    @property
    def _is_synced(self) -> bool:
        return self._synced is not None

    def compute(self) -> list[MetricComputationReport]:
        """Reports over every rank; every rank must call it. Empty off rank 0 unless
        `compute_on_all_ranks`."""
        was_synced = self._is_synced
        self.sync()
        try:
            reports = self._compute()
        finally:
            if not was_synced:
                self.unsync()
        return reports if self._my_rank == 0 or self._compute_on_all_ranks else []

    def local_compute(self) -> list[MetricComputationReport]:
        if self._synced is None:
            self._refresh_windows()
        return self._compute()

    def reset(self) -> None:
        """Forget every sample (lifetime and window)."""
        self.unsync()
        for n, default in self._defaults.items():
            if isinstance(default, Tensor):
                current = getattr(self, n)
                setattr(self, n, default.detach().clone().to(current.device))
            else:
                setattr(self, n, [])
        self._windows = {n: WindowBuffer(self._window_size) for n in self._windows}


class BatchComputation(RecMetricComputation):
    """A computation that adds every batch as it comes (the sum-state and sample-window
    metrics): `update` checks TorchRec's input contract once for all of them, fills weights
    with ones where the metric does not need them (`_needs_weights = False`), and hands the
    batch to `_add_batch`."""

    _needs_weights: ClassVar[bool] = True

    def update(
        self,
        *,
        predictions: Tensor | None,
        labels: Tensor,
        weights: Tensor | None,
        **kwargs: Any,
    ) -> None:
        if predictions is None or (weights is None and self._needs_weights):
            raise RecMetricException(
                "Inputs 'predictions' and 'weights' should not be None for "
                f"{type(self).__name__} update"
            )
        if weights is None:
            weights = torch.ones_like(predictions)
        self._add_batch(predictions, labels, weights, **kwargs)

    @abc.abstractmethod
    def _add_batch(
        self, predictions: Tensor, labels: Tensor, weights: Tensor, **kwargs: Any
    ) -> None:
        """Add one checked batch of (n_tasks, B) tensors."""


def _row(state: Tensor, rank: int, world: int, reduction: str) -> Tensor:
    """What a rank sends for `state` in the all-reduce: its values, or for "max" its values
    in row `rank` of (world, numel) zeros."""
    flat = state.detach().double().reshape(-1).cpu()
    if reduction != "max":
        return flat
    rows = torch.zeros((world, flat.numel()), dtype=torch.double)
    rows[rank] = flat
    return rows.reshape(-1)


def required_input(kwargs: Mapping[str, Any], name: str, metric: str) -> Tensor:
    """The tensor `name` among an update's `required_inputs`, else RecMetricException."""
    value = (kwargs.get("required_inputs") or {}).get(name)
    if not isinstance(value, Tensor):
        raise RecMetricException(
            f"{metric} needs the required input {name!r} with every update; RecMetricModule "
            "passes it from the model output of that name"
        )
    return value


def _gathered_and_reduced(
    value: Tensor | list[Tensor], reduction: Reduction, group: dist.ProcessGroup
) -> Any:
    """A state with a reduction function: every rank's value (a list state's tensors joined on
    the last dimension first), then the function of them."""
    if isinstance(value, list):
        if not value:
            return []
        return reduce_gathered(reduction, gather_state(torch.cat(value, dim=-1), group))
    return reduce_gathered(reduction, torch.stack(gather_state(value, group)))


def _cat_samples(chunks: list[Tensor], n_tasks: int) -> Tensor:
    if not chunks:
        return torch.zeros((n_tasks, 0), dtype=torch.float32)
    return torch.cat(chunks, dim=1) if len(chunks) > 1 else chunks[0]
