"""`ShardedQuantEmbeddingCollection`: a quantized EC split over the devices of one process.

Each table's shards (table_wise: the whole table; row_wise: row blocks; column_wise: column
blocks) become tables of one `QuantEmbeddingCollection` per (device, shard width), holding the
*same* quantized rows as the unsharded module (codes and the row's scale/bias are sliced, not
re-quantized). Every output row is one stored row copied, never a sum, so outputs are
bit-equal to the unsharded module's for every sharding type.

```
N ids of feature f read by table t (rows R, dim D), 2 devices:
  table_wise : rank r(t) looks up all N ids                          -> (N, D)
  column_wise: rank 0 cols [0, D0), rank 1 cols [D0, D)               -> (N, D) by columns
  row_wise   : rank 0 rows [0, R0), rank 1 rows [R0, R): every rank looks up all N ids, ids
               it does not own clamped to its row 0; a mask per rank picks each id's row
```

row_wise does world_size x the lookups of the unsharded module instead of bucketizing ids:
simple, exact and scriptable; one process has no all-to-all to save. The forward takes a KJT
under `torch.jit.script` too. Dynamic (raw-id) tables: the unsharded module's id maps run
once, before the shards (which hold slots), so outputs stay the unsharded module's.
"""

import dataclasses
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from shardrec_embedding import (
    EmbeddingConfig,
    QuantEmbeddingCollection,
)
from shardrec_embedding.quant import (
    DynamicSequenceLookup,
    SequenceLookup,
    ShardedSequenceLookup,
    check_kjt_input,
    kjt_sequence_index,
    sequence_forward,
)
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor
from shardrec_planner import ParameterSharding
from shardrec_sharding.quant._planned import PlannedQuantModule
from shardrec_sharding.quant._slices import table_shards

__all__ = ["ShardedQuantEmbeddingCollection", "ShardedSequenceLookup"]

_OWNER = "ShardedQuantEmbeddingCollection"


class ShardedQuantEmbeddingCollection(PlannedQuantModule):
    """A `QuantEmbeddingCollection` sharded by `plan` (table name -> ParameterSharding) over
    `len(devices)` devices ("ranks") of this process. `forward(kjt)` returns the unsharded
    module's `{name: JaggedTensor}` (same keys, values, lengths, and ids as weights with
    `need_indices`)."""

    # Python-only state: TorchScript would otherwise compile its classes, typed by the first
    # module it saw, and refuse the next module of another shape.
    __jit_ignored_attributes__ = [*PlannedQuantModule.__jit_ignored_attributes__, "_table_plan"]  # noqa: RUF012

    def __init__(
        self,
        module: QuantEmbeddingCollection,
        plan: Mapping[str, ParameterSharding],
        devices: Sequence[torch.device | str],
    ) -> None:
        super().__init__(plan)
        segments = module._plan.segments
        # per (rank, shard width): the shard tables and their sliced state
        subs: dict[tuple[int, int], list[EmbeddingConfig]] = {}
        sub_state: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
        sub_inputs: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}
        for sh in table_shards(
            module.embedding_configs(),
            segments,
            plan,
            len(devices),
            module.state_dict(),
            "embeddings",
        ):
            if sh.rows == 0 or sh.cols == 0:
                continue  # an empty shard (rows < world_size) owns no id
            key = (sh.rank, sh.cols)
            # A dynamic table's shards hold slots: its id map runs before them (below).
            subs.setdefault(key, []).append(dataclasses.replace(sh.config, dynamic=None))
            sub_state.setdefault(key, {}).update(sh.state)
            # sub-segments follow the sub-table's features, as the sub-module orders them
            lo, hi = (sh.r0, sh.r0 + sh.rows) if sh.row_wise else (-1, -1)
            sub_inputs.setdefault(key, []).extend((s, lo, hi, sh.c0) for s in sh.segments)
        self.rank_modules = nn.ModuleList()
        lookups: list[SequenceLookup] = []
        keys = sorted(subs)
        for key in keys:
            sub = QuantEmbeddingCollection(subs[key], device=devices[key[0]], check_ids=False)
            sub.load_state_dict(sub_state[key])
            self.rank_modules.append(sub)
            assert isinstance(sub.lookup, SequenceLookup)  # the shards are static tables
            lookups.append(sub.lookup)
        sharded = ShardedSequenceLookup(
            lookups,
            [str(torch.device(devices[r])) for r, _ in keys],
            module.lookup.segments,
            [[e[0] for e in sub_inputs[k]] for k in keys],
            [[e[1] for e in sub_inputs[k]] for k in keys],
            [[e[2] for e in sub_inputs[k]] for k in keys],
            [[e[3] for e in sub_inputs[k]] for k in keys],
            module.lookup.check_ids,
        )
        self.lookup: ShardedSequenceLookup | DynamicSequenceLookup = sharded
        if isinstance(module.lookup, DynamicSequenceLookup):
            self.lookup = module.lookup.around(sharded)
        self._table_plan = module._plan  # eager forward: cached KJT key -> segment index
        # What the scripted forward reads (TorchScript-typed attributes).
        self._output_dtype = module.output_dtype()
        self._need_indices = module._need_indices
        self._embedding_names = [seg.embedding_name for seg in segments]

    def forward(self, features: KeyedJaggedTensor) -> dict[str, JaggedTensor]:
        """Under `torch.jit.script` the code after the first branch runs."""
        # `torch._jit_internal.is_scripting` is `torch.jit.is_scripting` (which torch's stubs
        # do not export); TorchScript folds the branch either way.
        if not torch._jit_internal.is_scripting():
            check_kjt_input(features.values(), features.weights_or_none(), False, _OWNER)
            feature_index = self._table_plan.feature_indices(features.keys())
        else:
            meta = self.lookup.segments
            owner = "ShardedQuantEmbeddingCollection"
            feature_index = kjt_sequence_index(features, owner, meta.features, meta.tables)
        rows = self.lookup(features.values(), features.offset_per_key(), feature_index)
        names, dtype = self._embedding_names, self._output_dtype
        return sequence_forward(rows, features, feature_index, names, self._need_indices, dtype)
