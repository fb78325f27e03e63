"""Pooled lookup of several fused packed groups straight from a KJT into one output.

The fast path of a sharded rank's lookup (issue 28): every (table, KJT key) *segment* of
every group is pooled by one native forward call into its final columns of one `(B, W)`
output, and backward updates each group in place from that output's gradient. Compared with
a `BatchedFusedEmbeddingBag` call per group, nothing shifts ids into group rows, nothing
concatenates the groups' `(bags, D)` blocks into the output, and nothing stacks the output's
gradient back into per-group blocks.

```
KJT (keys f0 f1 f2, B bags each)      output (B, W)
  segment 0: key f1, group 0 table 1  -> columns [0, 64)
  segment 1: key f0, group 0 table 0  -> columns [64, 128)
  (no table for f2)                   -> columns [128, 192) zeros
```

Same update as the group's own lookup on the native backend, in the same summation order
(segments in order, bags in order, ids in order). Rowwise Adagrad runs the native one-pass
kernel here even where `backend="auto"` would take fbgemm's for a group call: in the step
it is the faster one once the gradient needs no copy (docs/bench/sharded.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import Tensor

from shardrec_embedding._native import (
    MAX_DIM,
    MAX_IDS,
    GradientPiece,
    Presorted,
    native_pooled_into,
    native_presorted_update,
    native_scatter,
    native_segment_presort,
    native_segment_update,
)
from shardrec_embedding.configs import PoolingType
from shardrec_embedding.fused.batched import BatchedFusedEmbeddingBag
from shardrec_embedding.fused.kernels import native_backward_unsupported, native_workspace
from shardrec_embedding.fused.lookup import KERNELS
from shardrec_optim import EmbOptimType

__all__ = [
    "GradientPieces",
    "SegmentRead",
    "gradient_pieces",
    "segment_lookup",
    "segment_lookup_unsupported",
]

_RULES = {
    EmbOptimType.EXACT_ROWWISE_ADAGRAD: "rowwise_adagrad",
    EmbOptimType.ROWWISE_ADAGRAD: "rowwise_adagrad",
    EmbOptimType.EXACT_ADAGRAD: "adagrad",
    EmbOptimType.EXACT_SGD: "sgd",
    EmbOptimType.SGD: "sgd",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SegmentRead:
    """One output block: KJT key `key` pooled through table `table` (index into the group's
    tables) of group `group`, written at columns `[col, col + dim)`."""

    group: int
    table: int
    key: int
    col: int


def segment_lookup_unsupported(module: object, values: Tensor) -> str | None:
    """Why `segment_lookup` cannot run `module` (a group) on KJT ids `values`, or None when
    it can (eager CPU only: a tracer sees the groups' own lookups)."""
    if (
        torch.compiler.is_compiling()
        or torch.fx._symbolic_trace.is_fx_symbolic_tracing()
        or torch._C._len_torch_dispatch_stack() > 0
        or type(values) is not Tensor
        or values.device.type != "cpu"
    ):
        return "it runs in eager mode on CPU ids only"
    if "native" not in KERNELS:
        return "the native backend was taken out of fused.KERNELS"
    if not isinstance(module, BatchedFusedEmbeddingBag):
        return f"it runs BatchedFusedEmbeddingBag groups, not {type(module).__name__}"
    if module.spec.optimizer not in _RULES:
        return f"it has no native one-pass update for {module.spec.optimizer.name}"
    if module.dim > MAX_DIM:
        return f"it takes dims up to {MAX_DIM}, got {module.dim}"
    weight = module.packed_weight()
    empty = torch.empty(0, dtype=torch.float32)
    return native_backward_unsupported(module.spec, weight, empty, None)


class GradientPieces:
    """Where a consumer of a `segment_lookup` output hands part of its gradient in two row
    pieces instead of through autograd (the row-wise reduce-scatter's backward: its own rows
    and the other rank's, received, with no copy into one `(B, W)` tensor; session 12).

    `put(split, first, second)`: rows `[0, split)` of the gradient in `first`, `[split, B)`
    in `second`, to be added to what autograd delivers (the putter gives autograd zeros for
    them). The lookup's backward takes them: when autograd's gradient is those zeros (a
    zero-stride scalar expanded, as `reduce_scatter_pooled` gives) and every group runs the
    one-pass update, the kernel reads the two pieces where they lie; otherwise it adds them
    to autograd's gradient first (the same values)."""

    def __init__(self) -> None:
        self._pieces: tuple[int, Tensor, Tensor] | None = None

    def put(self, split: int, first: Tensor, second: Tensor) -> None:
        if self._pieces is not None:
            raise RuntimeError("GradientPieces already holds a gradient not yet taken")
        self._pieces = (split, first, second)

    def take(self) -> tuple[int, Tensor, Tensor] | None:
        pieces, self._pieces = self._pieces, None
        return pieces


_PIECES = "_shardrec_gradient_pieces"


def gradient_pieces(out: Tensor) -> GradientPieces | None:
    """The `GradientPieces` of a `segment_lookup` output (None: not one, or no autograd)."""
    pieces = getattr(out, _PIECES, None)
    return pieces if isinstance(pieces, GradientPieces) else None


@dataclasses.dataclass(frozen=True, eq=False)
class _Plan:
    groups: tuple[BatchedFusedEmbeddingBag, ...]
    reads: tuple[SegmentRead, ...]
    width: int
    zero_cols: tuple[tuple[int, int], ...]
    names: str
    presort: bool = False
    pieces: GradientPieces = dataclasses.field(default_factory=GradientPieces)


PRESORT_MIN_IDS = 1 << 16
"""Fewest ids of a group that `segment_lookup(presort=True)` sorts in forward (below, a helper
thread costs more than the sort it moves)."""


class _SegmentLookup(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        plan: _Plan,
        values: Tensor,
        offsets: Tensor,
        batch: int,
        *weights: Tensor,
    ) -> Tensor:
        out = _pool(plan, values, offsets, batch)
        ctx.save_for_backward(values, offsets)
        ctx.plan = plan  # type: ignore[attr-defined]  # FunctionCtx allows attributes
        ctx.batch = batch  # type: ignore[attr-defined]  # FunctionCtx allows attributes
        ctx.presorted = _presort(plan, values, offsets, batch) if plan.presort else None  # type: ignore[attr-defined]
        return out

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: Tensor) -> tuple[None, ...]:
        values, offsets = ctx.saved_tensors  # type: ignore[attr-defined]
        plan: _Plan = ctx.plan  # type: ignore[attr-defined]
        batch: int = ctx.batch  # type: ignore[attr-defined]
        grad, second = _whole_or_pieces(plan, grad, plan.pieces.take())
        grad = grad.to(torch.float32)
        if grad.stride(-1) != 1 or grad.stride(0) < grad.shape[1]:
            grad = grad.contiguous()
        presorted: tuple[Presorted | None, ...] | None = ctx.presorted  # type: ignore[attr-defined]
        ctx.presorted = None  # type: ignore[attr-defined]
        # ids per KJT key: a group's sort holds one entry per (segment, id)
        per_key = _ids_per_key(plan, offsets, batch)
        with torch.no_grad(), torch.profiler.record_function("fused.native_segment_backward"):
            for g, module in enumerate(plan.groups):
                reads = [r for r in plan.reads if r.group == g]
                pre = presorted[g] if presorted is not None else None
                if pre is not None and _apply_presorted(module, pre, batch, grad, second):
                    continue
                entries = sum(per_key[r.key] for r in reads)
                _update(module, reads, values, offsets, batch, grad, entries, second)
        return (None, None, None, None, *([None] * (len(ctx.needs_input_grad) - 4)))  # type: ignore[attr-defined]


def _whole_or_pieces(
    plan: _Plan, grad: Tensor, pieces: tuple[int, Tensor, Tensor] | None
) -> tuple[Tensor, GradientPiece | None]:
    """The gradient the update reads: autograd's alone, autograd's plus `GradientPieces`' in
    one tensor, or (autograd's being zeros, every group one-pass, the pieces fp32 rows of
    row stride W) the first piece and the second beside it."""
    if pieces is None:
        return grad, None
    split, first, rest = pieces
    if (
        first.dim() != 2
        or rest.dim() != 2
        or (first.shape[0] + rest.shape[0], first.shape[1]) != tuple(grad.shape)
        or rest.shape[1] != first.shape[1]
        or first.shape[0] != split
    ):
        raise ValueError(
            f"gradient pieces of shapes {tuple(first.shape)} and {tuple(rest.shape)} split at "
            f"row {split} do not make the lookup output's {tuple(grad.shape)}"
        )
    zeros = grad.numel() > 0 and grad.stride() == (0, 0) and float(grad[0, 0]) == 0.0
    if not zeros:
        return grad + torch.cat([first, rest]), None
    if any(_RULES[m.spec.optimizer] == "sgd" for m in plan.groups):
        # autograd's zeros add nothing (and would turn a -0.0 gradient into +0.0)
        return torch.cat([first, rest]), None
    # rows of one piece at row stride W (a copy only if autograd gave them otherwise)
    first, rest = (p.to(torch.float32).contiguous() for p in (first, rest))
    return first, GradientPiece(split=split, rows=rest)


def _ids_per_key(plan: _Plan, offsets: Tensor, batch: int) -> list[int]:
    """Ids per KJT key; a zero batch holds none (its offsets cannot be strided per key)."""
    if batch == 0:
        return [0] * (max((r.key for r in plan.reads), default=-1) + 1)
    out: list[int] = offsets[::batch].diff().tolist()
    return out


def _pool(plan: _Plan, values: Tensor, offsets: Tensor, batch: int) -> Tensor:
    out = torch.empty(batch, plan.width, dtype=torch.float32)
    for lo, hi in plan.zero_cols:
        out[:, lo:hi].zero_()
    weights = [w for m in plan.groups for w in m.split_embedding_weights()]
    first = [0]
    for m in plan.groups:
        first.append(first[-1] + len(m.table_specs))
    native_pooled_into(
        out,
        weights,
        values,
        offsets,
        segment_tables=[first[r.group] + r.table for r in plan.reads],
        segment_keys=[r.key for r in plan.reads],
        segment_means=[int(plan.groups[r.group].pooling is PoolingType.MEAN) for r in plan.reads],
        segment_cols=[r.col for r in plan.reads],
        names=plan.names,
    )
    return out


def _update(
    module: BatchedFusedEmbeddingBag,
    reads: Sequence[SegmentRead],
    values: Tensor,
    offsets: Tensor,
    batch: int,
    grad: Tensor,
    entries: int,
    second: GradientPiece | None = None,
) -> None:
    weight, state, spec, lr, _ = module._update_context()
    if not reads:
        return
    rule = _RULES[spec.optimizer]
    mean = int(module.pooling is PoolingType.MEAN)
    if rule == "sgd":
        native_scatter(
            module.split_embedding_weights(),
            values,
            offsets,
            None,
            grad,
            [r.table for r in reads],
            [r.key for r in reads],
            [mean] * len(reads),
            alpha=-lr,
            cols=[r.col for r in reads],
        )
        return
    segments = _update_segments(module, reads)
    native_segment_update(
        rule,
        weight,
        state["momentum1"],
        segments,
        values,
        offsets,
        batch,
        grad,
        lr,
        spec.eps,
        native_workspace(weight),
        entries,
        second=second,
    )


def _update_segments(
    module: BatchedFusedEmbeddingBag, reads: Sequence[SegmentRead]
) -> tuple[tuple[int, int, int, int, int], ...]:
    """The one-pass kernel's segments of `module`'s reads: (key, first packed row, rows,
    first gradient column, mean)."""
    mean = int(module.pooling is PoolingType.MEAN)
    return tuple(
        (r.key, module.row_offsets[r.table], module.table_specs[r.table].num_rows, r.col, mean)
        for r in reads
    )


def _presort(
    plan: _Plan, values: Tensor, offsets: Tensor, batch: int
) -> tuple[Presorted | None, ...]:
    """Per group, its update's bucket sort started on a helper thread (rowwise Adagrad and
    Adagrad groups of at least PRESORT_MIN_IDS ids), or None (sorted in backward)."""
    per_key = _ids_per_key(plan, offsets, batch)
    out: list[Presorted | None] = []
    for g, module in enumerate(plan.groups):
        reads = [r for r in plan.reads if r.group == g]
        entries = sum(per_key[r.key] for r in reads)
        if _RULES[module.spec.optimizer] == "sgd" or entries < PRESORT_MIN_IDS:
            out.append(None)
            continue
        weight = module.packed_weight()
        out.append(
            native_segment_presort(
                weight.shape[0],
                _update_segments(module, reads),
                values,
                offsets,
                batch,
                plan.width,
                native_workspace(weight),
                entries,
                background=True,
            )
        )
    return tuple(out)


def _apply_presorted(
    module: BatchedFusedEmbeddingBag,
    pre: Presorted,
    batch: int,
    grad: Tensor,
    second: GradientPiece | None = None,
) -> bool:
    """The update of `module` from its forward's sort; False (the sort dropped) where the
    gradient's row stride or the packed rows differ from what the sort assumed."""
    weight = module.packed_weight()
    if weight.shape[0] != pre.rows or (batch > 1 and grad.stride(0) != pre.grad_stride):
        pre.release()
        return False
    weight, state, spec, lr, _ = module._update_context()
    native_presorted_update(
        _RULES[spec.optimizer],
        weight,
        state["momentum1"],
        pre,
        grad,
        lr,
        spec.eps,
        native_workspace(weight),
        second=second,
    )
    return True


def segment_lookup(
    groups: Sequence[BatchedFusedEmbeddingBag],
    reads: Sequence[SegmentRead],
    values: Tensor,
    lengths: Tensor,
    batch_size: int,
    width: int,
    names: Sequence[tuple[str, str]],
    *,
    presort: bool = False,
) -> Tensor:
    """`(batch_size, width)` fp32 pooled rows of every read at its columns (other columns
    zero); with grad enabled, backward updates each group's rows in place (its fused
    optimizer, step counter advanced once per backward as a group call does).

    values: `(N,)` table-local ids of the KJT, int32 or int64. lengths: `(F * batch_size,)`.
    names: per read `(feature, table)` for the out-of-range error. Every group must pass
    `segment_lookup_unsupported`. presort: with grad enabled, start each rowwise-Adagrad /
    Adagrad group's update sort (which needs only the ids) on a helper thread right after the
    pooling, so that it runs while the caller waits (a sharded rank: for the pooled
    all-to-all); the backward then applies it (bitwise the same update). A forward whose
    backward never runs gives the sort's buffers back when its graph is freed; a second
    forward before the first one's backward sorts in its own backward instead.
    """
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
    torch.cumsum(lengths, 0, dtype=torch.int64, out=offsets[1:])
    if batch_size * width > MAX_IDS:
        raise ValueError(
            f"segment_lookup takes at most {MAX_IDS} output elements, got {batch_size} x {width}"
        )
    covered = sorted((r.col, r.col + groups[r.group].dim) for r in reads)
    zero_cols: list[tuple[int, int]] = []
    at = 0
    for lo, hi in covered:
        if lo > at:
            zero_cols.append((at, lo))
        at = max(at, hi)
    if at < width:
        zero_cols.append((at, width))
    plan = _Plan(
        tuple(groups),
        tuple(reads),
        width,
        tuple(zero_cols),
        "\x1f".join(part for pair in names for part in pair),
        presort,
    )
    weights = [w for m in groups for w in m.split_embedding_weights()]
    if not (torch.is_grad_enabled() and any(w.requires_grad for w in weights)):
        return _pool(plan, values, offsets, batch_size)
    out: Tensor = _SegmentLookup.apply(  # type: ignore[no-untyped-call]  # torch leaves apply untyped
        plan, values, offsets, batch_size, *weights
    )
    setattr(out, _PIECES, plan.pieces)  # found by `gradient_pieces(out)`
    return out
