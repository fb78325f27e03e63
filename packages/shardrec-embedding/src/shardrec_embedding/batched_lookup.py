"""Table-batched lookups: one kernel call for a group of tables sharing (dim, dtype, pooling).

The tables of a group live in one packed buffer; each table's `weight` Parameter is a view of
its rows, so optimizers, `state_dict()` and user code still see one tensor per table:

```
packed buffer (total_rows, D)         per-table Parameters (views, no copies)
  rows [0, r0)            ---------->   table 0 weight (r0, D)
  rows [r0, r0 + r1)      ---------->   table 1 weight (r1, D)
  ...
ids of a lookup: table-local id + the table's first row ("row offset") -> group row
```

A lookup reads the whole group through one `(total_rows, D)` view of that buffer and runs one
`embedding_bag` (pooled) or one `index_select` (sequence). Its backward scatters the output
gradient into one dense `(total_rows, D)` buffer and hands each table the `(r_t, D)` slice
as its gradient: gradients reach each table's own `weight`, exactly as with one
`nn.EmbeddingBag` per table. docs/design/embedding-table-batching.md records the measurements.

Everything here is a function of tensors (weights, ids, offsets, row counts), not of a module,
so fused (optimizer-in-backward) modules and sharded lookups over local shards reuse it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from shardrec_embedding.configs import PoolingType
from shardrec_embedding.memory import huge_pages
from shardrec_embedding.triton import ops as triton_ops

__all__ = [
    "GradWorkspace",
    "allocate_packed",
    "batched_embedding",
    "batched_embedding_bag",
    "next_stamp",
    "out_of_range_segments",
    "packed_weight",
    "repack_",
    "shift_ids",
    "split_rows",
]

_MODE = {PoolingType.SUM: 0, PoolingType.MEAN: 1}
# Ids scattered per chunk in backward: bounds the temporary (chunk, D) gradient rows to ~8 MiB
# so they are recycled by the allocator instead of page-faulted in on every step.
_CHUNK_BYTES = 8 << 20


def allocate_packed(
    row_counts: Sequence[int],
    dim: int,
    *,
    dtype: torch.dtype,
    device: torch.device | str | None = None,
) -> list[torch.Tensor]:
    """One uninitialized `(sum(row_counts), dim)` buffer, returned as per-table row views.

    Wrap each view in `nn.Parameter` (which shares storage) to get packed table weights.
    """
    buffer = torch.empty(sum(row_counts), dim, dtype=dtype, device=device)
    huge_pages(buffer)  # rows are read and updated at random: 2 MB pages (memory.py)
    return split_rows(buffer, row_counts)


def split_rows(t: torch.Tensor, row_counts: Sequence[int]) -> list[torch.Tensor]:
    """Views of consecutive row blocks of `t`: `t[0:r0]`, `t[r0:r0 + r1]`, ..."""
    out: list[torch.Tensor] = []
    start = 0
    for n in row_counts:
        out.append(t.narrow(0, start, n))
        start += n
    return out


def packed_weight(weights: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The `(total_rows, D)` view covering `weights` when they are consecutive rows of one
    storage (as made by `allocate_packed`), else `None`. Costs a few pointer reads per table."""
    first = weights[0]
    if first.dim() != 2 or first.device.type == "meta":
        return None
    dim = first.shape[1]
    row_bytes = dim * first.element_size()
    expected = first.data_ptr()
    total_rows = 0
    for w in weights:
        if (
            w.data_ptr() != expected
            or w.dim() != 2
            or w.shape[1] != dim
            or w.dtype != first.dtype
            or not w.is_contiguous()
        ):
            return None
        expected += w.shape[0] * row_bytes
        total_rows += w.shape[0]
    storage = first.untyped_storage()
    if storage.data_ptr() + storage.nbytes() < expected:
        return None
    # Reads past `first`'s own rows into the rows of the following tables; checked above.
    return first.detach().as_strided((total_rows, dim), (dim, 1))


def repack_(weights: Sequence[torch.Tensor]) -> None:
    """Move `weights` (Parameters or tensors) into one new packed buffer, in place.

    Each tensor keeps its identity (optimizers and hooks still hold it); only its `.data`
    is re-pointed. Used after `module.to(...)` / `to_empty(...)` split a packed group.
    """
    if packed_weight(weights) is not None:
        return
    first = weights[0]
    views = allocate_packed(
        [w.shape[0] for w in weights], first.shape[1], dtype=first.dtype, device=first.device
    )
    with torch.no_grad():
        for w, view in zip(weights, views, strict=True):
            if w.device.type != "meta":
                view.copy_(w)
            w.data = view


class GradWorkspace:
    """A dense `(total_rows, D)` gradient buffer reused across backward passes of one group.

    A fresh multi-hundred-MB `torch.zeros` page-faults every page (measured 214 ms for 665 MB
    on our CPU, against 13 ms to re-zero a resident buffer), which dominates a dense backward.
    The buffer is reused only when nothing else references its storage any more (the
    gradients handed out last time were dropped, e.g. by `zero_grad(set_to_none=True)`);
    otherwise a new one is allocated, so a gradient a caller still holds is never overwritten.

    Stamped reuse (the native CPU backward, `stamped` / `settle`): instead of zeroing all of
    a reused buffer, the scatter zeroes each row on its first touch and marks it with the
    pass's stamp (one byte per row), then `native_clear_stale` zeroes the rows the previous
    pass wrote that this one did not. The buffer then holds exactly zeros + scatter. This is
    taken only when the buffer provably still holds what the last settled pass left: idle (as
    above) and its version counter unchanged since `settle` (any in-place op on the handed-out
    gradients or their views, e.g. `zero_grad(set_to_none=False)`, gradient clipping, a
    second backward accumulating into them, bumps it). Otherwise: a full zero, as `zeros`.
    Writes that bypass the version counter (`.grad.data`, `.numpy()`, raw pointers) are not
    seen (docs/porting.md).
    """

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None
        self._idle_refs = -1
        self._marks: torch.Tensor | None = None
        self._settled: tuple[int, int] | None = None  # (buffer version, stamp) after `settle`

    def _idle(self, rows: int, dim: int, dtype: torch.dtype, device: torch.device) -> bool:
        buffer = self._buffer
        return (
            buffer is not None
            and buffer.shape == (rows, dim)
            and buffer.dtype == dtype
            and buffer.device == device
            and _storage_refs(buffer) == self._idle_refs
        )

    def zeros(self, rows: int, dim: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        self._settled = None
        if self._idle(rows, dim, dtype, device):
            assert self._buffer is not None
            return self._buffer.zero_()
        buffer = torch.zeros(rows, dim, dtype=dtype, device=device)
        refs = _storage_refs(buffer)
        if refs >= 0:
            self._buffer, self._idle_refs = buffer, refs
        return buffer

    def stamped(self, rows: int, dim: int, stamp: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A `(rows, dim)` fp32 CPU buffer and its `(rows,)` uint8 row marks for a stamped
        scatter with `stamp` (1..255, see `next_stamp`): rows marked 0 are zero, the others
        hold an earlier pass's sums. The caller scatters with the marks, runs
        `native_clear_stale(buffer, marks, stamp)`, then calls `settle(buffer, stamp)`."""
        settled, marks, cpu = self._settled, self._marks, torch.device("cpu")
        if (
            settled is not None
            and marks is not None
            and self._idle(rows, dim, torch.float32, cpu)
            and self._buffer is not None
            and settled[0] == self._buffer._version
            and settled[1] != stamp
        ):
            self._settled = None  # until `settle`: a pass that fails midway is not trusted
            return self._buffer, marks
        buffer = self.zeros(rows, dim, torch.float32, cpu)
        if marks is None or marks.numel() != rows:
            marks = torch.zeros(rows, dtype=torch.uint8)
        else:
            marks.zero_()
        self._marks = marks
        return buffer, marks

    def settle(self, buffer: torch.Tensor, stamp: int) -> None:
        """Record that `buffer` (from `stamped`) now holds exactly zeros + the pass `stamp`."""
        if buffer is self._buffer:
            self._settled = (buffer._version, stamp)

    def release(self) -> None:
        """Drop the cached buffer (its memory is freed once handed-out gradients die)."""
        self._buffer = None
        self._marks = None
        self._settled = None


_STAMP = [0]


def next_stamp() -> int:
    """A new pass stamp for `GradWorkspace.stamped`, cycling through 1..255 (a workspace whose
    last pass carried the same stamp falls back to a full zero)."""
    _STAMP[0] = _STAMP[0] % 255 + 1
    return _STAMP[0]


def _storage_refs(t: torch.Tensor) -> int:
    try:
        return int(torch._C._storage_Use_Count(t.untyped_storage()._cdata))
    except (AttributeError, RuntimeError):  # private API gone: never reuse, stay correct
        return -1


def shift_ids(segments: Sequence[torch.Tensor], row_offsets: Sequence[int]) -> torch.Tensor:
    """Concatenate table-local id segments into group rows: `out = cat(seg_i + row_offsets[i])`.

    segments: per (feature, table) pair, ids `(n_i,)` of any integer dtype.
    Returns `(sum n_i,)` int64. One fused add per segment, written in place (measured 0.3 ms
    for 26 segments of 40k ids, several times cheaper than building per-id offset tensors).
    """
    total = sum(int(s.numel()) for s in segments)
    device = segments[0].device if segments else None
    out = torch.empty(total, dtype=torch.int64, device=device)
    start = 0
    for seg, offset in zip(segments, row_offsets, strict=True):
        end = start + int(seg.numel())
        torch.add(seg, offset, out=out[start:end])
        start = end
    return out


def out_of_range_segments(
    segments: Sequence[torch.Tensor], row_counts: Sequence[int]
) -> list[tuple[int, int]]:
    """`(segment index, first offending id)` for each segment holding an id outside
    `[0, row_counts[i])`. One `aminmax` per non-empty segment plus one host sync."""
    checked = [(i, s) for i, s in enumerate(segments) if s.numel() > 0]
    if not checked:
        return []
    bounds = torch.stack([torch.stack(torch.aminmax(s)) for _, s in checked]).cpu()
    bad: list[tuple[int, int]] = []
    for (i, seg), (low, high) in zip(checked, bounds.tolist(), strict=True):
        if low < 0 or high >= row_counts[i]:
            offending = seg[(seg < 0) | (seg >= row_counts[i])][0]
            bad.append((i, int(offending)))
    return bad


class _PackedLookup(torch.autograd.Function):
    """Lookup over a packed group with per-table weights as autograd inputs.

    The weights are saved for backward only when `per_sample_weights` needs a gradient (it
    reads the rows); otherwise in-place updates between forward and backward are harmless.
    """

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        ids: torch.Tensor,
        offsets: torch.Tensor | None,
        per_sample_weights: torch.Tensor | None,
        pooling: PoolingType,
        workspace: GradWorkspace | None,
        *weights: torch.Tensor,
    ) -> torch.Tensor:
        full = packed_weight(weights)
        assert full is not None, "caller checks packing"
        out = _lookup(full, ids, offsets, per_sample_weights, pooling)
        psw_grad = per_sample_weights is not None and per_sample_weights.requires_grad
        saved = (ids, offsets, per_sample_weights, *(weights if psw_grad else ()))
        # save_for_backward accepts None entries at runtime; the stubs say Tensor only.
        ctx.save_for_backward(*saved)  # type: ignore[arg-type]
        rows = [w.shape[0] for w in weights]
        layout = (full.shape[1], full.dtype, full.device, full.element_size())
        # FunctionCtx takes arbitrary attributes; its stub does not declare them.
        ctx.meta = (pooling, workspace, rows, layout)  # type: ignore[attr-defined]
        return out

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        ids, offsets, psw, *weights = ctx.saved_tensors  # type: ignore[attr-defined]
        pooling, workspace, row_counts, layout = ctx.meta  # type: ignore[attr-defined]
        needs = ctx.needs_input_grad  # type: ignore[attr-defined]
        dim, dtype, device, itemsize = layout
        total_rows = sum(row_counts)
        grad_out = grad_out.contiguous().to(dtype)
        row_scale = _row_scale(ids, offsets, psw, pooling)
        bag = None if offsets is None else _bag_of_id(offsets, ids.numel())
        chunk = max(1, _CHUNK_BYTES // max(1, dim * itemsize))
        weight_grads: list[torch.Tensor | None] = [None] * len(row_counts)
        if any(needs[5:]):
            if workspace is None:
                grad_full = torch.zeros(total_rows, dim, dtype=dtype, device=device)
            else:
                grad_full = workspace.zeros(total_rows, dim, dtype, device)
            for start in range(0, ids.numel(), chunk):
                end = start + chunk
                if bag is None:
                    rows = grad_out[start:end]
                else:
                    rows = grad_out.index_select(0, bag[start:end])
                if row_scale is not None:
                    rows = (rows * row_scale[start:end].unsqueeze(1)).to(dtype)
                grad_full.index_add_(0, ids[start:end], rows)
            weight_grads = list(split_rows(grad_full, row_counts))
        grad_psw = None
        if psw is not None and needs[2]:
            assert bag is not None
            full = packed_weight(weights)
            assert full is not None
            grad_psw = torch.empty(ids.numel(), dtype=psw.dtype, device=psw.device)
            for start in range(0, ids.numel(), chunk):
                end = start + chunk
                rows = full.index_select(0, ids[start:end])
                grads = grad_out.index_select(0, bag[start:end])
                grad_psw[start:end] = (rows.float() * grads.float()).sum(1)
        return (None, None, grad_psw, None, None, *weight_grads)


def _lookup(
    full: torch.Tensor,
    ids: torch.Tensor,
    offsets: torch.Tensor | None,
    per_sample_weights: torch.Tensor | None,
    pooling: PoolingType,
) -> torch.Tensor:
    if offsets is None:
        return full.index_select(0, ids)
    psw = None if per_sample_weights is None else per_sample_weights.to(full.dtype)
    if full.is_cuda and triton_ops.forward_applies(full):
        return triton_ops.pooled_embedding_bag(
            full, ids, offsets, mean=pooling is PoolingType.MEAN, per_sample_weights=psw
        )
    out: torch.Tensor = torch.ops.aten._embedding_bag_forward_only(
        full, ids, offsets, False, _MODE[pooling], False, psw, True, -1
    )[0]
    return out


def _bag_of_id(offsets: torch.Tensor, num_ids: int) -> torch.Tensor:
    num_bags = offsets.numel() - 1
    lengths = offsets[1:] - offsets[:-1]
    bags = torch.arange(num_bags, device=offsets.device)
    return torch.repeat_interleave(bags, lengths, output_size=num_ids)


def _row_scale(
    ids: torch.Tensor,
    offsets: torch.Tensor | None,
    psw: torch.Tensor | None,
    pooling: PoolingType,
) -> torch.Tensor | None:
    """Per-id factor on the output gradient: the id's weight (SUM) or 1/bag size (MEAN)."""
    if offsets is None:
        return None
    if pooling is PoolingType.MEAN:
        lengths = offsets[1:] - offsets[:-1]
        inverse = 1.0 / lengths.clamp(min=1)
        return torch.repeat_interleave(inverse, lengths, output_size=ids.numel())
    return psw


def batched_embedding_bag(
    weights: Sequence[torch.Tensor],
    ids: torch.Tensor,
    offsets: torch.Tensor,
    *,
    pooling: PoolingType = PoolingType.SUM,
    per_sample_weights: torch.Tensor | None = None,
    workspace: GradWorkspace | None = None,
) -> torch.Tensor:
    """Pooled lookup of bags over a group of tables, one kernel call.

    weights: per table `(r_t, D)`, same D and dtype; fast when packed (`allocate_packed`).
    ids: `(N,)` group rows, i.e. table-local ids already shifted by `shift_ids`.
    offsets: `(num_bags + 1,)` int64, bag `b` is `ids[offsets[b]:offsets[b + 1]]`.
    per_sample_weights: `(N,)` multiplies each row before a SUM (not allowed with MEAN).
    workspace: reuses the dense gradient buffer between steps (see `GradWorkspace`).
    Returns `(num_bags, D)` in the tables' dtype; empty bags give zeros.
    Gradients flow to every `weights[t]` (dense, like `nn.EmbeddingBag`) and to
    `per_sample_weights` when it requires grad. Ids are not range-checked here.
    """
    if pooling not in _MODE:
        raise ValueError(f"pooling {pooling!r} is not a bag pooling; use batched_embedding")
    if per_sample_weights is not None and pooling is not PoolingType.SUM:
        raise ValueError(f"per_sample_weights need SUM pooling, got {pooling}")
    return _dispatch(weights, ids, offsets, per_sample_weights, pooling, workspace)


def batched_embedding(
    weights: Sequence[torch.Tensor],
    ids: torch.Tensor,
    *,
    workspace: GradWorkspace | None = None,
) -> torch.Tensor:
    """Per-id (unpooled) lookup over a group of tables: `(N,)` group rows -> `(N, D)`."""
    return _dispatch(weights, ids, None, None, PoolingType.NONE, workspace)


def _dispatch(
    weights: Sequence[torch.Tensor],
    ids: torch.Tensor,
    offsets: torch.Tensor | None,
    psw: torch.Tensor | None,
    pooling: PoolingType,
    workspace: GradWorkspace | None,
) -> torch.Tensor:
    full = packed_weight(weights)
    if full is None:
        # Not packed (e.g. weights built elsewhere): one copy per call, autograd through cat.
        cat = torch.cat(list(weights))
        if offsets is None:
            return torch.nn.functional.embedding(ids, cat)
        return torch.nn.functional.embedding_bag(
            ids,
            cat,
            offsets,
            mode=pooling.value.lower(),
            per_sample_weights=None if psw is None else psw.to(cat.dtype),
            include_last_offset=True,
        )
    if not torch.is_grad_enabled() or not (
        any(w.requires_grad for w in weights) or (psw is not None and psw.requires_grad)
    ):
        return _lookup(full, ids, offsets, psw, pooling)
    # Function.apply is untyped in torch's stubs.
    out: torch.Tensor = _PackedLookup.apply(  # type: ignore[no-untyped-call]
        ids, offsets, psw, pooling, workspace, *weights
    )
    return out
