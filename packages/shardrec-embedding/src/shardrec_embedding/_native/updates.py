"""Fused optimizer updates on the native kernels: SGD, exact rowwise Adagrad and Adagrad.

Each takes one `shardrec_optim.PooledGrad` (a packed group's rows `ids`, table-local id + the
table's row offset, and the pooled output gradient) and update the touched rows in place with
the one-pass kernel `sr_fused_update` (kernels.c; docs/design/native-kernels.md).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from shardrec_embedding._native.ops import (
    _I64,
    _PTR,
    _check_layout,
    _lib,
    _psw_ptr,
    native_scatter,
)

if TYPE_CHECKING:
    from shardrec_optim import PooledGrad

__all__ = [
    "MAX_IDS",
    "AdagradWorkspace",
    "GradientPiece",
    "Presorted",
    "bucket_shift",
    "native_adagrad",
    "native_presorted_update",
    "native_rowwise_adagrad",
    "native_segment_presort",
    "native_segment_update",
    "native_sgd",
]


_ROWWISE_ADAGRAD, _ADAGRAD = 1, 2  # sr_fused_update's kinds
KINDS = {"rowwise_adagrad": _ROWWISE_ADAGRAD, "adagrad": _ADAGRAD}
"""The one-pass kernel's update rules by name (`native_segment_update`)."""


class _UpdateSegment(ctypes.Structure):
    _fields_ = [
        ("key", _I64),
        ("row0", _I64),
        ("rows", _I64),
        ("col", _I64),
        ("mean", _I64),
    ]


MAX_IDS = 2**31 - 1
"""Most ids (and bags) one batch may hand the one-pass kernel (its entries hold int32s)."""

_MIN_SHIFT = 7  # 128-row buckets (32 KB of dim-64 rows; 64 until session 10: 3-7% slower)
_MAX_BUCKETS = 1 << 22  # more rows widen the buckets instead (the bucket counts stay <= 16 MB)


def bucket_shift(rows: int) -> int:
    """log2 of the rows per bucket of the one-pass kernel's counting sort for `rows` rows."""
    shift = _MIN_SHIFT
    while (max(rows, 1) - 1) >> shift >= _MAX_BUCKETS:
        shift += 1
    return shift


_CHUNK_BYTES = 256 << 10  # gradient sums of one chunk: stays in the L2 cache


class AdagradWorkspace:
    """Scratch of the one-pass native updates, kept between steps (resident pages).

    starts: `(buckets + 1,)` int32 bucket bounds; entries: `(3 * capacity,)` int32, one
    {bag, row in bucket, scale} per id; local: per thread `2 * W` int32 (zero between
    calls); items: per thread `cap` rows of a chunk (24 bytes each); acc: per thread
    `(cap, D)` fp32 gradient sums. Grown (x1.5) when a batch has more ids. Used by every
    optimizer (the name predates SGD and Adagrad using it).
    """

    def __init__(self) -> None:
        self._starts: Tensor | None = None
        self._entries: Tensor | None = None
        self._local: Tensor | None = None
        self._items: Tensor | None = None
        self._acc: Tensor | None = None
        # the presort's own starts + entries (one forward's sort, waiting for its backward);
        # None while a `Presorted` holds them
        self._presort_lock = threading.Lock()
        self._presort: tuple[Tensor, Tensor] | None = (
            torch.empty(0, dtype=torch.int32),
            torch.empty(0, dtype=torch.int32),
        )

    def _lease_presort(self, buckets: int, num_ids: int) -> tuple[Tensor, Tensor] | None:
        """The presort buffers sized for this sort, or None while a `Presorted` holds them."""
        with self._presort_lock:  # two threads' forwards never share the buffers
            got, self._presort = self._presort, None
        if got is None:
            return None
        starts, entries = got
        if starts.numel() != buckets + 1:
            starts = torch.empty(buckets + 1, dtype=torch.int32)
        if entries.numel() < 3 * num_ids:
            entries = torch.empty(3 * max(1, num_ids + num_ids // 2), dtype=torch.int32)
        return starts, entries

    def _return_presort(self, buffers: tuple[Tensor, Tensor]) -> None:
        self._presort = buffers

    def buffers(
        self, rows: int, dim: int, num_ids: int, threads: int
    ) -> tuple[int, int, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """(shift, cap, starts, entries, local, items, acc) sized for this update."""
        shift = bucket_shift(rows)
        width = 1 << shift
        cap = max(2 * width, _CHUNK_BYTES // (4 * max(dim, 1)))
        buckets = ((max(rows, 1) - 1) >> shift) + 1
        starts = self._starts
        if starts is None or starts.numel() != buckets + 1:
            starts = self._starts = torch.empty(buckets + 1, dtype=torch.int32)
        entries = self._entries
        if entries is None or entries.numel() < 3 * num_ids:
            capacity = max(1, num_ids + num_ids // 2)
            entries = self._entries = torch.empty(3 * capacity, dtype=torch.int32)
        local = self._local
        if local is None or local.numel() != threads * 2 * width:
            local = self._local = torch.zeros(threads * 2 * width, dtype=torch.int32)
        items = self._items
        if items is None or items.numel() != threads * 3 * cap:
            items = self._items = torch.empty(threads * 3 * cap, dtype=torch.int64)
        acc = self._acc
        if acc is None or acc.numel() != threads * cap * dim:
            acc = self._acc = torch.empty(threads * cap * dim, dtype=torch.float32)
        return shift, cap, starts, entries, local, items, acc


def native_sgd(grad: PooledGrad, workspace: AdagradWorkspace | None = None) -> None:
    """`weight[ids] -= lr * (scaled output gradient)` for every id, in place (exact SGD:
    duplicate ids add their gradients one by one, in input order, which for SGD equals one
    update with their sum up to float rounding).

    The scatter kernel of the dense backward with `alpha = -lr`, not `sr_fused_update`: SGD
    needs no sum per row, and the bucket sort cost more than it saved (benchmarks/
    optim_update.py: 15.0-15.9 ms scatter vs 15.9-16.6 one-pass). `workspace` is unused (kept
    so that every native update takes one).

    weight: `(R, D)` contiguous fp32. ids: `(N,)` rows. offsets: `(num_bags + 1,)`.
    grad_out: `(num_bags, D)` fp32.
    """
    del workspace
    psw = grad.per_sample_weights
    native_scatter(
        [grad.weight],
        grad.ids,
        grad.offsets.to(torch.int64).contiguous(),
        None if psw is None else psw.float().contiguous(),
        grad.grad_out.contiguous(),
        [0],
        [0],
        [int(grad.mean)],
        alpha=-grad.learning_rate,
    )


def native_rowwise_adagrad(grad: PooledGrad, workspace: AdagradWorkspace) -> None:
    """Exact rowwise Adagrad (no weight decay) over the rows `grad.ids` touched, in place.

    weight: `(R, D)` contiguous fp32. state `momentum1`: `(R,)` fp32. ids: `(N,)` int64 rows.
    offsets: `(num_bags + 1,)`. per_sample_weights: `(N,)` or None. grad_out: `(num_bags, D)`
    fp32. For each distinct row: `g = sum of scaled gradients`, `m += mean(g^2)`,
    `w -= lr / (sqrt(m) + eps) * g` (the formula of shardrec_optim's rowwise kernel).
    """
    _fused_update(_ROWWISE_ADAGRAD, grad, workspace, grad.state["momentum1"])


def native_adagrad(grad: PooledGrad, workspace: AdagradWorkspace) -> None:
    """Exact (elementwise) Adagrad over the rows `grad.ids` touched, in place: per distinct
    row `g = sum of scaled gradients`, `m += g * g`, `w -= lr * g / (sqrt(m) + eps)`.

    state `momentum1`: `(R, D)` fp32; the rest as `native_rowwise_adagrad`.
    """
    _fused_update(_ADAGRAD, grad, workspace, grad.state["momentum1"])


def _fused_update(
    kind: int, grad: PooledGrad, workspace: AdagradWorkspace, state: Tensor | None
) -> None:
    offsets = grad.offsets
    num_bags = offsets.numel() - 1
    num_ids = grad.ids.numel()
    if num_bags <= 0 or num_ids == 0:
        return
    if max(num_ids, num_bags) > MAX_IDS:
        raise ValueError(
            f"the native update takes at most {MAX_IDS} ids and bags a batch, got {num_ids} "
            f"ids in {num_bags} bags"
        )
    if num_bags * grad.grad_out.shape[1] > MAX_IDS:
        raise ValueError(
            f"the native update takes at most {MAX_IDS} output gradient elements a batch, got "
            f"{num_bags} bags of width {grad.grad_out.shape[1]}"
        )
    ids = grad.ids.to(torch.int64).contiguous()
    offsets = offsets.to(torch.int64).contiguous()
    _check_layout(ids, offsets, [0], num_bags)
    grad_out = grad.grad_out.contiguous()
    psw = grad.per_sample_weights
    psw = None if psw is None else psw.float().contiguous()
    weight = grad.weight
    rows, dim = weight.shape
    threads = max(1, torch.get_num_threads())
    shift, cap, starts, entries, local, items, acc = workspace.buffers(rows, dim, num_ids, threads)
    _lib().sr_fused_update(
        _I64(kind),
        _PTR(weight.data_ptr()),
        _PTR(None if state is None else state.data_ptr()),
        _I64(rows),
        _I64(dim),
        _PTR(ids.data_ptr()),
        _PTR(offsets.data_ptr()),
        _I64(num_bags),
        _PTR(_psw_ptr(psw)),
        _I64(int(grad.mean)),
        _PTR(grad_out.data_ptr()),
        _I64(grad_out.stride(0)),
        ctypes.c_float(grad.learning_rate),
        ctypes.c_float(grad.spec.eps),
        _I64(shift),
        _PTR(starts.data_ptr()),
        _PTR(entries.data_ptr()),
        _PTR(local.data_ptr()),
        _PTR(items.data_ptr()),
        _PTR(acc.data_ptr()),
        _I64(cap),
        ctypes.c_int(threads),
    )


UpdateSegments = tuple[tuple[int, int, int, int, int], ...]
_UPDATE_SEGMENTS: dict[UpdateSegments, ctypes.Array[_UpdateSegment]] = {}


def _segments_array(segments: UpdateSegments) -> ctypes.Array[_UpdateSegment]:
    """The kernel's segment structs (cached: a step repeats its segments)."""
    segs = _UPDATE_SEGMENTS.get(segments)
    if segs is None:
        if len(_UPDATE_SEGMENTS) >= 64:
            _UPDATE_SEGMENTS.clear()
        segs = _UPDATE_SEGMENTS[segments] = (_UpdateSegment * len(segments))(
            *(_UpdateSegment(*s) for s in segments)
        )
    return segs


def _values_for_kernel(values: Tensor) -> tuple[str, Tensor]:
    """The kernel suffix for `values`' dtype and the contiguous int32 / int64 values."""
    suffix = "i32" if values.dtype is torch.int32 else "i64"
    if suffix == "i64":
        values = values.to(torch.int64)
    return suffix, values.contiguous()


@dataclasses.dataclass(frozen=True, kw_only=True)
class GradientPiece:
    """The second row piece of a gradient in two pieces: rows `[split, B)` of the whole are
    `rows[0 : B - split]` (same row stride and dtype as the first piece, unit column stride)."""

    split: int
    rows: Tensor


def _second_piece(
    grad: Tensor, second: GradientPiece | None, batch_size: int, stride: int
) -> tuple[int, int]:
    """The kernel's (second pointer, split offset) for `grad` and its optional second piece,
    both read with row stride `stride` (the sort's)."""
    if second is None:
        return grad.data_ptr(), _ONE_PIECE
    split, rows = second.split, second.rows
    if not 0 <= split <= min(batch_size, grad.shape[0]) or rows.shape[0] < batch_size - split:
        raise ValueError(
            f"a gradient piece split at row {split} needs rows [split, {batch_size}) in its "
            f"second piece, got {rows.shape[0]} rows"
        )
    if (
        rows.dtype is not grad.dtype
        or rows.shape[1:] != grad.shape[1:]
        or (rows.shape[0] > 1 and rows.stride(0) != stride)
        or (rows.numel() and rows.stride(1) != 1)
    ):
        raise ValueError(
            f"the gradient's second piece must match the first's dtype, width and row stride: "
            f"{rows.dtype} {tuple(rows.shape)} stride {rows.stride()} against {grad.dtype} "
            f"{tuple(grad.shape)} stride {grad.stride()}"
        )
    return rows.data_ptr(), split * stride


_ONE_PIECE = 2**63 - 1
"""The kernel's split offset for a gradient in one piece (past every offset)."""


def native_segment_update(
    rule: str,
    weight: Tensor,
    state: Tensor,
    segments: UpdateSegments,
    values: Tensor,
    offsets: Tensor,
    batch_size: int,
    grad: Tensor,
    learning_rate: float,
    eps: float,
    workspace: AdagradWorkspace,
    num_entries: int,
    *,
    second: GradientPiece | None = None,
) -> None:
    """The one-pass update of one packed group straight from a KJT and the lookup's output
    gradient (no id shift, no gradient copy), in place.

    rule: a key of `KINDS`. weight: `(R, D)` contiguous fp32 packed group; state: its
    `momentum1`. segments: per segment `(key, first packed row, rows, first gradient column,
    mean)`; bag b of a segment is `values[offsets[key * B + b] : offsets[key * B + b + 1]]`
    (table-local ids, int32 or int64) and its gradient `grad[b, col : col + D]`.
    grad: `(B, W)` fp32 with unit column stride; its size must stay below 2^31 elements.
    num_entries: the segments' ids in all (a key read by two segments counts twice).
    The same update, in the same summation order, as the group's own ids concatenated in
    segment order through `native_rowwise_adagrad` / `native_adagrad`.
    second: the gradient in two row pieces: rows `[0, split)` are `grad`'s, rows `[split, B)`
        the piece's (`GradientPiece`; the same row stride); None: `grad` holds every row.
    """
    if batch_size <= 0 or num_entries == 0 or not segments:
        return
    grad1, split_off = _second_piece(grad, second, batch_size, grad.stride(0))
    if max(num_entries, batch_size * grad.stride(0)) > MAX_IDS:
        raise ValueError(
            f"the native update takes at most {MAX_IDS} ids and gradient elements a batch, "
            f"got {num_entries} ids and a {tuple(grad.shape)} gradient"
        )
    assert grad.stride(1) == 1 and grad.dtype is torch.float32
    segs = _segments_array(segments)
    suffix, values = _values_for_kernel(values)
    rows, dim = weight.shape
    threads = max(1, torch.get_num_threads())
    shift, cap, starts, entries, local, items, acc = workspace.buffers(
        rows, dim, num_entries, threads
    )
    getattr(_lib(), f"sr_fused_update_segments_{suffix}")(
        _I64(KINDS[rule]),
        _PTR(weight.data_ptr()),
        _PTR(state.data_ptr()),
        _I64(rows),
        _I64(dim),
        segs,
        _I64(len(segments)),
        _I64(batch_size),
        _PTR(values.data_ptr()),
        _PTR(offsets.data_ptr()),
        _PTR(None),
        _PTR(grad.data_ptr()),
        _PTR(grad1),
        _I64(split_off),
        _I64(grad.stride(0)),
        ctypes.c_float(learning_rate),
        ctypes.c_float(eps),
        _I64(shift),
        _PTR(starts.data_ptr()),
        _PTR(entries.data_ptr()),
        _PTR(local.data_ptr()),
        _PTR(items.data_ptr()),
        _PTR(acc.data_ptr()),
        _I64(cap),
        ctypes.c_int(threads),
    )


class _SortThread:
    """One daemon thread that runs the presorts in turn: started on first use (and again in a
    forked child, which has no copy of it). A queue, not a thread per sort: `Thread.start`
    waits until the new thread runs, which on a busy machine stalls the caller."""

    def __init__(self) -> None:
        self._pid = -1
        self._queue: queue.SimpleQueue[tuple[Callable[[], None], threading.Event]] = (
            queue.SimpleQueue()
        )

    def submit(self, fn: Callable[[], None]) -> threading.Event:
        """Run `fn` on the thread; the event is set when it has returned."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._queue = queue.SimpleQueue()
            threading.Thread(
                target=self._serve, args=(self._queue,), name="shardrec-presort", daemon=True
            ).start()
        done = threading.Event()
        self._queue.put((fn, done))
        return done

    @staticmethod
    def _serve(
        jobs: queue.SimpleQueue[tuple[Callable[[], None], threading.Event]],
    ) -> None:
        while True:
            fn, done = jobs.get()
            try:
                fn()
            finally:
                del fn  # its closure holds a Presorted: let go before saying the sort ended
                done.set()
                del done


_SORT_THREAD = _SortThread()


class Presorted:
    """One packed group's update sort (step 1 of the one-pass kernel) run ahead of its gradient
    by `native_segment_presort`, for `native_presorted_update`.

    Holds the workspace's presort buffers until `release()` (or until it is garbage: a forward
    whose backward never runs gives them back when its graph is freed and its sort has ended).
    `wait()` waits for the sort (on the module's one presort thread)."""

    def __init__(
        self,
        workspace: AdagradWorkspace,
        buffers: tuple[Tensor, Tensor],
        rows: int,
        shift: int,
        grad_stride: int,
        batch: int,
    ) -> None:
        self.rows = rows
        self.batch = batch  # the bags sorted (the gradient's rows)
        self.shift = shift
        self.grad_stride = grad_stride
        self.starts, self.entries = buffers
        self._done: threading.Event | None = None
        self._give_back = weakref.finalize(self, workspace._return_presort, buffers)

    def wait(self) -> None:
        """Block until the sort is done (a no-op when it ran on the caller's thread)."""
        if self._done is not None:
            self._done.wait()
            self._done = None

    def release(self) -> None:
        """Give the buffers back to the workspace (after `wait`; idempotent)."""
        self.wait()
        self._give_back()


def native_segment_presort(
    rows: int,
    segments: UpdateSegments,
    values: Tensor,
    offsets: Tensor,
    batch_size: int,
    grad_stride: int,
    workspace: AdagradWorkspace,
    num_entries: int,
    *,
    background: bool,
) -> Presorted | None:
    """Step 1 of `native_segment_update` (the bucket sort of the ids; no gradient needed) into
    the workspace's presort buffers, on a helper thread when `background` (the native call
    releases the GIL). None when there is nothing to sort or another `Presorted` of this
    workspace still holds the buffers (its backward has not run): the caller then updates
    with `native_segment_update`. The gradient handed later to `native_presorted_update` must
    have row stride `grad_stride`. Arguments as `native_segment_update`'s."""
    if batch_size <= 0 or num_entries == 0 or not segments or rows <= 0:
        return None
    if max(num_entries, batch_size * grad_stride) > MAX_IDS:
        return None  # native_segment_update raises the error
    shift = bucket_shift(rows)
    buffers = workspace._lease_presort(((rows - 1) >> shift) + 1, num_entries)
    if buffers is None:
        return None
    pre = Presorted(workspace, buffers, rows, shift, grad_stride, batch_size)
    segs = _segments_array(segments)
    suffix, values = _values_for_kernel(values)
    sort = getattr(_lib(), f"sr_fused_sort_segments_{suffix}")

    def run() -> None:
        # reads pre's buffers through pre: a running sort keeps them leased (a Presorted
        # dropped mid-sort gives them back only once the thread lets go of it)
        starts, entries = pre.starts, pre.entries
        sort(
            _I64(rows),
            segs,
            _I64(len(segments)),
            _I64(batch_size),
            _PTR(values.data_ptr()),
            _PTR(offsets.data_ptr()),
            _PTR(None),
            _I64(grad_stride),
            _I64(shift),
            _PTR(starts.data_ptr()),
            _PTR(entries.data_ptr()),
        )

    if background:
        # the closure keeps values, offsets and the buffers alive until the sort ends
        pre._done = _SORT_THREAD.submit(run)
    else:
        run()
    return pre


def native_presorted_update(
    rule: str,
    weight: Tensor,
    state: Tensor,
    presorted: Presorted,
    grad: Tensor,
    learning_rate: float,
    eps: float,
    workspace: AdagradWorkspace,
    *,
    second: GradientPiece | None = None,
) -> None:
    """Steps 2 and 3 of `native_segment_update` from `native_segment_presort`'s sort: bitwise
    the same weights and state as `native_segment_update` on the same arguments. Waits for the
    sort, then releases `presorted`. grad: `(B, W)` fp32, unit column stride, row stride the
    presort's `grad_stride`; weight: the `rows` the presort was given. second: as
    `native_segment_update`'s (the sort needs no change: the kernel reads an entry's gradient
    from the second piece when its offset is past the split row's)."""
    presorted.wait()
    try:
        grad1, split_off = _second_piece(grad, second, presorted.batch, presorted.grad_stride)
        rows, dim = weight.shape
        if rows != presorted.rows or (
            grad.shape[0] > 1 and grad.stride(0) != presorted.grad_stride
        ):
            raise ValueError(
                f"the presorted update was sorted for {presorted.rows} rows and gradient row "
                f"stride {presorted.grad_stride}, got {rows} rows and stride {grad.stride(0)}"
            )
        assert grad.stride(1) == 1 and grad.dtype is torch.float32
        threads = max(1, torch.get_num_threads())
        _, cap, _, _, local, items, acc = workspace.buffers(rows, dim, 0, threads)
        _lib().sr_fused_apply_sorted(
            _I64(KINDS[rule]),
            _PTR(weight.data_ptr()),
            _PTR(state.data_ptr()),
            _I64(rows),
            _I64(dim),
            _PTR(grad.data_ptr()),
            _PTR(grad1),
            _I64(split_off),
            ctypes.c_float(learning_rate),
            ctypes.c_float(eps),
            _I64(presorted.shift),
            _PTR(presorted.starts.data_ptr()),
            _PTR(presorted.entries.data_ptr()),
            _PTR(local.data_ptr()),
            _PTR(items.data_ptr()),
            _PTR(acc.data_ptr()),
            _I64(cap),
            ctypes.c_int(threads),
        )
    finally:
        presorted.release()
