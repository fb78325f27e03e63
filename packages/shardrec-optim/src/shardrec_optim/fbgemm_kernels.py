"""The fbgemm backend of the fused update rules: fbgemm's CPU TBE backward kernels.

fbgemm-gpu-cpu ships one CPU kernel per optimizer that sorts the ids of a batch, sums each row's
gradient and updates the row and its state in one pass, with no `(U, D)` temporary. On the issue-4
shape it measured 11 ms of CPU for rowwise Adagrad against ~30 ms for our torch-native backward
(see docs/design/optim-fused-backward.md), so when fbgemm imports it is used for the optimizers
it has a CPU kernel for and whose formula is ours:

| optimizer                         | fbgemm op (`torch.ops.fbgemm.*`)                         |
|-----------------------------------|----------------------------------------------------------|
| SGD, EXACT_SGD                    | `split_embedding_backward_codegen_sgd_cpu`               |
| (EXACT_)ROWWISE_ADAGRAD           | `split_embedding_backward_codegen_rowwise_adagrad_cpu`   |
| EXACT_ADAGRAD                     | `split_embedding_backward_codegen_adagrad_cpu`           |

EXACT_ADAGRAD costs about the same CPU either way with one thread, but fbgemm's kernel is a few
parallel regions where ours is ~150 (chunks x ops), which made ours 3x slower in wall time with
two threads on a loaded machine. Rowwise Adagrad with weight decay stays on the torch path:
fbgemm 1.8's CPU kernel disagreed with the documented L2 / DECOUPLE formula in our parity test.
fbgemm's CPU TBE refuses Adam, LAMB and LARS: those always take the torch path.

A whole group of packed tables is presented to fbgemm as *one* table of `R` rows: our ids are
already group rows and our bags already span the group, so `weights_offsets = [0]`,
`D_offsets = [0, D]`, `hash_size_cumsum = [0, R]` and fbgemm's batch is our bag count.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import torch
from torch import Tensor

from shardrec_optim.pooled import PooledGrad, PooledKernel
from shardrec_optim.rules import optimizers_on
from shardrec_optim.spec import FusedOptimSpec
from shardrec_optim.types import EmbOptimType, WeightDecayMode

_log = logging.getLogger(__name__)

# fbgemm's EmbeddingLocation.HOST and PoolingMode (SUM = 0, MEAN = 1) values.
_HOST = 3

FBGEMM_OPTIMIZERS = optimizers_on("fbgemm")
"""Optimizers whose fused backward runs on fbgemm's CPU kernel when fbgemm imports."""


class FbgemmUnavailableWarning(UserWarning):
    """fbgemm's TBE CPU kernels could not be loaded. No longer emitted (a DEBUG log record says
    it now); kept so that warning filters naming it keep working."""


@functools.cache
def fbgemm_tbe_available() -> bool:
    """True when fbgemm_gpu imports and registers its TBE CPU backward ops (checked once).

    When it does not (a missing or mismatched install: fbgemm-gpu-cpu 1.8.0 pairs with torch
    2.13.0) the torch path runs, never an error, and one DEBUG record on this module's logger
    says why: fbgemm is an optional backend (`shardrec version` shows which one loaded).
    """
    try:
        import fbgemm_gpu  # noqa: F401  (the import registers torch.ops.fbgemm)

        torch.ops.fbgemm.split_embedding_backward_codegen_sgd_cpu  # noqa: B018  (raises if missing)
        torch.ops.fbgemm.split_embedding_backward_codegen_rowwise_adagrad_cpu  # noqa: B018
        torch.ops.fbgemm.split_embedding_backward_codegen_adagrad_cpu  # noqa: B018
    except Exception as exc:  # any failure to load means: use the torch path
        _log.debug(
            "fbgemm_gpu TBE kernels are unavailable (%s: %s); fused embedding backward uses its "
            "torch-native kernels. Install fbgemm-gpu-cpu==1.8.0 (pairs with torch 2.13.0) for "
            "the faster fbgemm backend.",
            type(exc).__name__,
            exc,
        )
        return False
    return True


def fbgemm_applies(
    spec: FusedOptimSpec, weight: Tensor, grad_out: Tensor, per_sample_weights: Tensor | None
) -> bool:
    """Whether `fbgemm_update` can run this update (optimizer, CPU, FP32, dense layout)."""
    if spec.optimizer not in FBGEMM_OPTIMIZERS:
        return False
    if spec.weight_decay != 0 and spec.weight_decay_mode is not WeightDecayMode.NONE:
        # fbgemm 1.8's CPU rowwise kernel applies weight decay differently from the documented
        # formula our torch kernel follows (the parity test disagreed for L2 and DECOUPLE).
        return False
    if weight.device.type != "cpu" or weight.dtype is not torch.float32:
        return False
    if not weight.is_contiguous() or grad_out.dtype is not torch.float32:
        return False
    if per_sample_weights is not None and per_sample_weights.dtype is not torch.float32:
        return False
    return fbgemm_tbe_available()


@functools.cache
def _one_table_meta(num_rows: int, dim: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """`(placements, offsets, D_offsets, hash_size_cumsum)` describing one `(R, D)` table.

    Cached: built once per shape and reused by every step.
    """
    return (
        torch.tensor([_HOST], dtype=torch.int32),
        torch.zeros(1, dtype=torch.int64),
        torch.tensor([0, dim], dtype=torch.int32),
        torch.tensor([0, num_rows], dtype=torch.int64),
    )


def fbgemm_unsupported(grad: PooledGrad) -> str | None:
    """Why `fbgemm_update` cannot run this update, or None when it can."""
    spec, weight = grad.spec, grad.weight
    if fbgemm_applies(spec, weight, grad.grad_out, grad.per_sample_weights):
        return None
    return (
        f"it cannot run {spec.optimizer.name} on a {weight.dtype} {weight.device.type} weight "
        f"(fbgemm supports {sorted(o.name for o in FBGEMM_OPTIMIZERS)} without weight decay on "
        "contiguous FP32 CPU weights, and needs fbgemm-gpu-cpu installed)"
    )


def fbgemm_update(grad: PooledGrad) -> None:
    """The fused update on fbgemm's CPU kernel (call only when `fbgemm_applies`): a contiguous
    FP32 `(R, D)` weight and FP32 gradients; the step count is unused (no rule here reads it)."""
    spec, weight, state = grad.spec, grad.weight, grad.state
    num_rows, dim = weight.shape
    placements, table_offsets, d_offsets, hash_size_cumsum = _one_table_meta(num_rows, dim)
    psw = grad.per_sample_weights
    common: dict[str, object] = {
        "grad_output": grad.grad_out.contiguous(),
        "host_weights": weight.view(-1),
        "weights_placements": placements,
        "weights_offsets": table_offsets,
        "D_offsets": d_offsets,
        "max_D": dim,
        "hash_size_cumsum": hash_size_cumsum,
        "total_hash_size_bits": max(1, int(num_rows).bit_length()),
        "indices": grad.ids.long().contiguous(),
        "offsets": grad.offsets.long().contiguous(),
        "pooling_mode": int(grad.mean),
        # An empty tensor means "unweighted" to the CPU kernel.
        "indice_weights": weight.new_empty(0) if psw is None else psw.contiguous(),
        "stochastic_rounding": False,
        "learning_rate_tensor": torch.tensor(grad.learning_rate, dtype=torch.float32),
    }
    op: Callable[..., object]
    if spec.optimizer in (EmbOptimType.SGD, EmbOptimType.EXACT_SGD):
        op = torch.ops.fbgemm.split_embedding_backward_codegen_sgd_cpu
        op(**common)
        return
    if spec.optimizer is EmbOptimType.EXACT_ADAGRAD:
        op = torch.ops.fbgemm.split_embedding_backward_codegen_adagrad_cpu
        op(
            **common,
            momentum1_host=state["momentum1"].view(-1),
            momentum1_placements=placements,
            momentum1_offsets=table_offsets,
            eps=spec.eps,
        )
        return
    op = torch.ops.fbgemm.split_embedding_backward_codegen_rowwise_adagrad_cpu
    op(
        **common,
        momentum1_host=state["momentum1"],
        momentum1_placements=placements,
        momentum1_offsets=table_offsets,
        eps=spec.eps,
        weight_decay=0.0,  # fbgemm_applies sends weight decay to the torch path
        weight_decay_mode=0,
        max_norm=0.0,
    )


FBGEMM_KERNEL = PooledKernel(unsupported=fbgemm_unsupported, update=fbgemm_update)
"""fbgemm's CPU kernels as a backend of `pooled.pooled_update`."""
