"""`FusedEmbeddingBagCollection`: an EmbeddingBagCollection whose tables train in backward."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor, nn

from shardrec_embedding._grouping import KJTInput, TablePlan
from shardrec_embedding._pooled_api import PooledCollectionAPI
from shardrec_embedding._tables import WeightsDevice, check_features, validate_tables
from shardrec_embedding.configs import EmbeddingBagConfig, PoolingType
from shardrec_embedding.dynamic.collection import DynamicTables, dynamic_configs
from shardrec_embedding.dynamic.reset import fill_rows_
from shardrec_embedding.fused.batched import BatchedFusedEmbeddingBag
from shardrec_embedding.fused.segments import (
    SegmentRead,
    segment_lookup,
    segment_lookup_unsupported,
)
from shardrec_embedding.fused.tables import FusedTableSpec
from shardrec_jagged import KeyedJaggedTensor, KeyedTensor
from shardrec_optim import (
    CombinedOptimizer,
    EmbOptimType,
    FusedOptimSpec,
    fused_spec_from_optimizer,
)

_OWNER = "FusedEmbeddingBagCollection"

OptimizerType = (
    type[torch.optim.Optimizer] | EmbOptimType | str | FusedOptimSpec | Mapping[str, object]
)
"""A torch optimizer class (SGD, Adagrad, Adam, AdamW), an `EmbOptimType` / its string, a
`FusedOptimSpec`, or TorchRec `fused_params`."""


def resolve_optimizer(
    optimizer_type: OptimizerType, optimizer_kwargs: Mapping[str, object] | None = None
) -> FusedOptimSpec:
    """The `FusedOptimSpec` meant by `(optimizer_type, optimizer_kwargs)` (see `OptimizerType`).

    With a torch optimizer class, kwargs are its constructor's (`lr`, `betas`, ...); with an
    `EmbOptimType`, kwargs are `fused_params` options (`learning_rate`/`lr`, `eps`, ...).
    """
    kwargs = dict(optimizer_kwargs or {})
    if isinstance(optimizer_type, FusedOptimSpec):
        if kwargs:
            raise ValueError(
                f"optimizer_kwargs {kwargs} given with a FusedOptimSpec; put them in it"
            )
        return optimizer_type
    if isinstance(optimizer_type, type) and issubclass(optimizer_type, torch.optim.Optimizer):
        return fused_spec_from_optimizer(optimizer_type, kwargs)
    if isinstance(optimizer_type, Mapping):
        return FusedOptimSpec.from_fused_params({**optimizer_type, **kwargs})
    return FusedOptimSpec.from_fused_params({"optimizer": optimizer_type, **kwargs})


class CollectionFusedOptimizer(CombinedOptimizer):
    """The collection's fused optimizer, also callable (returning itself): TorchRec's unsharded
    `FusedEmbeddingBagCollection.fused_optimizer()` is a method, its sharded modules'
    `fused_optimizer` a property; this answers both spellings."""

    def __call__(self) -> CollectionFusedOptimizer:
        return self


class FusedEmbeddingBagCollection(PooledCollectionAPI, WeightsDevice):
    """Pooled embeddings like `EmbeddingBagCollection`, trained by an optimizer in backward.

    Args:
        tables: FP32 `EmbeddingBagConfig`s; names unique.
        optimizer_type: see `OptimizerType` (TorchRec passes a torch optimizer class).
        optimizer_kwargs: its options.
        is_weighted: per-id weights of the KJT multiply rows before SUM pooling.
        device: where weights and optimizer state live.
        check_ids: raise IndexError for an id outside its table (one `aminmax` per forward).

    Same forward contract and `state_dict()` keys (`embedding_bags.<table>.weight`) as
    `EmbeddingBagCollection`. `backward()` updates the touched rows; there is nothing to
    `step()`. `fused_optimizer` is a KeyedOptimizer over `embedding_bags.<table>.weight` with
    state `<table>.momentum1` / `<table>.momentum2` (TorchRec's names) for checkpoints and
    learning-rate changes (`fused_optimizer.param_groups[i]["lr"]`, or a WarmupOptimizer).
    """

    def __init__(
        self,
        tables: Sequence[EmbeddingBagConfig],
        optimizer_type: OptimizerType,
        optimizer_kwargs: Mapping[str, object] | None = None,
        is_weighted: bool = False,
        device: torch.device | str | None = None,
        *,
        check_ids: bool = True,
    ) -> None:
        super().__init__()
        configs = [
            t
            for t in validate_tables(tables, EmbeddingBagConfig, _OWNER, device=device)
            if isinstance(t, EmbeddingBagConfig)
        ]
        for t in configs:
            if t.pooling is PoolingType.NONE:
                raise ValueError(
                    f"{_OWNER}: table {t.name!r} has pooling NONE; bags need SUM or MEAN"
                )
            if is_weighted and t.pooling is PoolingType.MEAN:
                raise ValueError(
                    f"{_OWNER}: table {t.name!r} has MEAN pooling but is_weighted=True; per-id "
                    "weights need SUM pooling"
                )
        self.spec = resolve_optimizer(optimizer_type, optimizer_kwargs)
        self._configs = configs
        self._is_weighted = is_weighted
        self._check_ids = check_ids
        self._plan = TablePlan(configs, [t.pooling for t in configs])
        # Not registered as submodules: the tables are (below, as `embedding_bags`), which keeps
        # the state_dict keys those of EmbeddingBagCollection.
        self._lookups = [
            BatchedFusedEmbeddingBag(
                [FusedTableSpec.from_config(configs[i]) for i in g.tables], self.spec, device=device
            )
            for g in self._plan.groups
        ]
        by_name = {name: m for lk in self._lookups for name, m in lk.tables.items()}
        self.embedding_bags = nn.ModuleDict({t.name: by_name[t.name] for t in configs})
        self._optim = CollectionFusedOptimizer(
            [("embedding_bags", lk.fused_optimizer) for lk in self._lookups]
        )
        self._embedding_names = [s.embedding_name for s in self._plan.segments]
        self._lengths_per_embedding = [s.dim for s in self._plan.segments]
        self._has_dynamic = bool(dynamic_configs(configs))
        if self._has_dynamic:
            # Raw-id tables (docs/dynamic.md): ids become slots before the lookup; a freed
            # slot's row and optimizer state are reset.
            self.dynamic_tables = DynamicTables(configs, _OWNER)
            self._dynamic_segments = [
                (s.feature, s.dim, configs[s.table_index].pooling is PoolingType.MEAN)
                for s in self._plan.segments
            ]
            for t in dynamic_configs(configs):
                lookup = next(lk for lk in self._lookups if t.name in lk.tables)
                self.dynamic_tables.bind_weight(
                    t.name, lookup.packed_weight, _row_offset(lookup, t.name)
                )
                self.dynamic_tables.table(t.name).add_reset_hook(
                    _state_reset(lookup, _row_offset(lookup, t.name))
                )

    @property
    def fused_optimizer(self) -> CollectionFusedOptimizer:
        """KeyedOptimizer over `embedding_bags.<table>.weight` (state: `<table>.momentum1`, ...);
        `fused_optimizer()` (TorchRec's method form) returns the same object."""
        return self._optim

    def forward(self, features: KeyedJaggedTensor) -> KeyedTensor:
        """features: KJT with every feature the tables read. Returns `KeyedTensor (B, sum dims)`."""
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

    def _forward_packed(self, features: KeyedJaggedTensor) -> KeyedTensor:
        values, weights = check_features(features, weighted=self._is_weighted, owner=_OWNER)
        kjt = self._plan.read_kjt(features, values, weights, self._check_ids)
        batch = kjt.batch
        if kjt.weights is None:
            out = self._segment_lookup(kjt)
            if out is not None:
                return KeyedTensor(
                    keys=self._embedding_names,
                    length_per_key=self._lengths_per_embedding,
                    values=out,
                )
        blocks: list[Tensor] = [values.new_empty(0)] * len(self._plan.segments)
        for lookup, group in zip(self._lookups, self._plan.groups, strict=True):
            inp = self._plan.group_input(group, kjt)
            pooled = lookup(inp.ids, inp.offsets, inp.weights)
            # unbind: one backward node that stacks the block gradients once, where indexing
            # per segment would allocate and sum one zero-filled (S, B, D) tensor per segment.
            per_segment = pooled.view(len(group.segments), batch, group.dim).unbind(0)
            for j, s in enumerate(group.segments):
                blocks[s] = per_segment[j]
        out = torch.cat(blocks, dim=1) if blocks else torch.zeros(batch, 0, device=values.device)
        return KeyedTensor(
            keys=self._embedding_names, length_per_key=self._lengths_per_embedding, values=out
        )

    def _segment_lookup(self, kjt: KJTInput) -> Tensor | None:
        """Every group in one `segment_lookup` straight into the output columns (no id shift,
        no concatenation, no gradient stack), or None where it does not apply."""
        if any(segment_lookup_unsupported(lk, kjt.values) for lk in self._lookups):
            return None
        cols = [0]
        for s in self._plan.segments:
            cols.append(cols[-1] + s.dim)
        reads = [
            SegmentRead(
                group=g,
                table=group.tables.index(self._plan.segments[s].table_index),
                key=kjt.feature_index[s],
                col=cols[s],
            )
            for g, group in enumerate(self._plan.groups)
            for s in group.segments
        ]
        segments = self._plan.segments
        names = [
            (segments[s].feature, segments[s].table)
            for group in self._plan.groups
            for s in group.segments
        ]
        return segment_lookup(
            self._lookups, reads, kjt.values, kjt.lengths, kjt.batch, cols[-1], names
        )

    def optimizer_spec(self) -> FusedOptimSpec:
        return self.spec

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> nn.Module:
        # The table weights move through `embedding_bags`; the state buffers of each lookup here.
        result: nn.Module = super()._apply(fn, recurse)  # type: ignore[no-untyped-call]  # torch leaves _apply untyped
        for lookup in self._lookups:
            lookup._apply(fn, recurse=False)
            lookup.packed_weight()  # re-pack the moved weights
        return result

    def extra_repr(self) -> str:
        return f"is_weighted={self._is_weighted}, optimizer={self.spec}"


def _row_offset(lookup: BatchedFusedEmbeddingBag, name: str) -> int:
    index = [t.name for t in lookup.table_specs].index(name)
    return lookup.row_offsets[index]


def _state_reset(lookup: BatchedFusedEmbeddingBag, row_offset: int) -> Callable[[Tensor], None]:
    """Zero the optimizer state rows of freed slots (the fused optimizers start from zeros)."""

    def reset(slots: Tensor) -> None:
        for state in lookup.optimizer_state().values():
            # one native prefetched pass (index_fill_ elsewhere): the same zeros
            fill_rows_(state, slots, row_offset=row_offset, value=0.0)

    return reset
