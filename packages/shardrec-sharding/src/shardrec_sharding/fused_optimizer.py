"""`ShardedFusedOptimizer`: the fused optimizer of a sharded collection.

It combines the `FusedEmbeddingOptimizer` of each local fused lookup (shardrec_optim) and shows
their per-row state through the collection's `ShardedStateDict`, so the optimizer state is
checkpointed like the tables it belongs to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torch import Tensor
from torch.distributed._shard.sharded_tensor.api import ShardedTensor

from shardrec_optim import CombinedOptimizer, KeyedOptimizer
from shardrec_sharding.state_dict import ShardedStateDict
from shardrec_tiered.checkpoint import StoreSlice, is_streaming

__all__ = ["ShardedFusedOptimizer"]


class ShardedFusedOptimizer(CombinedOptimizer):
    """The fused optimizer of a sharded collection, checkpointable like its tables.

    `state_dict()["state"]["<attr>.<table>.weight"]` holds the table's optimizer state with
    sharded tables' per-row tensors as ShardedTensors over the table's rows: `(rows, dim)` state
    (Adam's moments, Adagrad's sum) with the weight's shards, `(rows,)` state (row-wise
    optimizers) with row blocks. Row-wise state of a column-split table has one `(rows,)` value
    per rank holding blocks of it, so it becomes a `(rows, holders)` ShardedTensor, one column
    per rank (restorable under the same plan only). `load_state_dict` takes them back (or this
    rank's local tensors).
    """

    def __init__(
        self, optims: Sequence[tuple[str, KeyedOptimizer]], tables: ShardedStateDict
    ) -> None:
        super().__init__(list(optims))
        self._tables = tables
        self._raw_id_tiers = tables.raw_id_tiers()

    def state_dict(self) -> dict[str, object]:
        if self._raw_id_tiers and not is_streaming():
            raise NotImplementedError(
                f"fused_optimizer.state_dict() of a collection with raw-id tier tables "
                f"{self._raw_id_tiers} (ssd_virtual_table / dram_virtual_table): it would hold "
                "only the cached rows' state; the whole table's optimizer state is in the "
                "module's state_dict (tier.<rank>.rows): checkpoint with shardrec_dmp.save"
            )
        out = super().state_dict()
        state = out["state"]
        assert isinstance(state, dict)
        for key, entry in state.items():
            table = key.split(".")[-2]
            if isinstance(entry, dict):
                for name, value in entry.items():
                    if isinstance(value, Tensor | StoreSlice):
                        entry[name] = self._tables.state_to_sharded(table, value)
        return out

    def load_state_dict(self, state_dict: Mapping[str, object]) -> None:
        state = state_dict.get("state")
        if isinstance(state, Mapping):
            local: dict[str, object] = {}
            for key, entry in state.items():
                table = str(key).split(".")[-2]
                if isinstance(entry, Mapping):
                    local[key] = {
                        n: self._tables.state_to_local(table, v)
                        if isinstance(v, ShardedTensor)
                        else v
                        for n, v in entry.items()
                    }
                else:
                    local[key] = entry
            state_dict = {**state_dict, "state": local}
        super().load_state_dict(state_dict)
