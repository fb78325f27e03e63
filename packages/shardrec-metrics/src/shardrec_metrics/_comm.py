"""The two collectives the metrics use, and which process group they run on.

The collectives themselves are shardrec-collectives' (every collective lives there); this module
only picks the group and moves tensors to the device its backend needs.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from shardrec_collectives import ShardingEnv, all_gather_ints, all_gather_pooled
from shardrec_collectives import all_reduce_sum as _all_reduce_sum


def resolve_group(process_group: dist.ProcessGroup | None) -> dist.ProcessGroup | None:
    """The group a metric reduces over: the one given, else the default one when initialized.

    Resolved at compute time so a metric built before `init_process_group` still reduces.
    """
    if process_group is not None:
        return process_group
    if dist.is_available() and dist.is_initialized():
        return dist.group.WORLD
    return None


def _env(group: dist.ProcessGroup) -> ShardingEnv:
    # NCCL groups communicate from this rank's current GPU, others from the CPU.
    return ShardingEnv.from_process_group(group)


def all_reduce_sum(values: Tensor, group: dist.ProcessGroup) -> Tensor:
    """Elementwise sum over ranks.

    Every rank sends `values: (K,)` float64 and receives the (K,) sum, the same on every rank.
    """
    env = _env(group)
    local = values.to(env.device, dtype=torch.float64)
    return _all_reduce_sum(env, local).wait().cpu()


def all_gather_columns(cols: Tensor, group: dist.ProcessGroup) -> list[Tensor]:
    """Every rank's `cols`, in group-rank order, on every rank.

    Each rank sends `cols: (C, N_r)` (N_r may differ per rank, C may not) and receives the list
    `[cols_0: (C, N_0), ..., cols_{W-1}: (C, N_{W-1})]`. Two collectives: the sample counts
    (all_gather_ints), then the samples (all_gather_pooled, which pads to the largest N_r, so
    each rank receives W * C * max(N_r) elements).
    """
    env = _env(group)
    sizes = all_gather_ints(env, int(cols.shape[1]))
    if max(sizes) == 0:  # every rank sees the same counts, so every rank skips together
        return [cols[:, :0] for _ in sizes]
    rows = cols.to(env.device).t().contiguous()  # (N_r, C): one pooled "row" per sample
    gathered = all_gather_pooled(env, rows, sizes).wait()
    return [block.t() for block in torch.split(gathered, sizes)]
