"""Placing the strategies' pooled blocks into the module's column order, block by block.

Every strategy's output distribution returns one flat tensor holding `(B, w)` row-major blocks
one after another (`output_blocks`: a placed strategy's all-to-all receive buffer, one block per
source rank; the others one `(B, output_dim)` block). The collection's output is `(B, D)` with
the unsharded module's keys in its order. `ColumnPlacement` precomputes, from the strategies'
`segment_columns`, the *runs*: maximal pieces of consecutive columns that go from one block to
consecutive output columns, grouped into strided *moves* (equal-width runs whose sources follow
each other and whose destinations are equally spaced: table-wise tables alternating over two
ranks are one move per rank). Forward copies each move into a fresh output (one strided copy
each, whole 4-byte columns, no per-element index); backward copies the output gradient's columns
straight into each flat input's gradient, which for a placed strategy is the reverse
all-to-all's send buffer. Values and gradients are copies: bitwise those of the gather and
scatter they replace.

```
received from rank 0: (B, t0 | t2)   rank 1: (B, t1 | t3)     output (B, t0 | t1 | t2 | t3)
moves: rank 0's block -> columns [0:D) and [2D:3D) (one strided copy), rank 1's -> [D:2D), [3D:4D)
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

__all__ = ["ColumnPlacement", "Move"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Move:
    """`count` runs of `width` columns of one input's block `block`: run i reads block columns
    `[src + i * width, src + (i + 1) * width)` and writes output columns starting at
    `dst + i * dst_step`."""

    part: int
    block: int
    src: int
    dst: int
    width: int
    count: int
    dst_step: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Run:
    part: int
    block: int
    src: int
    dst: int
    width: int


class ColumnPlacement:
    """The moves that put the parts' columns into output order (module docstring).

    part_blocks: per part (strategy), the widths of its blocks. part_columns: per part, its
    `segment_columns` (output segment index -> the part's columns, in the segment's order).
    segment_order: output segment indices in output order, with their widths.
    """

    def __init__(
        self,
        part_blocks: Sequence[Sequence[int]],
        part_columns: Sequence[Mapping[int, Sequence[int]]],
        segment_order: Sequence[tuple[int, int]],
    ) -> None:
        self.part_blocks = [list(b) for b in part_blocks]
        source: list[tuple[int, int]] = []  # output column -> (part, part column)
        for index, dim in segment_order:
            found = [(k, cols) for k, cols in enumerate(part_columns) if index in cols]
            taken = 0
            for k, cols in found:
                source.extend((k, c) for c in cols[index])
                taken += len(cols[index])
            if taken != dim:
                raise AssertionError(f"segment {index}: {taken} columns placed, expected {dim}")
        self.dim = len(source)
        runs = _runs(source, self.part_blocks)
        self.moves = _moves(runs)
        covered = [[0] * sum(b) for b in self.part_blocks]
        for r in runs:
            start = sum(self.part_blocks[r.part][: r.block]) + r.src
            for c in range(start, start + r.width):
                covered[r.part][c] += 1
        # Every column of every part read once: backward writes every gradient element.
        self.complete = all(all(n == 1 for n in cov) for cov in covered)
        self.identity = (
            len(self.part_blocks) == 1
            and len(self.part_blocks[0]) == 1
            and len(runs) == 1
            and runs[0].src == 0
            and runs[0].dst == 0
            and runs[0].width == self.dim
        )

    def __call__(self, parts: Sequence[Tensor], batch: int) -> Tensor:
        """`(batch, dim)`: the parts' columns in output order. parts: one tensor per part whose
        flattening holds its `(batch, w)` blocks one after another."""
        if self.identity:
            part = parts[0]
            return part if part.shape == (batch, self.dim) else part.view(batch, self.dim)
        geometry = (self, batch)
        out: Tensor = _Place.apply(geometry, *parts)  # type: ignore[no-untyped-call]  # torch leaves apply untyped
        return out

    def block_views(self, flat: Tensor, part: int, batch: int) -> list[Tensor]:
        """The `(batch, w)` blocks of part `part` inside `flat` (views)."""
        views: list[Tensor] = []
        offset = 0
        for w in self.part_blocks[part]:
            views.append(flat[offset : offset + batch * w].view(batch, w))
            offset += batch * w
        return views

    def forward_into(self, out: Tensor, parts: Sequence[Tensor], batch: int) -> None:
        blocks = [self.block_views(p.reshape(-1), k, batch) for k, p in enumerate(parts)]
        for m in self.moves:
            _strided(out, m.dst, m.width, m.count, m.dst_step).copy_(
                _strided(blocks[m.part][m.block], m.src, m.width, m.count, m.width)
            )

    def backward_from(self, grad: Tensor, flats: Sequence[Tensor], batch: int) -> None:
        blocks = [self.block_views(f, k, batch) for k, f in enumerate(flats)]
        for m in self.moves:
            _strided(blocks[m.part][m.block], m.src, m.width, m.count, m.width).copy_(
                _strided(grad, m.dst, m.width, m.count, m.dst_step)
            )


def _strided(x: Tensor, start: int, width: int, count: int, step: int) -> Tensor:
    """Columns `[start + i * step, start + i * step + width)` of the 2-D `x` for i < count, as
    a `(rows, count, width)` view."""
    if count == 1:
        return x[:, start : start + width].unsqueeze(1)
    col = x.stride(1)  # 0 for an expanded gradient (e.g. of `.sum()`)
    return x.as_strided(
        (x.shape[0], count, width), (x.stride(0), step * col, col), x.storage_offset() + start * col
    )


def _runs(source: Sequence[tuple[int, int]], part_blocks: Sequence[Sequence[int]]) -> list[_Run]:
    """Maximal runs of output columns read from consecutive columns of one block."""
    block_of: list[list[tuple[int, int]]] = []  # part column -> (block, column in block)
    for widths in part_blocks:
        cols: list[tuple[int, int]] = []
        for b, w in enumerate(widths):
            cols.extend((b, c) for c in range(w))
        block_of.append(cols)
    runs: list[_Run] = []
    for dst, (k, c) in enumerate(source):
        block, col = block_of[k][c]
        last = runs[-1] if runs else None
        if (
            last is not None
            and last.part == k
            and last.block == block
            and last.src + last.width == col
            and last.dst + last.width == dst
        ):
            runs[-1] = dataclasses.replace(last, width=last.width + 1)
        else:
            runs.append(_Run(part=k, block=block, src=col, dst=dst, width=1))
    return runs


def _moves(runs: Sequence[_Run]) -> list[Move]:
    """Runs of one block with equal widths, consecutive sources and equally spaced
    destinations, merged into one strided move each (in the order of their first run)."""
    by_block: dict[tuple[int, int], list[_Run]] = {}
    for r in runs:
        by_block.setdefault((r.part, r.block), []).append(r)
    moves: list[Move] = []
    for (part, block), group in by_block.items():
        group.sort(key=lambda r: r.src)
        i = 0
        while i < len(group):
            first = group[i]
            j = i + 1
            step = group[j].dst - first.dst if j < len(group) else 0
            while (
                j < len(group)
                and group[j].width == first.width
                and group[j].src == first.src + (j - i) * first.width
                and group[j].dst == first.dst + (j - i) * step
                and step >= first.width
            ):
                j += 1
            count = j - i
            moves.append(
                Move(
                    part=part,
                    block=block,
                    src=first.src,
                    dst=first.dst,
                    width=first.width,
                    count=count,
                    dst_step=step if count > 1 else first.width,
                )
            )
            i = j
    return moves


class _Place(torch.autograd.Function):
    """Forward: the parts' columns in output order (a fresh `(B, dim)`). Backward: each part's
    gradient, a fresh flat tensor written move by move from the output gradient (read in
    place, whatever its strides)."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        geometry: tuple[ColumnPlacement, int],
        *parts: Tensor,
    ) -> Tensor:
        placement, batch = geometry
        ctx.geometry = geometry  # type: ignore[attr-defined]  # ctx is a free-form namespace
        ctx.shapes = [(p.shape, p.dtype, p.device) for p in parts]  # type: ignore[attr-defined]  # same
        dtype = parts[0].dtype if parts else torch.float32
        device = parts[0].device if parts else None
        out = torch.empty(batch, placement.dim, dtype=dtype, device=device)
        placement.forward_into(out, parts, batch)
        return out

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad: Tensor
    ) -> tuple[Tensor | None, ...]:
        placement, batch = ctx.geometry  # type: ignore[attr-defined]  # set in forward
        shapes = ctx.shapes  # type: ignore[attr-defined]  # set in forward
        if 0 in grad.stride() and grad.numel():
            # An expanded gradient (of `.sum()`): strided copies from a stride-0 source take a
            # slow path (measured 13 ms vs 1.6 ms for 1024 x 1664); one fill first is cheaper.
            grad = grad.contiguous()
        needs = ctx.needs_input_grad[1:]  # type: ignore[attr-defined]  # torch sets it
        make = torch.empty if placement.complete else torch.zeros
        flats = [
            make(torch.Size(shape).numel(), dtype=dtype, device=device)
            for shape, dtype, device in shapes
        ]
        placement.backward_from(grad, flats, batch)
        grads: list[Tensor | None] = [
            f.view(shape) if need else None
            for f, (shape, _, _), need in zip(flats, shapes, needs, strict=True)
        ]
        return (None, *grads)
