"""`EmbeddingCollection`: per-id (sequence) embeddings of many tables, one lookup per dtype."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from shardrec_embedding._tables import (
    PackedCollection,
    check_features,
    group_weights,
    materialize_and_init,
    module_weight,
    outputs_by_table,
    tables_on_meta,
    traced_input,
    validate_tables,
)
from shardrec_embedding.batched_lookup import batched_embedding
from shardrec_embedding.configs import (
    BaseEmbeddingConfig,
    EmbeddingConfig,
    PoolingType,
    module_dtype,
)
from shardrec_embedding.dynamic.collection import DynamicTables, dynamic_configs
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, TorchScriptable

__all__ = ["EmbeddingCollection"]

_OWNER = "EmbeddingCollection"


class EmbeddingCollection(TorchScriptable, PackedCollection):
    """Unpooled embeddings of a list of tables (TorchRec's `EmbeddingCollection`).

    Args:
        tables: one `EmbeddingConfig` per table; names unique; all the same `embedding_dim`.
        device: where the weights live; `"meta"` allocates nothing (see `reset_parameters`).
        need_indices: put each feature's ids in the output JaggedTensor's `weights`.
        check_ids: as for `EmbeddingBagCollection`: `IndexError` for an out-of-range id.

    `forward(features)` returns `{name: JaggedTensor}` with `values()` `(N_f, D)` fp32 and the
    feature's lengths, named like `EmbeddingBagCollection`'s keys (`feature` or
    `feature@table`). `state_dict()` keys: `embeddings.<table>.weight`.

    Under `torch.jit.script`, `torch.fx` tracing and on `meta` weights the forward is
    TorchRec's plain form (one `nn.Embedding` call per (table, feature)); a seed gives
    TorchRec's initial weights (see `EmbeddingBagCollection`).
    """

    # Python-only state the scripted forward never reads.
    __jit_ignored_attributes__ = [  # noqa: RUF012
        *PackedCollection.__jit_ignored_attributes__,
        "_embedding_configs",
    ]

    def __init__(
        self,
        tables: Sequence[EmbeddingConfig],
        device: torch.device | str | None = None,
        need_indices: bool = False,
        *,
        check_ids: bool = True,
    ) -> None:
        super().__init__()
        configs = [t for t in validate_tables(tables, EmbeddingConfig, _OWNER, device=device)]
        dims = {t.embedding_dim for t in configs}
        if len(dims) > 1:
            by_table = {t.name: t.embedding_dim for t in configs}
            raise ValueError(
                f"{_OWNER} needs one embedding_dim for all tables, got {by_table}; "
                "split them into one collection per dim"
            )
        self._embedding_configs = configs
        self._embedding_dim = dims.pop() if dims else -1
        self._need_indices = need_indices
        self._check_ids = check_ids
        self.embeddings: nn.ModuleDict = self._pack_tables(
            configs, [PoolingType.NONE] * len(configs), device, _make_embedding
        )
        # Per table, the output names of the features it reads (the plain forward's loop).
        self._table_outputs = outputs_by_table(configs, self._plan)
        self._has_dynamic = bool(dynamic_configs(configs))
        if self._has_dynamic:
            # Raw-id tables (docs/dynamic.md): their ids become slots before the lookup.
            self.dynamic_tables = DynamicTables(configs, _OWNER)
            for t in dynamic_configs(configs):
                self.dynamic_tables.bind_weight(t.name, _weight_of(self.embeddings, t.name))
        if not tables_on_meta(self.embeddings):
            with torch.no_grad():
                for t in configs:
                    # TorchRec draws each nn.Embedding's N(0, 1) weights, then runs its init,
                    # table by table: the same draws make a seed give TorchRec's weights.
                    weight = module_weight(self.embeddings[t.name])
                    weight.normal_()
                    t.init_weight_(weight)

    def forward(self, features: KeyedJaggedTensor) -> dict[str, JaggedTensor]:
        """features: KJT with every feature the tables read. Returns name -> JaggedTensor of
        `(N_f, D)` fp32 rows, one per id, with the feature's `(B,)` lengths."""
        # Nested ifs: TorchScript drops only the body of `if not is_scripting()`.
        if not torch._jit_internal.is_scripting():
            if not traced_input(features) and not tables_on_meta(self.embeddings):
                return self._forward_eager(features)
            self._refuse_dynamic()
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
    def _refuse_dynamic(self) -> None:
        if self._has_dynamic:
            raise NotImplementedError(
                f"{_OWNER}: torch.fx tracing and meta lookups of dynamic (raw-id) tables are not "
                "supported yet; run the module eagerly on materialized weights"
            )

    def _forward_plain(self, features: KeyedJaggedTensor) -> dict[str, JaggedTensor]:
        """One `nn.Embedding` call per (table, feature): TorchScript, fx and meta."""
        jts = features.to_dict()
        out: dict[str, JaggedTensor] = {}
        for i, emb in enumerate(self.embeddings.values()):
            for name, key in zip(self._table_features[i], self._table_outputs[i], strict=True):
                jt = jts[name]
                ids = jt.values()
                rows: torch.Tensor = emb(ids)
                out[key] = JaggedTensor(
                    values=rows.float(),
                    lengths=jt.lengths(),
                    weights=ids if self._need_indices else None,
                )
        return out

    @torch.jit.unused
    def _forward_eager(self, features: KeyedJaggedTensor) -> dict[str, JaggedTensor]:
        if not self._has_dynamic:
            return self._forward_packed(features)
        remapped = self.dynamic_tables.remap(features, training=self.training, owner=_OWNER)
        out = self._forward_packed(remapped.features)
        self.dynamic_tables.hold_until_backward([jt.values() for jt in out.values()])
        raw = remapped.raw_values
        opk = features.offset_per_key()
        position = {k: i for i, k in enumerate(features.keys())}
        stride = features.stride()
        for seg in self._plan.segments:
            k = position[seg.feature]
            info = remapped.dropped.get(seg.feature)
            jt = out[seg.embedding_name]
            if info is None and not self._need_indices:
                continue
            out[seg.embedding_name] = JaggedTensor(
                values=DynamicTables.fix_sequence(jt.values(), info),
                lengths=features.lengths()[k * stride : (k + 1) * stride],
                weights=raw[opk[k] : opk[k + 1]] if self._need_indices else None,
            )
        return out

    @torch.jit.unused
    def _forward_packed(self, features: KeyedJaggedTensor) -> dict[str, JaggedTensor]:
        values, _ = check_features(features, weighted=False, owner=_OWNER)
        kjt = self._plan.read_kjt(features, values, None, self._check_ids)
        offset_per_key, feature_index = kjt.offset_per_key, kjt.feature_index
        pieces: dict[int, JaggedTensor] = {}
        for g, group in enumerate(self._plan.groups):
            inp = self._plan.group_input(group, kjt)
            rows = batched_embedding(
                group_weights(self._grouped[g]), inp.ids, workspace=self._workspaces[g]
            ).float()
            sizes = [
                offset_per_key[feature_index[s] + 1] - offset_per_key[feature_index[s]]
                for s in group.segments
            ]
            # one split (one backward node), not a narrow per segment
            parts = torch.split_with_sizes(rows, sizes)
            for j, (s, part) in enumerate(zip(group.segments, parts, strict=True)):
                k = feature_index[s]
                ids = values[offset_per_key[k] : offset_per_key[k + 1]]
                pieces[s] = JaggedTensor(
                    values=part,
                    lengths=inp.lengths[j],
                    weights=ids if self._need_indices else None,
                )
        return {self._plan.segments[s].embedding_name: pieces[s] for s in sorted(pieces)}

    def need_indices(self) -> bool:
        return self._need_indices

    def embedding_dim(self) -> int:
        return self._embedding_dim

    def embedding_configs(self) -> list[EmbeddingConfig]:
        return list(self._embedding_configs)  # type: ignore[arg-type]  # checked by validate_tables

    def embedding_names_by_table(self) -> list[list[str]]:
        names: list[list[str]] = [[] for _ in self._embedding_configs]
        for s in self._plan.segments:
            names[s.table_index].append(s.embedding_name)
        return names

    def reset_parameters(self, device: torch.device | str | None = None) -> None:
        """(Re)initialize every table; on a meta module first allocate on `device` (default
        CPU). See `EmbeddingBagCollection.reset_parameters`."""
        materialize_and_init(self, self._embedding_configs, self.embeddings, device)


def _weight_of(modules: nn.ModuleDict, name: str) -> Callable[[], torch.Tensor]:
    return lambda: module_weight(modules[name])


def _make_embedding(config: BaseEmbeddingConfig, weight: torch.Tensor) -> nn.Module:
    return nn.Embedding(
        config.num_embeddings,
        config.embedding_dim,
        _weight=weight,
        dtype=module_dtype(config.data_type),
    )
