"""`ShardedQuantEmbeddingBagCollection`: a quantized EBC split over the devices of one process.

Each table's shards (table_wise: the whole table; row_wise: row blocks; column_wise: column
blocks) become tables of one `QuantEmbeddingBagCollection` per device ("rank"), holding the
*same* quantized rows as the unsharded module (codes and the row's scale/bias are sliced, not
re-quantized), so outputs match it up to the order of float additions (row_wise sums shards).

```
KJT ids of feature f read by table t (rows R, dim D), 2 devices:
  table_wise : rank r(t) looks up all ids                         -> (B, D)
  column_wise: rank 0 cols [0, D0), rank 1 cols [D0, D)           -> cat along columns
  row_wise   : rank 0 rows [0, R0), rank 1 rows [R0, R): every rank sees all ids; ids it does
               not own get weight 0 (and row 0), then the partial sums are added
```

row_wise does world_size x the lookups of the unsharded module (each rank scans every id of
the table) instead of bucketizing ids: simple, exact, and scriptable; one process has no
all-to-all to save. The forward is TorchScript-compatible (`scriptable()`).
"""

import dataclasses
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from shardrec_embedding import (
    EmbeddingBagConfig,
    PoolingType,
    QuantEmbeddingBagCollection,
)
from shardrec_embedding.quant import (
    DynamicPooledLookup,
    PooledLookup,
    ScriptablePooledLookup,
    ShardedPooledLookup,
    eager_lookup_args,
    kjt_lookup_args,
)
from shardrec_jagged import KeyedJaggedTensor, KeyedTensor
from shardrec_planner import ParameterSharding
from shardrec_sharding.quant._planned import PlannedQuantModule
from shardrec_sharding.quant._slices import table_shards

__all__ = ["ShardedPooledLookup", "ShardedQuantEmbeddingBagCollection"]


class ShardedQuantEmbeddingBagCollection(PlannedQuantModule):
    """A `QuantEmbeddingBagCollection` sharded by `plan` (table name -> ParameterSharding)
    over `world_size` devices of this process (`device_of(rank)`). `forward(kjt)` returns the
    unsharded module's `KeyedTensor`."""

    # Python-only state: TorchScript would otherwise compile `_Frozen` as a class, typed by
    # the first module it saw, and refuse the next module of another shape.
    __jit_ignored_attributes__ = [*PlannedQuantModule.__jit_ignored_attributes__, "_module"]  # noqa: RUF012

    def __init__(
        self,
        module: QuantEmbeddingBagCollection,
        plan: Mapping[str, ParameterSharding],
        devices: Sequence[torch.device | str],
    ) -> None:
        super().__init__(plan)
        world = len(devices)
        segments = module._plan.segments
        rank_tables: list[list[EmbeddingBagConfig]] = [[] for _ in range(world)]
        rank_state: list[dict[str, torch.Tensor]] = [{} for _ in range(world)]
        inputs: list[list[int]] = [[] for _ in range(world)]
        row_lo: list[list[int]] = [[] for _ in range(world)]
        row_hi: list[list[int]] = [[] for _ in range(world)]
        rank_dims: list[list[int]] = [[] for _ in range(world)]
        placed: list[list[tuple[int, int, int]]] = [[] for _ in segments]  # (rank, j, col)
        divide = [False] * len(segments)
        combine_sum = [False] * len(segments)
        for sh in table_shards(
            module.embedding_bag_configs(),
            segments,
            plan,
            world,
            module.state_dict(),
            "embedding_bags",
        ):
            rank = sh.rank
            # row_wise: every shard pools its part of a bag; the parts are summed (a mean
            # divided once, after the sum)
            # A dynamic table's shards hold slots: its id map runs before them (below).
            config = dataclasses.replace(sh.config, dynamic=None)
            if sh.row_wise:
                config = dataclasses.replace(config, pooling=PoolingType.SUM)
            rank_tables[rank].append(config)
            rank_state[rank].update(sh.state)
            for s in sh.segments:
                combine_sum[s] = sh.row_wise
                divide[s] = sh.row_wise and sh.table.pooling is PoolingType.MEAN
                placed[s].append((rank, len(inputs[rank]), sh.c0))
                inputs[rank].append(s)
                row_lo[rank].append(sh.r0 if sh.row_wise else -1)
                row_hi[rank].append(sh.r0 + sh.rows if sh.row_wise else -1)
                rank_dims[rank].append(sh.cols)
        used = [r for r in range(world) if rank_tables[r]]
        lookups: list[PooledLookup] = []
        self.rank_modules = nn.ModuleList()
        for r in used:
            sub = QuantEmbeddingBagCollection(rank_tables[r], device=devices[r], check_ids=False)
            sub.load_state_dict(rank_state[r])
            self.rank_modules.append(sub)
            assert isinstance(sub.lookup, PooledLookup)  # the shards are static tables
            lookups.append(sub.lookup)
        first_block = {}
        count = 0
        for r in used:
            first_block[r] = count
            count += len(inputs[r])
        parts = [[first_block[r] + j for r, j, _ in sorted(p, key=lambda e: e[2])] for p in placed]
        sharded = ShardedPooledLookup(
            lookups,
            [str(torch.device(devices[r])) for r in used],
            module.lookup.segments,
            [inputs[r] for r in used],
            [row_lo[r] for r in used],
            [row_hi[r] for r in used],
            [rank_dims[r] for r in used],
            parts,
            combine_sum,
            divide,
            module.lookup.check_ids,
        )
        self.lookup: ShardedPooledLookup | DynamicPooledLookup = sharded
        if isinstance(module.lookup, DynamicPooledLookup):
            self.lookup = module.lookup.around(sharded)
        self._module = _Frozen(module)
        # What the scripted forward reads (TorchScript-typed attributes).
        self._is_weighted = module.is_weighted()
        self._output_dtype = module.output_dtype()
        self._embedding_names = module.embedding_names()
        self._dims = [s.dim for s in module._plan.segments]

    def forward(self, features: KeyedJaggedTensor) -> KeyedTensor:
        if not torch._jit_internal.is_scripting():
            unsharded = self._module.get()
            weights = features.weights_or_none()
            if unsharded.is_weighted() != (weights is not None):
                state = "weighted" if unsharded.is_weighted() else "unweighted"
                raise ValueError(
                    f"ShardedQuantEmbeddingBagCollection is {state}; the KJT disagrees"
                )
            feature_index = unsharded._plan.feature_indices(features.keys())
            args = eager_lookup_args(features, weights, feature_index)
        else:
            meta = self.lookup.segments
            owner = "ShardedQuantEmbeddingBagCollection"
            args = kjt_lookup_args(features, self._is_weighted, owner, meta.features, meta.tables)
        out = self.lookup(*args)
        return KeyedTensor(self._embedding_names, self._dims, out.to(self._output_dtype))

    def scriptable(self, keys: Sequence[str] | None = None) -> ScriptablePooledLookup:
        """As `QuantEmbeddingBagCollection.scriptable`, over the sharded lookups."""
        unsharded = self._module.get()
        keys = list(keys) if keys is not None else list(unsharded._plan.features)
        return ScriptablePooledLookup(
            self.lookup,
            keys,
            unsharded._plan.feature_indices(keys),
            unsharded.embedding_names(),
            unsharded.output_dtype(),
        )


class _Frozen:
    """Holds the unsharded module (for names and the KJT plan) without registering it as a
    submodule, so its storage is neither saved nor moved nor counted twice."""

    def __init__(self, module: QuantEmbeddingBagCollection) -> None:
        self._module = module

    def get(self) -> QuantEmbeddingBagCollection:
        return self._module
