"""One dispatch for fused updates from a pooled lookup's output gradient.

A fused lookup's backward knows the ids it looked up, their bags and the gradient of each bag
(`PooledGrad`). `pooled_update` runs the optimizer's rule (`rules.RULES`) on one backend's
`PooledKernel`: the one named, or under "auto" the first of the rule's backends whose kernel
accepts the update. This package holds the torch kernel (any optimizer, device and dtype) and
fbgemm's CPU kernels (`fbgemm_kernels`); the embedding package adds its native C and Triton
kernels (docs/design/fused-kernel-home.md) and passes the whole table in.

The torch kernel never builds a dense `(total_rows, D)` gradient. For the `N` ids of a batch:

```
ids    (N,)  --sort-->  sorted ids, perm            (one stable sort, int32 keys)
                        segment starts (U,)          (unique_consecutive counts)
bag of each id, permuted  --embedding_bag(grad_out)--> (U, D) summed row gradients, per chunk
                                                        --> sparse_kernels.sparse_update
```

The segment sum *is* an `embedding_bag` over the output gradient (`grad_out` rows indexed by
the bag of each id, bags = segments of equal ids), which reuses ATen's fast pooled kernel.
Rows are processed in chunks of ~4 MiB of gradient so that the temporaries stay in cache and
are recycled by the allocator (a fresh 70 MB temporary costs ~20 ms of page faults on our CPU,
more than the update itself). docs/design/optim-fused-backward.md records the measurements.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

from shardrec_optim.rules import BACKENDS, RULES, Backend
from shardrec_optim.sparse_kernels import sparse_update
from shardrec_optim.spec import FusedOptimSpec

# Bytes of (rows, D) gradient handled per chunk in backward.
CHUNK_BYTES = 4 << 20


@dataclasses.dataclass(frozen=True)
class PooledGrad:
    """One fused update from a pooled lookup's backward: what every kernel reads.

    weight: `(R, D)` group weight and state (`rules.init_state`), both updated in place.
    ids: `(N,)` int64 rows looked up. offsets: `(num_bags + 1,)`. per_sample_weights: `(N,)`
    or None. mean: MEAN pooling (each id's gradient scaled by 1 / its bag size).
    grad_out: `(num_bags, D)` gradient of the pooled output. step: 1-based step count.
    """

    spec: FusedOptimSpec
    weight: Tensor
    state: Mapping[str, Tensor]
    ids: Tensor
    offsets: Tensor
    per_sample_weights: Tensor | None
    mean: bool
    grad_out: Tensor
    learning_rate: float
    step: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class PooledKernel:
    """One backend's fused update: `unsupported(g)` says why it cannot run `g` (or None),
    `preferred(g)` whether "auto" takes it (default: where it runs), `update(g)` runs it."""

    unsupported: Callable[[PooledGrad], str | None]
    update: Callable[[PooledGrad], None]
    preferred: Callable[[PooledGrad], bool] | None = None

    def takes(self, grad: PooledGrad) -> bool:
        if self.preferred is not None:
            return self.preferred(grad)
        return self.unsupported(grad) is None


def pooled_update(
    grad: PooledGrad, *, kernels: Mapping[str, PooledKernel], backend: Backend = "auto"
) -> str:
    """Apply one step of `grad.spec`'s rule to the rows `grad.ids` touched; return the backend.

    kernels: backend name -> kernel ("torch" required). A forced backend that cannot run the
    update raises ValueError naming why; an empty batch changes nothing.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend != "auto":
        kernel = kernels.get(backend)
        reason = (
            f"this build has no {backend} kernel" if kernel is None else kernel.unsupported(grad)
        )
        if reason is not None:
            raise ValueError(f"the {backend} backend cannot run this update: {reason}")
        assert kernel is not None
        chosen: str = backend
    else:
        chosen = next(
            name
            for name in RULES[grad.spec.optimizer].backends
            if name in kernels and kernels[name].takes(grad)
        )
        kernel = kernels[chosen]
    if grad.ids.numel() == 0:
        return chosen
    with torch.profiler.record_function(f"fused.{chosen}_backward"):
        kernel.update(grad)
    return chosen


def bag_of_id(offsets: Tensor, num_ids: int) -> Tensor:
    """`(N,)` bag index of each id from `(num_bags + 1,)` offsets."""
    lengths = offsets[1:] - offsets[:-1]
    bags = torch.arange(lengths.numel(), device=offsets.device)
    return torch.repeat_interleave(bags, lengths, output_size=num_ids)


def bags_and_scales(grad: PooledGrad, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
    """`(N,)` bag of each id and `(N,)` factor on its gradient (per-sample weight, 1 / bag
    size for MEAN, or None)."""
    num_ids = grad.ids.numel()
    bag = bag_of_id(grad.offsets, num_ids)
    if not grad.mean:
        return bag, grad.per_sample_weights
    lengths = grad.offsets[1:] - grad.offsets[:-1]
    inverse = 1.0 / lengths.clamp(min=1).to(dtype)
    return bag, torch.repeat_interleave(inverse, lengths, output_size=num_ids)


def torch_update(grad: PooledGrad) -> None:
    """The torch kernel of every rule (any device and dtype); see the module docstring."""
    ids, grad_out, weight = grad.ids, grad.grad_out, grad.weight
    n = ids.numel()
    # record_function marks the phases for benchmarks/fused_training.py --profile (~1 us each).
    with torch.profiler.record_function("fused.sort_unique"):
        bag, scale = bags_and_scales(grad, weight.dtype)
        # int32 keys sort ~1.8x faster than int64 (1.6 vs 2.9 ms for 330k ids); rows fit.
        # Stable: each row's gradients are summed in input order, so the float result does not
        # depend on how rows are numbered (a tiered table's cache slots vs the in-memory rows);
        # no slower than the unstable sort (2.3 vs 2.6 ms for 330k int32 ids, one thread).
        keys = ids.int() if weight.shape[0] <= torch.iinfo(torch.int32).max else ids
        sorted_ids, perm = torch.sort(keys, stable=True)
        # Segments of equal ids: one pass (0.6 ms) against ne + nonzero + gather (1.2 ms).
        rows, counts = torch.unique_consecutive(sorted_ids, return_counts=True)
        rows = rows.long()
        starts = counts.cumsum(0).sub_(counts)
        src_bag = bag.index_select(0, perm)
        src_scale = None if scale is None else scale.to(weight.dtype).index_select(0, perm)
        num_unique = rows.numel()
        if weight.device.type == "cpu":
            chunk = max(1, CHUNK_BYTES // (weight.shape[1] * weight.element_size()))
            # Only the chunk boundaries go to the host (a `.tolist()` of all starts costs ~10 ms
            # at 300k rows).
            bounds = torch.cat([starts[::chunk], starts.new_tensor([n])]).tolist()
        else:
            # Chunks keep CPU temporaries in cache; a GPU takes the whole batch at once, and
            # reading the bounds would be a host sync.
            chunk, bounds = max(1, num_unique), [0, n]
    for k, c0 in enumerate(range(0, num_unique, chunk)):
        c1 = min(num_unique, c0 + chunk)
        lo, hi = bounds[k], bounds[k + 1]
        with torch.profiler.record_function("fused.segment_sum"):
            grads = F.embedding_bag(
                src_bag[lo:hi],
                grad_out,
                starts[c0:c1] - lo,
                mode="sum",
                per_sample_weights=None if src_scale is None else src_scale[lo:hi],
            )
        with torch.profiler.record_function("fused.optimizer_update"):
            sparse_update(
                grad.spec,
                weight,
                grad.state,
                rows[c0:c1],
                grads,
                step=grad.step,
                learning_rate=grad.learning_rate,
            )


TORCH_KERNEL = PooledKernel(unsupported=lambda grad: None, update=torch_update)
"""The torch kernel: runs every rule."""
