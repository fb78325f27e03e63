"""The two collectives the metrics use, and which process group they run on.

Metrics depend on torch alone (they sit beside the models, not on the sharding stack), so they call
torch.distributed directly; each function states what every rank sends and receives.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def resolve_group(process_group: dist.ProcessGroup | None) -> dist.ProcessGroup | None:
    """The group a metric reduces over: the one given, else the default one when initialized.

    Resolved at compute time so a metric built before `init_process_group` still reduces.
    """
    if process_group is not None:
        return process_group
    if dist.is_available() and dist.is_initialized():
        return dist.group.WORLD
    return None


def comm_device(group: dist.ProcessGroup) -> torch.device:
    """Where tensors must live for `group`'s backend: this rank's GPU for NCCL, else the CPU."""
    if "nccl" in str(dist.get_backend(group)).lower():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(values: Tensor, group: dist.ProcessGroup) -> Tensor:
    """Elementwise sum over ranks.

    Every rank sends `values: (K,)` float64 and receives the (K,) sum, the same on every rank.
    """
    out = values.to(comm_device(group), dtype=torch.float64).clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
    return out.cpu()


def all_gather_columns(cols: Tensor, group: dist.ProcessGroup) -> list[Tensor]:
    """Every rank's `cols`, in group-rank order, on every rank.

    Each rank sends `cols: (C, N_r)` (N_r may differ per rank, C may not) and receives the list
    `[cols_0: (C, N_0), ..., cols_{W-1}: (C, N_{W-1})]`. Two collectives: the sample counts, then
    the values padded to max N_r, so each rank receives W * C * max(N_r) elements.
    """
    device = comm_device(group)
    world = dist.get_world_size(group)
    local = cols.to(device)
    channels = local.shape[0]
    count = torch.tensor([local.shape[1]], dtype=torch.int64, device=device)
    counts = torch.empty(world, dtype=torch.int64, device=device)
    dist.all_gather_into_tensor(counts, count, group=group)
    sizes = [int(c) for c in counts.tolist()]
    longest = max(sizes)
    if longest == 0:  # every rank sees the same counts, so every rank skips together
        return [local[:, :0] for _ in range(world)]
    padded = torch.zeros((channels, longest), dtype=local.dtype, device=device)
    padded[:, : local.shape[1]] = local
    gathered = torch.empty((world * channels, longest), dtype=local.dtype, device=device)
    dist.all_gather_into_tensor(gathered, padded, group=group)
    blocks = gathered.view(world, channels, longest)
    return [blocks[r, :, : sizes[r]] for r in range(world)]
