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

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from shardrec_embedding import (
    BaseEmbeddingConfig,
    DataType,
    EmbeddingBagConfig,
    PoolingType,
    QuantEmbeddingBagCollection,
)
from shardrec_embedding.quant import (
    PooledLookup,
    ScriptablePooledLookup,
    ShardedPooledLookup,
    eager_lookup_args,
    kjt_lookup_args,
)
from shardrec_jagged import KeyedJaggedTensor, KeyedTensor, TorchScriptable
from shardrec_planner import ParameterSharding, ShardingType

__all__ = ["ShardedPooledLookup", "ShardedQuantEmbeddingBagCollection"]

_BITS = {DataType.INT8: 8, DataType.INT4: 4, DataType.INT2: 2}


class ShardedQuantEmbeddingBagCollection(TorchScriptable, nn.Module):
    """A `QuantEmbeddingBagCollection` sharded by `plan` (table name -> ParameterSharding)
    over `world_size` devices of this process (`device_of(rank)`). `forward(kjt)` returns the
    unsharded module's `KeyedTensor`."""

    __jit_unused_properties__ = ["plan"]  # noqa: RUF012  # read by torch.jit.script
    # Python-only state: TorchScript would otherwise compile `_Frozen` as a class, typed by
    # the first module it saw, and refuse the next module of another shape.
    __jit_ignored_attributes__ = ["_module", "_plan_entries"]  # noqa: RUF012

    def __init__(
        self,
        module: QuantEmbeddingBagCollection,
        plan: Mapping[str, ParameterSharding],
        devices: Sequence[torch.device | str],
    ) -> None:
        super().__init__()
        configs = module.embedding_bag_configs()
        world = len(devices)
        check_quant_plan(configs, plan, world)
        source = module.state_dict()
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
        for ti, t in enumerate(configs):
            ps = plan[t.name]
            kind = ps.sharding_type
            assert ps.sharding_spec is not None
            row_wise = kind is ShardingType.ROW_WISE
            table_segments = [s for s, seg in enumerate(segments) if seg.table_index == ti]
            for s in table_segments:
                combine_sum[s] = row_wise
                divide[s] = row_wise and t.pooling is PoolingType.MEAN
            for i, (shard, rank) in enumerate(zip(ps.sharding_spec.shards, ps.ranks, strict=True)):
                r0, c0 = shard.shard_offsets
                rows, cols = shard.shard_sizes
                name = f"{t.name}__shard{i}"
                rank_tables[rank].append(
                    EmbeddingBagConfig(
                        name=name,
                        num_embeddings=rows,
                        embedding_dim=cols,
                        data_type=t.data_type,
                        feature_names=list(t.feature_names),
                        pooling=PoolingType.SUM if row_wise else t.pooling,
                    )
                )
                prefix = f"embedding_bags.{t.name}."
                rank_state[rank].update(
                    _slice_state(source, prefix, f"embedding_bags.{name}.", t, r0, rows, c0, cols)
                )
                for s in table_segments:
                    placed[s].append((rank, len(inputs[rank]), c0))
                    inputs[rank].append(s)
                    row_lo[rank].append(r0 if row_wise else -1)
                    row_hi[rank].append(r0 + rows if row_wise else -1)
                    rank_dims[rank].append(cols)
        used = [r for r in range(world) if rank_tables[r]]
        lookups: list[PooledLookup] = []
        self.rank_modules = nn.ModuleList()
        for r in used:
            sub = QuantEmbeddingBagCollection(rank_tables[r], device=devices[r], check_ids=False)
            sub.load_state_dict(rank_state[r])
            self.rank_modules.append(sub)
            lookups.append(sub.lookup)
        first_block = {}
        count = 0
        for r in used:
            first_block[r] = count
            count += len(inputs[r])
        parts = [[first_block[r] + j for r, j, _ in sorted(p, key=lambda e: e[2])] for p in placed]
        self.lookup = ShardedPooledLookup(
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
        self._module = _Frozen(module)
        self._plan_entries = dict(plan)
        # What the scripted forward reads (TorchScript-typed attributes).
        self._is_weighted = module.is_weighted()
        self._output_dtype = module.output_dtype()
        self._embedding_names = module.embedding_names()
        self._dims = [s.dim for s in module._plan.segments]

    @property
    def plan(self) -> dict[str, ParameterSharding]:
        return dict(self._plan_entries)

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

    def extra_repr(self) -> str:
        return ", ".join(
            f"{name}: {ps.sharding_type.value} on ranks {list(ps.ranks)}"
            for name, ps in self._plan_entries.items()
        )


class _Frozen:
    """Holds the unsharded module (for names and the KJT plan) without registering it as a
    submodule, so its storage is neither saved nor moved nor counted twice."""

    def __init__(self, module: QuantEmbeddingBagCollection) -> None:
        self._module = module

    def get(self) -> QuantEmbeddingBagCollection:
        return self._module


_SUPPORTED = (ShardingType.TABLE_WISE, ShardingType.ROW_WISE, ShardingType.COLUMN_WISE)


def check_quant_plan(
    configs: Sequence[BaseEmbeddingConfig], plan: Mapping[str, ParameterSharding], world: int
) -> None:
    """`ValueError` naming the table for a plan the quantized sharded collections cannot run:
    a table without an entry, a sharding type other than table/row/column_wise, a shard off
    the devices or outside the table, or shards that do not tile it."""
    missing = [t.name for t in configs if t.name not in plan]
    if missing:
        raise ValueError(f"the plan has no entry for table(s) {missing}")
    for t in configs:
        ps = plan[t.name]
        if ps.sharding_type not in _SUPPORTED:
            raise ValueError(
                f"table {t.name!r}: sharding type {ps.sharding_type.value} is not supported for "
                "quantized inference; use table_wise, row_wise or column_wise"
            )
        _check_geometry(t, ps, world)


def _check_geometry(table: BaseEmbeddingConfig, ps: ParameterSharding, world: int) -> None:
    """`ValueError` naming the table for a shard off the devices or outside the table, or
    shards that do not cover it."""
    area = 0
    for i, (shard, rank) in enumerate(zip(ps.shards, ps.ranks, strict=True)):
        if not 0 <= rank < world:
            raise ValueError(
                f"table {table.name!r}: shard {i} is placed on rank {rank}, outside "
                f"world_size {world}"
            )
        (r0, c0), (rows, cols) = shard.shard_offsets, shard.shard_sizes
        if r0 + rows > table.num_embeddings or c0 + cols > table.embedding_dim:
            raise ValueError(
                f"table {table.name!r}: shard {i} (rows [{r0}, {r0 + rows}), columns "
                f"[{c0}, {c0 + cols})) lies outside the table's "
                f"({table.num_embeddings}, {table.embedding_dim})"
            )
        area += rows * cols
    if area != table.num_embeddings * table.embedding_dim:
        raise ValueError(
            f"table {table.name!r}: the shards cover {area} of the table's "
            f"{table.num_embeddings} x {table.embedding_dim} elements; they must tile it"
        )


def _slice_state(
    source: Mapping[str, torch.Tensor],
    prefix: str,
    new_prefix: str,
    table: BaseEmbeddingConfig,
    r0: int,
    rows: int,
    c0: int,
    cols: int,
) -> dict[str, torch.Tensor]:
    weight = source[prefix + "weight"][r0 : r0 + rows]
    bits = _BITS.get(table.data_type)
    if bits is None:
        weight = weight[:, c0 : c0 + cols]
    else:
        end = c0 + cols
        if (c0 * bits) % 8 or ((end * bits) % 8 and end != table.embedding_dim):
            raise ValueError(
                f"table {table.name!r}: column block [{c0}, {end}) does not start and end on a "
                f"byte of {table.data_type.value} codes; use column blocks that are multiples "
                f"of {8 // bits}"
            )
        weight = weight[:, c0 * bits // 8 : -(-end * bits // 8)]
    out = {new_prefix + "weight": weight.contiguous()}
    if prefix + "weight_qscaleshift" in source:
        qss = source[prefix + "weight_qscaleshift"][r0 : r0 + rows]
        out[new_prefix + "weight_qscaleshift"] = qss.contiguous()
    return out
