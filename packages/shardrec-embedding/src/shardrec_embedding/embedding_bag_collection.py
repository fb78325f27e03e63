"""`EmbeddingBagCollection`: pooled embeddings of many tables, one lookup per table group."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from shardrec_embedding._native.ops import (
    GradLease,
    native_applies,
    native_clear_stale,
    native_pooled_lookup,
)
from shardrec_embedding._pooled_api import PooledCollectionAPI
from shardrec_embedding._tables import (
    PackedCollection,
    check_features,
    group_weights,
    materialize_and_init,
    module_weight,
    tables_on_meta,
    traced_input,
    validate_tables,
)
from shardrec_embedding.batched_lookup import (
    GradWorkspace,
    batched_embedding_bag,
    next_stamp,
    split_rows,
)
from shardrec_embedding.configs import (
    BaseEmbeddingConfig,
    EmbeddingBagConfig,
    PoolingType,
    module_dtype,
)
from shardrec_embedding.dynamic.collection import DynamicTables, dynamic_configs
from shardrec_jagged import KeyedJaggedTensor, KeyedTensor, TorchScriptable

__all__ = ["EmbeddingBagCollection"]

_OWNER = "EmbeddingBagCollection"


class EmbeddingBagCollection(PooledCollectionAPI, TorchScriptable, PackedCollection):
    """Pooled embeddings of a list of tables (TorchRec's `EmbeddingBagCollection`).

    Args:
        tables: one `EmbeddingBagConfig` per table; names unique.
        is_weighted: multiply each id's row by the KJT's per-id weight before SUM pooling.
        device: where the weights live; `"meta"` allocates nothing (see `reset_parameters`).
        check_ids: raise `IndexError` for an id outside `[0, num_embeddings)` (default). Costs
            one `aminmax` over the ids per forward (one per segment when some ids exceed the
            smallest table). Turn off only for pipelines whose ids are known to be in range:
            an out-of-range id then silently reads a row of another table of its group.
            The native CPU forward (below) checks every id in its kernel at no cost and
            raises the same `IndexError` whatever this flag says.

    `forward(features)` returns a `KeyedTensor` of shape `(B, sum of dims)`: one block per
    (table, feature) in table order then feature order, keyed by the feature name, or
    `feature@table` when several tables read that feature. Empty bags give zeros; fp16/bf16
    tables return fp32 (as TorchRec). Features of the KJT no table reads are ignored.

    Tables sharing (embedding_dim, data_type, pooling) are stored in one packed buffer and
    looked up by one kernel call (docs/design/embedding-table-batching.md); each table's
    `embedding_bags[name].weight` is still its own Parameter and receives its own gradient.
    `state_dict()` keys are TorchRec's: `embedding_bags.<table>.weight`.

    On CPU with fp32 tables (dim <= 1024) the forward is one call of the native kernel
    `shardrec::pooled_lookup` for all tables, writing each block straight into the output
    (docs/design/native-kernels.md); otherwise, or without a C compiler, the torch path above.

    Under `torch.jit.script`, `torch.fx` tracing (the KJT is a Proxy) and on `meta` weights the
    forward is TorchRec's plain form instead: one `nn.EmbeddingBag` call per (table, feature),
    which scripts, traces op by op and computes shapes without data (docs/embedding.md).
    Built with the same seed, the tables hold TorchRec's initial weights (each bag's N(0, 1)
    draw, then the configs' inits, in TorchRec's order).
    """

    # Python-only state the scripted forward never reads.
    __jit_ignored_attributes__ = [  # noqa: RUF012
        *PackedCollection.__jit_ignored_attributes__,
        "_configs",
        "_dynamic_segments",
    ]

    def __init__(
        self,
        tables: Sequence[EmbeddingBagConfig],
        is_weighted: bool = False,
        device: torch.device | str | None = None,
        *,
        check_ids: bool = True,
    ) -> None:
        super().__init__()
        configs = validate_tables(tables, EmbeddingBagConfig, _OWNER, device=device)
        bag_configs = [t for t in configs if isinstance(t, EmbeddingBagConfig)]
        for t in bag_configs:
            if t.pooling is PoolingType.NONE:
                raise ValueError(
                    f"{_OWNER}: table {t.name!r} has pooling NONE; bags need SUM or MEAN "
                    "(use EmbeddingCollection for unpooled embeddings)"
                )
            if is_weighted and t.pooling is PoolingType.MEAN:
                raise ValueError(
                    f"{_OWNER}: table {t.name!r} has MEAN pooling but is_weighted=True; per-id "
                    "weights need SUM pooling"
                )
        self._configs = bag_configs
        self._is_weighted = is_weighted
        self._check_ids = check_ids
        self.embedding_bags: nn.ModuleDict = self._pack_tables(
            bag_configs, [t.pooling for t in bag_configs], device, _make_bag
        )
        self._embedding_names = [s.embedding_name for s in self._plan.segments]
        self._lengths_per_embedding = [s.dim for s in self._plan.segments]
        self._segment_tables = [s.table_index for s in self._plan.segments]
        self._segment_means = [
            int(bag_configs[s.table_index].pooling is PoolingType.MEAN) for s in self._plan.segments
        ]
        self._segment_names = "\x1f".join(
            part for s in self._plan.segments for part in (s.feature, s.table)
        )
        self._has_dynamic = bool(dynamic_configs(bag_configs))
        if self._has_dynamic:
            # Raw-id tables (docs/dynamic.md): their ids become slots before the lookup.
            self.dynamic_tables = DynamicTables(bag_configs, _OWNER)
            self._dynamic_segments = [
                (s.feature, s.dim, bag_configs[s.table_index].pooling is PoolingType.MEAN)
                for s in self._plan.segments
            ]
            for t in dynamic_configs(bag_configs):
                self.dynamic_tables.bind_weight(t.name, _weight_of(self.embedding_bags, t.name))
        if not tables_on_meta(self.embedding_bags):
            with torch.no_grad():
                for t in bag_configs:
                    # TorchRec's nn.EmbeddingBag draws N(0, 1) weights before the inits run:
                    # drawing them too makes a seed give TorchRec's weights.
                    module_weight(self.embedding_bags[t.name]).normal_()
            self.reset_parameters()

    def forward(self, features: KeyedJaggedTensor) -> KeyedTensor:
        """features: KJT with (at least) every feature the tables read; `(F * B,)` lengths.
        Returns `KeyedTensor` `(B, sum of dims)`, fp32."""
        # Nested ifs: TorchScript drops only the body of `if not is_scripting()`.
        if not torch._jit_internal.is_scripting():
            if not traced_input(features):
                if tables_on_meta(self.embedding_bags):
                    return self._forward_meta(features)
                return self._forward_eager(features)
            self._refuse_traced_dynamic()
        return self._forward_plain(features)

    def __prepare_scriptable__(self) -> TorchScriptable:
        if self._has_dynamic:
            raise NotImplementedError(
                f"{_OWNER}: torch.jit.script of dynamic (raw-id) tables is not supported yet "
                "(the id map is native code); script its inference copy instead: "
                "torch.jit.script(quantize_inference_model(module.eval(), torch.float32)) "
                "maps raw ids itself and gives this module's eval() outputs exactly"
            )
        return super().__prepare_scriptable__()

    @torch.jit.unused
    def _refuse_traced_dynamic(self) -> None:
        if self._has_dynamic:
            raise NotImplementedError(
                f"{_OWNER}: torch.fx tracing of dynamic (raw-id) tables is not supported yet; "
                "run the module eagerly"
            )

    @torch.jit.unused
    def _forward_meta(self, features: KeyedJaggedTensor) -> KeyedTensor:
        """The output's shape and keys on `meta`, without reading any id."""
        width = sum(self._lengths_per_embedding)
        values = torch.empty(features.stride(), width, device="meta")
        return KeyedTensor(
            keys=self._embedding_names, length_per_key=self._lengths_per_embedding, values=values
        )

    def _forward_plain(self, features: KeyedJaggedTensor) -> KeyedTensor:
        """One `nn.EmbeddingBag` call per (table, feature): TorchScript, fx and meta."""
        jts = features.to_dict()
        pooled: list[torch.Tensor] = []
        for i, bag in enumerate(self.embedding_bags.values()):
            for name in self._table_features[i]:
                jt = jts[name]
                weights = jt.weights() if self._is_weighted else None
                pooled.append(bag(jt.values(), jt.offsets(), per_sample_weights=weights).float())
        return KeyedTensor(
            keys=self._embedding_names,
            length_per_key=self._lengths_per_embedding,
            values=torch.cat(pooled, dim=1),
        )

    @torch.jit.unused
    def _forward_eager(self, features: KeyedJaggedTensor) -> KeyedTensor:
        if not self._has_dynamic:
            return self._forward_packed(features)
        remapped = self.dynamic_tables.remap(features, training=self.training, owner=_OWNER)
        out = self._forward_packed(remapped.features).values()
        self.dynamic_tables.hold_until_backward([out])
        return KeyedTensor(
            keys=self._embedding_names,
            length_per_key=self._lengths_per_embedding,
            values=DynamicTables.fix_pooled(out, remapped, self._dynamic_segments),
        )

    @torch.jit.unused
    def _forward_packed(self, features: KeyedJaggedTensor) -> KeyedTensor:
        values, weights = check_features(features, weighted=self._is_weighted, owner=_OWNER)
        keys = features.keys()
        feature_index = self._plan.feature_indices(keys)
        batch = features.stride()
        table_weights = [module_weight(self.embedding_bags[t.name]) for t in self._configs]
        if native_applies(table_weights, values):
            # One native call pools every segment into its output columns, range check fused
            # (docs/design/native-kernels.md); it checks ids even with check_ids=False, since
            # an out-of-range id would read outside the table's own storage.
            out = native_pooled_lookup(
                table_weights,
                values,
                features.offsets(),
                weights,
                segment_tables=self._segment_tables,
                segment_keys=feature_index,
                segment_means=self._segment_means,
                batch_size=batch,
                names=self._segment_names,
                grad_buffers=self._grad_buffers,
            )
            return KeyedTensor(
                keys=self._embedding_names, length_per_key=self._lengths_per_embedding, values=out
            )
        kjt = self._plan.read_kjt(features, values, weights, self._check_ids)
        pooled_per_group: list[torch.Tensor] = []
        for g, group in enumerate(self._plan.groups):
            inp = self._plan.group_input(group, kjt)
            pooled = batched_embedding_bag(
                group_weights(self._grouped[g]),
                inp.ids,
                inp.offsets,
                pooling=group.pooling,
                per_sample_weights=inp.weights,
                workspace=self._workspaces[g],
            )
            pooled_per_group.append(pooled.float())
        out = self._plan.assemble_pooled(pooled_per_group, batch, values.device)
        return KeyedTensor(
            keys=self._embedding_names, length_per_key=self._lengths_per_embedding, values=out
        )

    @torch.jit.unused
    def _grad_buffers(self) -> GradLease:
        """Dense gradients per table (table order), views of each group's reused
        `GradWorkspace` buffer, for the native backward's stamped scatter (no full zero)."""
        stamp = next_stamp()
        out: list[torch.Tensor] = [torch.empty(0)] * len(self._configs)
        marks_out: list[torch.Tensor] = [torch.empty(0)] * len(self._configs)
        leased: list[tuple[GradWorkspace, torch.Tensor, torch.Tensor]] = []
        for g, group in enumerate(self._plan.groups):
            rows = [self._configs[i].num_embeddings for i in group.tables]
            workspace = self._workspaces[g]
            buffer, marks = workspace.stamped(sum(rows), group.dim, stamp)
            leased.append((workspace, buffer, marks))
            for i, view, mark in zip(
                group.tables, split_rows(buffer, rows), marks.split_with_sizes(rows), strict=True
            ):
                out[i], marks_out[i] = view, mark

        def finish() -> None:
            for workspace, buffer, marks in leased:
                native_clear_stale(buffer, marks, stamp)
                workspace.settle(buffer, stamp)

        return GradLease(out, marks_out, stamp, finish)

    def reset_parameters(self, device: torch.device | str | None = None) -> None:
        """(Re)initialize every table with its config's init.

        On a module built with `device="meta"`, first allocates the weights on `device`
        (default CPU): `EmbeddingBagCollection(tables, device="meta").reset_parameters()`
        materializes it. `to_empty(device=...)` followed by `reset_parameters()` works too.
        """
        materialize_and_init(self, self._configs, self.embedding_bags, device)

    def extra_repr(self) -> str:
        groups = ", ".join(
            f"{len(g.tables)}x(dim={g.dim}, {g.dtype}, {g.pooling.value})"
            for g in self._plan.groups
        )
        return f"is_weighted={self._is_weighted}, lookup groups: [{groups}]"


def _weight_of(modules: nn.ModuleDict, name: str) -> Callable[[], torch.Tensor]:
    return lambda: module_weight(modules[name])


def _make_bag(config: BaseEmbeddingConfig, weight: torch.Tensor) -> nn.Module:
    assert isinstance(config, EmbeddingBagConfig)
    return nn.EmbeddingBag(
        config.num_embeddings,
        config.embedding_dim,
        mode=config.pooling.value.lower(),
        include_last_offset=True,
        _weight=weight,
        dtype=module_dtype(config.data_type),
    )
