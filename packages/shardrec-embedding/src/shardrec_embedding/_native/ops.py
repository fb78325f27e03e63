"""The native kernels as torch ops: `shardrec::pooled_lookup` and its backward ops.

`pooled_lookup` pools every (table, feature) segment of a collection straight from the KJT
into the final `(B, total_dim)` output: no id shift, no separate range check, no permuting
copy (docs/design/native-kernels.md). The ops are `torch.library.custom_op`s with fake
(meta) implementations, so `torch.export`, fx and `torch.compile` see one opaque op, and an
autograd formula giving each table its dense gradient, as `nn.EmbeddingBag` does.

Segment `s` (output order) reads table `segment_tables[s]` for KJT key `segment_keys[s]`
(`segment_means[s]`: 1 for MEAN); its bag `b` is `values[offsets[key*B+b]:offsets[key*B+b+1]]`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from shardrec_embedding._native.loader import native_library

__all__ = [
    "MAX_DIM",
    "GradLease",
    "native_applies",
    "native_available",
    "native_clear_stale",
    "native_pooled_into",
    "native_pooled_lookup",
    "native_scatter",
]

MAX_DIM = 1024
"""Widest row the native forward takes (its accumulator lives on the stack); wider: torch."""

_I64 = ctypes.c_int64
_PTR = ctypes.c_void_p


class _Segment(ctypes.Structure):
    _fields_ = [
        ("table", _PTR),
        ("rows", _I64),
        ("dim", _I64),
        ("col", _I64),
        ("key", _I64),
        ("mean", _I64),
    ]


def native_available() -> bool:
    """True when the native kernels are built and loaded (see `loader`)."""
    return native_library() is not None


def _lib() -> ctypes.CDLL:
    lib = native_library()
    assert lib is not None, "callers check native_available()"
    return lib


_SEGMENT_CACHE: dict[tuple[object, ...], tuple[ctypes.Array[_Segment], int]] = {}
_SEGMENT_CACHE_SIZE = 64


def _segments(
    weights: Sequence[Tensor],
    tables: Sequence[int],
    keys: Sequence[int],
    means: Sequence[int],
    cols: Sequence[int] | None = None,
) -> tuple[ctypes.Array[_Segment], int]:
    """ctypes segment descriptors and the output width (cached: building 26 descriptors
    costs ~30 us, a third of a small batch's forward). cols: each segment's first output
    column (default: side by side in segment order; the width is then their sum)."""
    layout = tuple((w.data_ptr(), w.shape[0], w.shape[1]) for w in weights)
    placed = None if cols is None else tuple(cols)
    cache_key = (layout, tuple(tables), tuple(keys), tuple(means), placed)
    found = _SEGMENT_CACHE.get(cache_key)
    if found is not None:
        return found
    segs = (_Segment * len(tables))()
    col = 0
    for s, (t, k, m) in enumerate(zip(tables, keys, means, strict=True)):
        ptr, rows, dim = layout[t]
        first = col if cols is None else cols[s]
        segs[s] = _Segment(ptr, rows, dim, first, k, m)
        col = max(col, first + dim) if cols is not None else col + dim
    if len(_SEGMENT_CACHE) >= _SEGMENT_CACHE_SIZE:
        _SEGMENT_CACHE.clear()
    _SEGMENT_CACHE[cache_key] = (segs, col)
    return segs, col


def _index_kernel(values: Tensor, name: str) -> tuple[Tensor, Callable[..., None]]:
    if values.dtype is not torch.int32:
        values = values.to(torch.int64)
    suffix = "i32" if values.dtype is torch.int32 else "i64"
    fn: Callable[..., None] = getattr(_lib(), f"{name}_{suffix}")
    return values.contiguous(), fn


def _psw_ptr(psw: Tensor | None) -> int | None:
    return None if psw is None else psw.data_ptr()


def _check_layout(values: Tensor, offsets: Tensor, keys: Sequence[int], batch: int) -> None:
    """The kernels trust these bounds: refuse inputs that would read outside the tensors
    (a KJT is not validated by default, so negative lengths can reach us)."""
    need = (max(keys, default=-1) + 1) * batch + 1
    if offsets.numel() < need:
        raise ValueError(f"offsets has {offsets.numel()} entries; the segments need {need}")
    if offsets.numel() == 0:
        return
    first, last = int(offsets[0]), int(offsets[-1])
    if first < 0 or last > values.numel():
        raise ValueError(f"offsets span [{first}, {last}] outside the {values.numel()} values")
    if offsets.numel() > 1 and bool((offsets[1:] < offsets[:-1]).any()):
        i = int((offsets[1:] < offsets[:-1]).nonzero()[0, 0]) + 1
        raise ValueError(
            f"offsets decrease at index {i} ({int(offsets[i - 1])} -> {int(offsets[i])}), that "
            f"is lengths[{i - 1}] < 0: lengths must be >= 0 (offsets non-decreasing)"
        )


def _range_error(
    bad: Tensor, values: Tensor, weights: Sequence[Tensor], tables: Sequence[int], names: str
) -> IndexError:
    seg = int(torch.nonzero(bad < torch.iinfo(torch.int64).max)[0, 0])
    value = int(values[int(bad[seg])])
    parts = names.split("\x1f")
    feature, table = parts[2 * seg], parts[2 * seg + 1]
    rows = weights[tables[seg]].shape[0]
    # Same text as TablePlan.check_ids (the torch path), so both paths read alike.
    return IndexError(
        f"feature {feature!r} id {value} is out of range for table {table!r} "
        f"with {rows} rows (valid ids: [0, {rows})); pass check_ids=False only "
        "for pipelines whose ids are known to be in range"
    )


def _forward(
    weights: Sequence[Tensor],
    values: Tensor,
    offsets: Tensor,
    psw: Tensor | None,
    tables: Sequence[int],
    keys: Sequence[int],
    means: Sequence[int],
    batch: int,
    names: str,
    out: Tensor | None = None,
    cols: Sequence[int] | None = None,
) -> Tensor:
    """The forward kernel; `out` (given: `(batch, width)` contiguous fp32) receives segment s
    at columns `cols[s]` (default side by side); columns no segment covers are left as is."""
    segs, width = _segments(weights, tables, keys, means, cols)
    if out is None:
        out = torch.empty(batch, width, dtype=torch.float32)
    else:
        assert out.is_contiguous() and out.shape[0] == batch and out.shape[1] >= width
        width = out.shape[1]
    if batch == 0 or not tables:
        return out
    _check_layout(values, offsets, keys, batch)
    values, kernel = _index_kernel(values, "sr_pooled_forward")
    bad = torch.full((len(tables),), torch.iinfo(torch.int64).max, dtype=torch.int64)
    kernel(
        segs,
        _I64(len(tables)),
        _I64(batch),
        _PTR(values.data_ptr()),
        _PTR(offsets.data_ptr()),
        _PTR(_psw_ptr(psw)),
        _PTR(out.data_ptr()),
        _I64(width),
        _PTR(bad.data_ptr()),
        ctypes.c_int(torch.get_num_threads()),
    )
    if bool((bad < torch.iinfo(torch.int64).max).any()):
        raise _range_error(bad, values, weights, tables, names)
    return out


def native_pooled_into(
    out: Tensor,
    weights: Sequence[Tensor],
    values: Tensor,
    offsets: Tensor,
    *,
    segment_tables: Sequence[int],
    segment_keys: Sequence[int],
    segment_means: Sequence[int],
    segment_cols: Sequence[int],
    names: str,
) -> Tensor:
    """The forward kernel into `out` (`(B, W)` contiguous fp32): segment s's pooled rows at
    columns `segment_cols[s]`; columns no segment covers are left as they are. No autograd.
    Arguments as `pooled_lookup`; IndexError for an id outside its table."""
    return _forward(
        weights,
        values,
        offsets.to(torch.int64).contiguous(),
        None,
        segment_tables,
        segment_keys,
        segment_means,
        out.shape[0],
        names,
        out=out,
        cols=segment_cols,
    )


def native_scatter(
    targets: Sequence[Tensor],
    values: Tensor,
    offsets: Tensor,
    psw: Tensor | None,
    grad: Tensor,
    tables: Sequence[int],
    keys: Sequence[int],
    means: Sequence[int],
    *,
    alpha: float = 1.0,
    cols: Sequence[int] | None = None,
    stamps: Sequence[Tensor] | None = None,
    stamp: int = 0,
) -> None:
    """`targets[t][id] += alpha * scale * grad[b, segment columns]` for every id of every bag.

    targets: per table `(R_t, D_t)` contiguous fp32 (dense gradients, or the weights
    themselves for SGD with `alpha = -lr`). grad: `(B, total_dim)` fp32. Other arguments as
    `pooled_lookup`. stamps: per table `(R_t,)` uint8 row marks: a row whose mark is not
    `stamp` (1..255) is zeroed on its first touch and marked (see `GradWorkspace.stamped`).
    """
    batch = grad.shape[0]
    if batch == 0 or not tables:
        return
    segs, width = _segments(targets, tables, keys, means, cols)
    assert (grad.shape[1] == width or cols is not None) and grad.stride(1) == 1
    _check_layout(values, offsets, keys, batch)
    ptrs = (_PTR * len(tables))(*(targets[t].data_ptr() for t in tables))
    marks = None
    if stamps is not None:
        assert 0 < stamp < 256 and all(m.dtype is torch.uint8 for m in stamps)
        marks = (_PTR * len(tables))(*(stamps[t].data_ptr() for t in tables))
    values, kernel = _index_kernel(values, "sr_pooled_scatter")
    kernel(
        segs,
        ptrs,
        _I64(len(tables)),
        _I64(batch),
        _PTR(values.data_ptr()),
        _PTR(offsets.data_ptr()),
        _PTR(_psw_ptr(psw)),
        _PTR(grad.data_ptr()),
        _I64(grad.stride(0)),
        ctypes.c_float(alpha),
        marks,
        ctypes.c_int(stamp),
        ctypes.c_int(torch.get_num_threads()),
    )


def native_clear_stale(buffer: Tensor, marks: Tensor, stamp: int) -> None:
    """Zero every row of `buffer` `(R, D)` fp32 whose uint8 mark is neither 0 nor `stamp`,
    and clear its mark: what a stamped `native_scatter` with `stamp` did not write."""
    assert buffer.is_contiguous() and marks.is_contiguous() and marks.numel() == buffer.shape[0]
    _lib().sr_grad_clear_stale(
        _PTR(buffer.data_ptr()),
        _PTR(marks.data_ptr()),
        _I64(buffer.shape[0]),
        _I64(buffer.shape[1]),
        ctypes.c_int(stamp),
        ctypes.c_int(torch.get_num_threads()),
    )


def _psw_grad(
    weights: Sequence[Tensor],
    values: Tensor,
    offsets: Tensor,
    grad: Tensor,
    tables: Sequence[int],
    keys: Sequence[int],
) -> Tensor:
    out = torch.zeros(values.numel(), dtype=torch.float32)
    batch = grad.shape[0]
    if batch == 0 or not tables:
        return out
    segs, _ = _segments(weights, tables, keys, [0] * len(tables))
    values, kernel = _index_kernel(values, "sr_psw_grad")
    kernel(
        segs,
        _I64(len(tables)),
        _I64(batch),
        _PTR(values.data_ptr()),
        _PTR(offsets.data_ptr()),
        _PTR(grad.data_ptr()),
        _I64(grad.stride(0)),
        _PTR(out.data_ptr()),
        ctypes.c_int(torch.get_num_threads()),
    )
    return out


# ---- torch ops ----------------------------------------------------------------------------
# Each op's fake (meta) implementation repeats the op's typed signature: torch calls it with
# the op's arguments (the schema is inferred from the op's annotations).


@torch.library.custom_op("shardrec::pooled_lookup", mutates_args=(), device_types="cpu")
def pooled_lookup(
    weights: list[Tensor],
    values: Tensor,
    offsets: Tensor,
    per_sample_weights: Tensor | None,
    segment_tables: list[int],
    segment_keys: list[int],
    segment_means: list[int],
    batch_size: int,
    names: str,
) -> Tensor:
    """`(B, sum of segment dims)` fp32 pooled rows; IndexError for an id outside its table.

    weights: per table `(R_t, D_t)` contiguous fp32. values: `(N,)` int32/int64 KJT ids.
    offsets: `(F * B + 1,)` int64 KJT offsets. per_sample_weights: `(N,)` fp32 or None.
    names: `feature \\x1f table` of each segment, `\\x1f`-joined (for the error message).
    """
    return _forward(
        weights,
        values,
        offsets,
        per_sample_weights,
        segment_tables,
        segment_keys,
        segment_means,
        batch_size,
        names,
    )


@pooled_lookup.register_fake
def _pooled_lookup_fake(
    weights: list[Tensor],
    values: Tensor,
    offsets: Tensor,
    per_sample_weights: Tensor | None,
    segment_tables: list[int],
    segment_keys: list[int],
    segment_means: list[int],
    batch_size: int,
    names: str,
) -> Tensor:
    width = sum(weights[t].shape[1] for t in segment_tables)
    return values.new_empty((batch_size, width), dtype=torch.float32)


@torch.library.custom_op("shardrec::pooled_lookup_backward", mutates_args=(), device_types="cpu")
def pooled_lookup_backward(
    grad: Tensor,
    rows: list[int],
    dims: list[int],
    values: Tensor,
    offsets: Tensor,
    per_sample_weights: Tensor | None,
    segment_tables: list[int],
    segment_keys: list[int],
    segment_means: list[int],
) -> list[Tensor]:
    """Dense gradient `(rows[t], dims[t])` of each table from the output gradient
    `(B, total_dim)`."""
    grads = [torch.zeros(r, d, dtype=torch.float32) for r, d in zip(rows, dims, strict=True)]
    native_scatter(
        grads,
        values,
        offsets,
        per_sample_weights,
        grad.contiguous(),
        segment_tables,
        segment_keys,
        segment_means,
    )
    return grads


@pooled_lookup_backward.register_fake
def _pooled_lookup_backward_fake(
    grad: Tensor,
    rows: list[int],
    dims: list[int],
    values: Tensor,
    offsets: Tensor,
    per_sample_weights: Tensor | None,
    segment_tables: list[int],
    segment_keys: list[int],
    segment_means: list[int],
) -> list[Tensor]:
    return [grad.new_empty((r, d)) for r, d in zip(rows, dims, strict=True)]


@torch.library.custom_op("shardrec::pooled_lookup_psw_grad", mutates_args=(), device_types="cpu")
def pooled_lookup_psw_grad(
    grad: Tensor,
    weights: list[Tensor],
    values: Tensor,
    offsets: Tensor,
    segment_tables: list[int],
    segment_keys: list[int],
) -> Tensor:
    """`(N,)` gradient of each per-sample weight: its row dotted with its bag's gradient."""
    return _psw_grad(weights, values, offsets, grad.contiguous(), segment_tables, segment_keys)


@pooled_lookup_psw_grad.register_fake
def _pooled_lookup_psw_grad_fake(
    grad: Tensor,
    weights: list[Tensor],
    values: Tensor,
    offsets: Tensor,
    segment_tables: list[int],
    segment_keys: list[int],
) -> Tensor:
    return values.new_empty(values.shape, dtype=torch.float32)


def _setup_context(
    ctx: torch.autograd.function.FunctionCtx,
    inputs: tuple[object, ...],
    output: Tensor,
) -> None:
    weights, values, offsets, psw, tables, keys, means, _batch, _names = inputs
    assert isinstance(weights, list) and isinstance(psw, Tensor | None)
    # The rows are needed only for the per-sample-weight gradient; not saving them otherwise
    # lets callers update weights in place between forward and backward.
    psw_grad = psw is not None and psw.requires_grad
    ctx.save_for_backward(values, offsets, psw, *(weights if psw_grad else ()))  # type: ignore[arg-type]  # None allowed at runtime
    shapes = ([w.shape[0] for w in weights], [w.shape[1] for w in weights])
    ctx.meta = (tables, keys, means, shapes)  # type: ignore[attr-defined]  # FunctionCtx takes attributes


def _backward(ctx: torch.autograd.function.FunctionCtx, grad: Tensor) -> tuple[object, ...]:
    values, offsets, psw, *weights = ctx.saved_tensors  # type: ignore[attr-defined]  # set above
    tables, keys, means, (rows, dims) = ctx.meta  # type: ignore[attr-defined]  # set in _setup_context
    needs = ctx.needs_input_grad  # type: ignore[attr-defined]  # set by autograd
    grad = grad.contiguous()
    weight_grads = torch.ops.shardrec.pooled_lookup_backward(
        grad, rows, dims, values, offsets, psw, tables, keys, means
    )
    psw_grad = None
    if psw is not None and needs[3]:
        psw_grad = torch.ops.shardrec.pooled_lookup_psw_grad(
            grad, weights, values, offsets, tables, keys
        ).to(psw.dtype)
    return (list(weight_grads), None, None, psw_grad, None, None, None, None, None)


pooled_lookup.register_autograd(_backward, setup_context=_setup_context)


# ---- eager training path (reuses gradient buffers) ----------------------------------------


class GradLease(NamedTuple):
    """Dense gradient buffers for one backward (see `GradWorkspace.stamped`).

    grads: per table `(R_t, D_t)` fp32. stamps: None when `grads` are zeroed; else per table
    `(R_t,)` uint8 row marks for a stamped scatter with `stamp`, after which `finish()` must
    run (it zeroes the rows an earlier pass left and records the buffers' state)."""

    grads: list[Tensor]
    stamps: list[Tensor] | None
    stamp: int
    finish: Callable[[], None]


GradBuffers = Callable[[], GradLease]
"""Returns the gradient buffers of one backward, one per table (see `GradLease`)."""


class _EagerLookup(torch.autograd.Function):
    """`pooled_lookup` whose backward writes into caller-provided (reused) gradient buffers:
    a fresh 665 MB `torch.zeros` per step page-faults for ~200 ms on our CPU."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        spec: tuple[list[int], list[int], list[int], int, str, GradBuffers | None],
        values: Tensor,
        offsets: Tensor,
        psw: Tensor | None,
        *weights: Tensor,
    ) -> Tensor:
        tables, keys, means, batch, names, _ = spec
        out = _forward(weights, values, offsets, psw, tables, keys, means, batch, names)
        psw_grad = psw is not None and psw.requires_grad
        ctx.save_for_backward(values, offsets, psw, *(weights if psw_grad else ()))  # type: ignore[arg-type]  # None allowed at runtime
        ctx.spec = spec  # type: ignore[attr-defined]  # FunctionCtx takes attributes
        ctx.shapes = [(w.shape[0], w.shape[1]) for w in weights]  # type: ignore[attr-defined]  # FunctionCtx takes attributes
        return out

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad: Tensor
    ) -> tuple[Tensor | None, ...]:
        values, offsets, psw, *weights = ctx.saved_tensors  # type: ignore[attr-defined]  # set above
        tables, keys, means, _batch, _names, buffers = ctx.spec  # type: ignore[attr-defined]  # set above
        shapes: list[tuple[int, int]] = ctx.shapes  # type: ignore[attr-defined]  # set above
        needs = ctx.needs_input_grad  # type: ignore[attr-defined]  # set by autograd
        grad = grad.contiguous().float()
        weight_grads: list[Tensor | None] = [None] * len(shapes)
        if any(needs[4:]):
            if buffers is not None:
                lease = buffers()
                native_scatter(
                    lease.grads,
                    values,
                    offsets,
                    psw,
                    grad,
                    tables,
                    keys,
                    means,
                    stamps=lease.stamps,
                    stamp=lease.stamp,
                )
                lease.finish()
                weight_grads = list(lease.grads)
            else:
                grads = [torch.zeros(r, d, dtype=torch.float32) for r, d in shapes]
                native_scatter(grads, values, offsets, psw, grad, tables, keys, means)
                weight_grads = list(grads)
        psw_grad = None
        if psw is not None and needs[3]:
            psw_grad = _psw_grad(weights, values, offsets, grad, tables, keys).to(psw.dtype)
        return (None, None, None, psw_grad, *weight_grads)


def native_pooled_lookup(
    weights: Sequence[Tensor],
    values: Tensor,
    offsets: Tensor,
    per_sample_weights: Tensor | None,
    *,
    segment_tables: Sequence[int],
    segment_keys: Sequence[int],
    segment_means: Sequence[int],
    batch_size: int,
    names: str,
    grad_buffers: GradBuffers | None = None,
) -> Tensor:
    """Call `shardrec::pooled_lookup` (see there); in eager training, through a Function whose
    backward fills `grad_buffers()` instead of fresh zeros. Inputs must be CPU, weights fp32
    and contiguous (callers check `native_applies`)."""
    offsets = offsets.to(torch.int64).contiguous()
    psw = None
    if per_sample_weights is not None:
        psw = per_sample_weights
        if psw.dtype is not torch.float32 or not psw.is_contiguous():
            psw = psw.float().contiguous()
    args = (list(segment_tables), list(segment_keys), list(segment_means), batch_size, names)
    needs_grad = torch.is_grad_enabled() and (
        any(w.requires_grad for w in weights) or (psw is not None and psw.requires_grad)
    )
    if not _plain_eager(values, weights):
        # Tracing (export, compile, fx, fake tensors): the op and its registered autograd.
        out: Tensor = torch.ops.shardrec.pooled_lookup(list(weights), values, offsets, psw, *args)
        return out
    if not needs_grad:
        # The op's own implementation, without its dispatch (~65 us a call).
        return _forward(weights, values, offsets, psw, *args)
    result: Tensor = _EagerLookup.apply(  # type: ignore[no-untyped-call]  # torch leaves apply untyped
        (*args, grad_buffers), values, offsets, psw, *weights
    )
    return result


def _plain_eager(values: Tensor, weights: Sequence[Tensor]) -> bool:
    """True outside every tracer: plain tensors, no dispatch mode (fake / proxy tensors), not
    compiling or exporting, not fx symbolic tracing."""
    if torch.compiler.is_compiling() or torch.fx._symbolic_trace.is_fx_symbolic_tracing():
        return False
    if torch._C._len_torch_dispatch_stack() > 0:
        return False
    return type(values) is Tensor and all(type(w) in (Tensor, torch.nn.Parameter) for w in weights)


def native_applies(weights: Sequence[Tensor], values: Tensor) -> bool:
    """Whether `native_pooled_lookup` can take these inputs (CPU, fp32 contiguous tables)."""
    if values.device.type != "cpu" or values.is_floating_point():
        return False
    for w in weights:
        if w.device.type != "cpu" or w.dtype is not torch.float32 or not w.is_contiguous():
            return False
        if w.dim() != 2 or w.shape[1] > MAX_DIM:
            return False
    return native_available()
