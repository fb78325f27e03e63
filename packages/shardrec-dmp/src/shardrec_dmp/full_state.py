"""Gather a sharded model's state into plain tensors, one table at a time.

`iter_full_state_dict(model)` yields `(key, full tensor)` in `state_dict()` order; for a
sharded table every rank sends its local shards (with their offsets) to every other rank, and
each rank assembles the `(rows, dim)` table on CPU. Only one whole table exists at a time, so a
caller that writes each item out and drops it (export, single-process inference) never holds
the whole model. `full_state_dict(model)` collects them into one dict.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from shardrec_collectives import all_gather_object
from shardrec_dmp.model_parallel import DistributedModelParallel

__all__ = ["full_state_dict", "iter_full_state_dict"]


def _assemble(value: object, gathered: list[object]) -> Tensor:
    # A ShardedTensor's global size, from its metadata: value.size() warns of its deprecation.
    size = value.metadata().size  # type: ignore[attr-defined]
    out: Tensor | None = None
    for rank_shards in gathered:
        assert isinstance(rank_shards, list)
        for offsets, piece in rank_shards:
            assert isinstance(piece, Tensor)
            if out is None:
                out = torch.zeros(tuple(size), dtype=piece.dtype)
            region = out
            for dim, (start, length) in enumerate(zip(offsets, piece.shape, strict=True)):
                region = region.narrow(dim, start, length)
            region.copy_(piece)
    assert out is not None, "a sharded table without any shard"
    return out


def iter_full_state_dict(model: DistributedModelParallel) -> Iterator[tuple[str, Tensor]]:
    """`(key, tensor)` for every entry of `model.state_dict()`, sharded tables made whole (CPU).

    A collective: every rank must consume the whole iterator, in the same order.
    """
    if not isinstance(model, DistributedModelParallel):
        raise TypeError(f"expected a DistributedModelParallel, got {type(model).__name__}")
    for key, value in model.state_dict().items():
        local_shards = getattr(value, "local_shards", None)
        if callable(local_shards):
            mine = [
                (list(s.metadata.shard_offsets), s.tensor.detach().cpu()) for s in local_shards()
            ]
            yield key, _assemble(value, all_gather_object(model.env, mine))
        elif isinstance(value, Tensor):
            yield key, value.detach().cpu()


def full_state_dict(model: DistributedModelParallel) -> dict[str, Tensor]:
    """The unsharded model's state_dict as plain CPU tensors, on every rank (a collective)."""
    return dict(iter_full_state_dict(model))
