"""`QuantEmbeddingCollection`: per-id (unpooled) lookups over row-wise quantized tables."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from shardrec_embedding._tables import check_features, module_weight, traced_input
from shardrec_embedding.configs import EmbeddingConfig, PoolingType
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_embedding.quant._base import QuantCollectionBase
from shardrec_embedding.quant.config import output_dtype_of
from shardrec_embedding.quant.dynamic import DynamicSequenceLookup
from shardrec_embedding.quant.lookup import (
    SequenceLookup,
    keyed_sequence_index,
    kjt_sequence_index,
    sequence_forward,
    sequence_outputs,
)
from shardrec_embedding.quant.traced import (
    MODULE_ATTR_USE_UNFLATTENED_LENGTHS_FOR_BATCHING,
    _get_kjt_keys,
    batching_hinted_output,
    unflattened_lengths,
)
from shardrec_embedding.virtual import resolve_virtual_tables
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor

__all__ = ["QuantEmbeddingCollection"]

_OWNER = "QuantEmbeddingCollection"

# graph leaves of the fx-traced forward (quant/traced.py)
for _leaf in (
    "_get_kjt_keys",
    "keyed_sequence_index",
    "unflattened_lengths",
    "batching_hinted_output",
    "sequence_outputs",
):
    torch.fx.wrap(_leaf)


class QuantEmbeddingCollection(QuantCollectionBase[EmbeddingConfig]):
    """Unpooled embeddings of quantized tables (TorchRec's `quant.EmbeddingCollection`).

    Args as `QuantEmbeddingBagCollection` (no weights); tables are `EmbeddingConfig`s of one
    `embedding_dim`. `forward(kjt)` returns `{name: JaggedTensor}` with `(N_f, D)` rows in
    `output_dtype`. `state_dict()` keys: `embeddings.<table>.weight` (+ `weight_qscaleshift`).
    """

    _owner = _OWNER
    _config_type = EmbeddingConfig
    _state_prefix = "embeddings."

    def __init__(
        self,
        tables: Sequence[EmbeddingConfig],
        device: torch.device | str | None = None,
        output_dtype: torch.dtype = torch.float32,
        need_indices: bool = False,
        *,
        check_ids: bool = True,
        quant_state_dict_split_scale_bias: bool = False,
    ) -> None:
        super().__init__()
        # TorchRec's virtual tables run as raw-id tables (shardrec_embedding.virtual).
        tables = resolve_virtual_tables(list(tables), device)
        if len({t.embedding_dim for t in self._checked_tables(tables)}) > 1:
            dims = {t.name: t.embedding_dim for t in tables}
            raise ValueError(f"{_OWNER} needs one embedding_dim for all tables, got {dims}")
        self._need_indices = need_indices
        self._init_storage(
            tables,
            [PoolingType.NONE] * len(tables),
            device,
            output_dtype,
            quant_state_dict_split_scale_bias,
        )
        lookup = SequenceLookup(self._storage.groups, self._storage.segments, check_ids)
        self.lookup: SequenceLookup | DynamicSequenceLookup = lookup
        if any(t.dynamic is not None for t in tables):
            # Dynamic (raw-id) tables: their ids become slots first; `from_float` copies the
            # trained id maps (`load_id_maps`), docs/dynamic.md.
            self.lookup = DynamicSequenceLookup(
                lookup, [s.table for s in self._plan.segments], list(tables)
            )
        self._embedding_names = [seg.embedding_name for seg in self._plan.segments]

    @classmethod
    def from_float(
        cls, module: nn.Module, use_precomputed_fake_quant: bool = False
    ) -> QuantEmbeddingCollection:
        """Quantize a trained `EmbeddingCollection` carrying `module.qconfig`."""
        ec, qconfig = cls._checked_float(module, EmbeddingCollection)
        quant = cls(
            cls._quantized(qconfig, ec.embedding_configs()),
            ec.device,
            output_dtype_of(qconfig),
            ec.need_indices(),
            check_ids=ec._check_ids,
            quant_state_dict_split_scale_bias=cls._split_requested(ec),
        )
        tables = ec.embeddings
        quant.load_float_weights({t.name: module_weight(tables[t.name]) for t in quant._configs})
        if isinstance(quant.lookup, DynamicSequenceLookup):
            quant.load_id_maps(ec.dynamic_tables)
        return quant

    def forward(self, features: KeyedJaggedTensor) -> dict[str, JaggedTensor]:
        """Under `torch.jit.script` the code after the first branch runs."""
        if not torch._jit_internal.is_scripting():
            if traced_input(features):
                return self._forward_traced(features)
            check_features(features, weighted=False, owner=_OWNER)
            feature_index = self._plan.feature_indices(features.keys())
        else:
            meta = self.lookup.segments
            owner = "QuantEmbeddingCollection"  # TorchScript reads no global str
            feature_index = kjt_sequence_index(features, owner, meta.features, meta.tables)
        rows = self.lookup(features.values(), features.offset_per_key(), feature_index)
        names, dtype = self._embedding_names, self._output_dtype
        return sequence_forward(rows, features, feature_index, names, self._need_indices, dtype)

    @torch.jit.unused
    def _forward_traced(self, features: KeyedJaggedTensor) -> dict[str, JaggedTensor]:
        """The forward `torch.fx` records (`features` is a Proxy): TorchRec's graph shape.
        With `MODULE_ATTR_USE_UNFLATTENED_LENGTHS_FOR_BATCHING` set, the batching hint takes
        the `(F, B)` lengths, else the flat ones."""
        meta = self.lookup.segments
        keys = _get_kjt_keys(features)
        index = keyed_sequence_index(features, keys, _OWNER, meta.features, meta.tables)
        values = features.values()
        offset_per_key = features.offset_per_key()
        rows = self.lookup(values, offset_per_key, index)
        lengths = features.lengths()
        per_key = unflattened_lengths(lengths, keys, features.stride())
        hint = (
            per_key
            if getattr(self, MODULE_ATTR_USE_UNFLATTENED_LENGTHS_FOR_BATCHING, False)
            else lengths
        )
        rows = batching_hinted_output(hint, rows)
        names, dtype = self._embedding_names, self._output_dtype
        return sequence_outputs(
            rows, values, offset_per_key, per_key, index, names, self._need_indices, dtype
        )

    def embedding_configs(self) -> list[EmbeddingConfig]:
        return list(self._configs)
