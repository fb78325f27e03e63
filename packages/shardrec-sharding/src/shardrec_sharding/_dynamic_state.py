"""The state_dict of a partitioned (row-wise) dynamic table's id map: each part's per-slot
buffers, sketch and counters as table-wide `ShardedTensor`s, so DCP saves every part and loads
it back into the same parts (part of `shardrec_sharding.dynamic`)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn
from torch.distributed._shard.metadata import ShardMetadata as TorchShardMetadata
from torch.distributed._shard.sharded_tensor.api import ShardedTensor
from torch.distributed._shard.sharded_tensor.metadata import (
    ShardedTensorMetadata,
    TensorProperties,
)
from torch.distributed._shard.sharded_tensor.shard import Shard

from shardrec_embedding.dynamic.table import COUNTERS

if TYPE_CHECKING:
    from shardrec_sharding.dynamic import ShardedDynamicTable

__all__ = ["PartState"]

_PER_SLOT = ("slot_ids", "occupied", "last_seen", "counts", "free_slots")


class PartState:
    """A partitioned table's state in `state_dict()` as table-wide `ShardedTensor`s: per-slot
    buffers `(capacity,)` by global slot (part k at `offsets[k]`, like the rows), the sketch
    `(2, sum of the parts' widths)`, the counters `(parts, len(COUNTERS))`, one row per part.
    DCP then saves every part (not one rank's copy) and loads it back into the same parts.
    """

    def __init__(self, table: ShardedDynamicTable) -> None:
        self.table = table
        routing = table.routing
        self.parts = len(routing.owners)
        self.index = routing.owners.index(table.env.rank) if table._owns else -1
        self.widths = (
            [table.config.sketch_cells(c) for c in routing.capacities]
            if table.sketch.shape[0]
            else [0] * self.parts
        )

    def _placement(self, k: int) -> str:
        return f"rank:{self.table.routing.owners[k]}/{self.table.env.device}"

    def _sharded(
        self, local: Tensor, offsets: list[list[int]], sizes: list[list[int]], size: list[int]
    ) -> ShardedTensor:
        metas = [
            TorchShardMetadata(shard_offsets=o, shard_sizes=z, placement=self._placement(k))
            for k, (o, z) in enumerate(zip(offsets, sizes, strict=True))
            if all(n > 0 for n in z)
        ]
        shards = []
        if self.index >= 0 and all(n > 0 for n in sizes[self.index]):
            shards.append(
                Shard(
                    tensor=local,
                    metadata=TorchShardMetadata(
                        shard_offsets=offsets[self.index],
                        shard_sizes=sizes[self.index],
                        placement=self._placement(self.index),
                    ),
                )
            )
        meta = ShardedTensorMetadata(
            shards_metadata=metas,
            size=torch.Size(size),
            tensor_properties=TensorProperties(dtype=local.dtype, requires_grad=False),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ShardedTensor announces its deprecation
            return ShardedTensor._init_from_local_shards_and_global_metadata(
                shards, meta, process_group=self.table.env.pg
            )

    def to_sharded(
        self, module: nn.Module, state_dict: dict[str, object], prefix: str, _meta: object
    ) -> None:
        t = self.table
        r = t.routing
        for name in _PER_SLOT:
            state_dict[prefix + name] = self._sharded(
                getattr(t, name),
                [[o] for o in r.offsets],
                [[c] for c in r.capacities],
                [t.table_capacity],
            )
        if t.sketch.shape[0]:
            starts = [sum(self.widths[:k]) for k in range(self.parts)]
            state_dict[prefix + "sketch"] = self._sharded(
                t.sketch, [[0, s] for s in starts], [[2, w] for w in self.widths],
                [2, sum(self.widths)],
            )  # fmt: skip
        counters = torch.tensor([[t._counters[k] for k in COUNTERS]], dtype=torch.int64)
        state_dict[prefix + "_extra_state"] = self._sharded(
            counters,
            [[k, 0] for k in range(self.parts)],
            [[1, len(COUNTERS)]] * self.parts,
            [self.parts, len(COUNTERS)],
        )

    def to_local(self, state_dict: dict[str, object], prefix: str, *_unused: object) -> None:
        t = self.table
        for key in [*_PER_SLOT, "sketch", "_extra_state"]:
            value = state_dict.get(prefix + key)
            if not isinstance(value, ShardedTensor):
                continue
            mine = value.local_shards()
            if key == "_extra_state":
                state_dict[prefix + key] = (
                    dict(zip(COUNTERS, mine[0].tensor.reshape(-1).tolist(), strict=True))
                    if mine
                    else dict(t._counters)
                )
            else:
                state_dict[prefix + key] = mine[0].tensor if mine else getattr(t, key)
