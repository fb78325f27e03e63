"""The Triton kernels (imports `triton`: load through `ops`, which imports this lazily).

Pooled forward, one program per (bag, block of columns):

```
offsets  [0, 3, 3, 5]        bag 0: ids[0:3]   bag 1: empty -> zeros   bag 2: ids[3:5]
program (b, d): acc[d-block] = sum_k  w_k * weight[ids[k], d-block]  for k in bag b
                (w_k = per-sample weight or 1; MEAN divides by max(len, 1); fp32 accumulate)
```

Fused backward + rowwise Adagrad, one program per position of the *sorted* ids; a program
whose id differs from its left neighbour (a segment start) sums the segment's gradient rows
and updates that one row in place, the others exit. No host sync: the grid is the number of
ids, known on the host, instead of the number of unique ids.

```
sorted ids  [2, 2, 5, 7, 7, 7]      perm -> original position -> bag -> grad_out row
programs     0  x  2  3  x  x        (x: not a segment start, exits)
program 0: g = grad_out[bag(p0)] * s(p0) + grad_out[bag(p1)] * s(p1);  row 2 updated
```
"""

from __future__ import annotations

import triton  # type: ignore[import-not-found,import-untyped,unused-ignore]  # optional, untyped
import triton.language as tl  # type: ignore[import-not-found,import-untyped,unused-ignore]  # optional

__all__ = ["pooled_forward_kernel", "rowwise_adagrad_backward_kernel"]


@triton.jit  # type: ignore[misc,untyped-decorator,unused-ignore]  # triton.jit is untyped
def pooled_forward_kernel(  # type: ignore[no-untyped-def,unused-ignore]  # a Triton kernel
    weight,
    ids,
    offsets,
    psw,
    out,
    dim,
    w_stride,
    out_stride,
    MEAN: tl.constexpr,
    HAS_PSW: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    bag = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    col_ok = cols < dim
    start = tl.load(offsets + bag)
    end = tl.load(offsets + bag + 1)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for first in range(start, end, BLOCK_N):
        pos = first + tl.arange(0, BLOCK_N)
        ok = pos < end
        rows = tl.load(ids + pos, mask=ok, other=0).to(tl.int64)
        vals = tl.load(
            weight + rows[:, None] * w_stride + cols[None, :],
            mask=ok[:, None] & col_ok[None, :],
            other=0.0,
        ).to(tl.float32)
        if HAS_PSW:
            scale = tl.load(psw + pos, mask=ok, other=0.0).to(tl.float32)
            vals = vals * scale[:, None]
        acc += tl.sum(vals, axis=0)
    if MEAN:
        count = (end - start).to(tl.float32)
        acc = acc / tl.maximum(count, 1.0)
    tl.store(out + bag.to(tl.int64) * out_stride + cols, acc.to(out.dtype.element_ty), mask=col_ok)


@triton.jit  # type: ignore[misc,untyped-decorator,unused-ignore]  # triton.jit is untyped
def rowwise_adagrad_backward_kernel(  # type: ignore[no-untyped-def,unused-ignore]  # a Triton kernel
    sorted_ids,
    perm,
    bag_of_id,
    scale,
    grad_out,
    weight,
    momentum,
    num_ids,
    dim,
    w_stride,
    g_stride,
    lr,
    eps,
    HAS_SCALE: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    i = tl.program_id(0)
    row = tl.load(sorted_ids + i)
    prev = tl.load(sorted_ids + i - 1, mask=i > 0, other=-1)
    if (i == 0) | (prev != row):
        cols = tl.arange(0, BLOCK_D)
        ok = cols < dim
        acc = tl.zeros([BLOCK_D], dtype=tl.float32)
        j = i
        current = row
        while current == row:
            p = tl.load(perm + j)
            b = tl.load(bag_of_id + p).to(tl.int64)
            g = tl.load(grad_out + b * g_stride + cols, mask=ok, other=0.0).to(tl.float32)
            if HAS_SCALE:
                g = g * tl.load(scale + p).to(tl.float32)
            acc += g
            j += 1
            current = tl.load(sorted_ids + j, mask=j < num_ids, other=-1)
        r = row.to(tl.int64)
        m = tl.load(momentum + r) + tl.sum(acc * acc, axis=0) / dim
        tl.store(momentum + r, m)
        mult = lr / (tl.sqrt(m) + eps)
        w = tl.load(weight + r * w_stride + cols, mask=ok, other=0.0).to(tl.float32)
        tl.store(
            weight + r * w_stride + cols, (w - mult * acc).to(weight.dtype.element_ty), mask=ok
        )
