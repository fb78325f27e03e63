"""One step of a one-process training reference for W ranks (DMP / pipeline tests)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def bce_step_per_rank(
    optimizer: torch.optim.Optimizer, logits: torch.Tensor, labels: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """Step `optimizer` on the sum over ranks of each rank's mean BCE; returns those losses.

    `logits` are the W ranks' batches concatenated in rank order; `labels[r]` is rank r's
    labels, which also says how many of the logits are rank r's. The returned losses are
    detached, one per rank.
    """
    per_rank: list[torch.Tensor] = []
    start = 0
    for y in labels:
        n = y.numel()
        per_rank.append(F.binary_cross_entropy_with_logits(logits[start : start + n], y))
        start += n
    optimizer.zero_grad()
    torch.stack(per_rank).sum().backward()  # type: ignore[no-untyped-call]  # untyped in torch's stubs
    optimizer.step()
    return [x.detach() for x in per_rank]
