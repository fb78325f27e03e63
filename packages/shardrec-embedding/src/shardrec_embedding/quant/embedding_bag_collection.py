"""`QuantEmbeddingBagCollection`: pooled lookups over row-wise quantized tables (inference)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from shardrec_embedding._pooled_api import PooledCollectionAPI
from shardrec_embedding._tables import check_features, module_weight, traced_input
from shardrec_embedding.configs import EmbeddingBagConfig, PoolingType
from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.quant._base import QuantCollectionBase
from shardrec_embedding.quant.config import output_dtype_of
from shardrec_embedding.quant.dynamic import DynamicPooledLookup
from shardrec_embedding.quant.lookup import (
    PooledLookup,
    eager_lookup_args,
    kjt_lookup_args,
)
from shardrec_embedding.quant.traced import _get_kjt_keys
from shardrec_embedding.virtual import resolve_virtual_tables
from shardrec_jagged import KeyedJaggedTensor, KeyedTensor

__all__ = ["QuantEmbeddingBagCollection", "ScriptablePooledLookup"]

_OWNER = "QuantEmbeddingBagCollection"

# graph leaves of the fx-traced forward (quant/traced.py)
torch.fx.wrap("_get_kjt_keys")
torch.fx.wrap("kjt_lookup_args")


class QuantEmbeddingBagCollection(PooledCollectionAPI, QuantCollectionBase[EmbeddingBagConfig]):
    """Pooled embeddings of quantized tables (TorchRec's `quant.EmbeddingBagCollection`).

    Args:
        tables: `EmbeddingBagConfig`s whose `data_type` is the storage: INT8, INT4, INT2,
            FP16, BF16 or FP32.
        is_weighted: multiply each id's row by the KJT's per-id weight (SUM pooling).
        device: where the quantized rows live.
        output_dtype: `torch.float` (default) or `torch.half`.
        check_ids: `IndexError` for an id outside its table (as `EmbeddingBagCollection`).

    Built from a trained float module with `from_float` (the module carries a `qconfig`) or
    `torch.ao.quantization.quantize_dynamic(..., mapping={EmbeddingBagCollection: this})`.
    `forward(kjt)` returns a `KeyedTensor` `(B, sum of dims)` like the float module. Weights
    are buffers, not parameters. `state_dict()` holds TorchRec's keys:
    `embedding_bags.<table>.weight` (uint8 codes, or the float rows) and, for integer types,
    `embedding_bags.<table>.weight_qscaleshift` (`(R, 4)` uint8: fp16 scale, fp16 bias).
    """

    _owner = _OWNER
    _config_type = EmbeddingBagConfig
    _state_prefix = "embedding_bags."

    def __init__(
        self,
        tables: Sequence[EmbeddingBagConfig],
        is_weighted: bool = False,
        device: torch.device | str | None = None,
        output_dtype: torch.dtype = torch.float32,
        *,
        check_ids: bool = True,
        quant_state_dict_split_scale_bias: bool = False,
    ) -> None:
        super().__init__()
        # TorchRec's virtual tables run as raw-id tables (shardrec_embedding.virtual).
        tables = resolve_virtual_tables(list(tables), device)
        for t in self._checked_tables(tables):
            if t.pooling is PoolingType.NONE:
                raise ValueError(f"{_OWNER}: table {t.name!r} has pooling NONE; use SUM or MEAN")
            if is_weighted and t.pooling is PoolingType.MEAN:
                raise ValueError(
                    f"{_OWNER}: table {t.name!r} has MEAN pooling but is_weighted=True"
                )
        self._is_weighted = is_weighted
        self._init_storage(
            tables,
            [t.pooling for t in tables],
            device,
            output_dtype,
            quant_state_dict_split_scale_bias,
        )
        lookup = PooledLookup(
            self._storage.groups,
            self._storage.segments,
            check_ids,
            half_output=output_dtype == torch.float16,
        )
        self.lookup: PooledLookup | DynamicPooledLookup = lookup
        if any(t.dynamic is not None for t in tables):
            # Dynamic (raw-id) tables: their ids become slots first; `from_float` copies the
            # trained id maps (`load_id_maps`), docs/dynamic.md.
            self.lookup = DynamicPooledLookup(
                lookup,
                [s.table for s in self._plan.segments],
                [s.dim for s in self._plan.segments],
                list(tables),
            )
        self._embedding_names = [s.embedding_name for s in self._plan.segments]
        self._lengths_per_embedding = [s.dim for s in self._plan.segments]

    @classmethod
    def from_float(
        cls, module: nn.Module, use_precomputed_fake_quant: bool = False
    ) -> QuantEmbeddingBagCollection:
        """Quantize a trained `EmbeddingBagCollection` carrying `module.qconfig` (a
        `QuantConfig`). `use_precomputed_fake_quant` is accepted for `quantize_dynamic`."""
        ebc, qconfig = cls._checked_float(module, EmbeddingBagCollection)
        tables = cls._quantized(qconfig, ebc.embedding_bag_configs())
        quant = cls(
            tables,
            ebc.is_weighted(),
            ebc.device,
            output_dtype_of(qconfig),
            check_ids=ebc._check_ids,
            quant_state_dict_split_scale_bias=cls._split_requested(ebc),
        )
        bags = ebc.embedding_bags
        quant.load_float_weights({t.name: module_weight(bags[t.name]) for t in tables})
        if isinstance(quant.lookup, DynamicPooledLookup):
            quant.load_id_maps(ebc.dynamic_tables)
        return quant

    def forward(self, features: KeyedJaggedTensor) -> KeyedTensor:
        """features: KJT `(F * B,)` lengths. Returns `KeyedTensor` `(B, sum of dims)` in
        `output_dtype`. Under `torch.jit.script` the code after the first branch runs."""
        if not torch._jit_internal.is_scripting():
            if traced_input(features):
                return self._forward_traced(features)
            _, weights = check_features(features, weighted=self._is_weighted, owner=_OWNER)
            args = eager_lookup_args(features, weights, self._plan.feature_indices(features.keys()))
        else:
            meta = self.lookup.segments
            owner = "QuantEmbeddingBagCollection"  # TorchScript reads no global str
            args = kjt_lookup_args(features, self._is_weighted, owner, meta.features, meta.tables)
        out = self.lookup(*args)
        return KeyedTensor(
            self._embedding_names, self._lengths_per_embedding, out.to(self._output_dtype)
        )

    @torch.jit.unused
    def _forward_traced(self, features: KeyedJaggedTensor) -> KeyedTensor:
        """The forward `torch.fx` records (`features` is a Proxy): TorchRec's graph shape."""
        meta = self.lookup.segments
        keys = _get_kjt_keys(features)
        args = kjt_lookup_args(
            features, self._is_weighted, _OWNER, meta.features, meta.tables, keys
        )
        out = self.lookup(args[0], args[1], args[2], args[3], args[4], args[5])
        return KeyedTensor(
            self._embedding_names, self._lengths_per_embedding, out.to(self._output_dtype)
        )

    def scriptable(self, keys: Sequence[str] | None = None) -> ScriptablePooledLookup:
        """A `torch.jit.script`-able module sharing this module's storage whose forward takes
        the KJT's tensors for features `keys` (default: the features the tables read, in
        table order). See docs/inference.md."""
        keys = list(keys) if keys is not None else list(self._plan.features)
        return ScriptablePooledLookup(
            self.lookup,
            keys,
            self._plan.feature_indices(keys),
            self._embedding_names,
            self._output_dtype,
        )

    def extra_repr(self) -> str:
        tables = ", ".join(
            f"{t.name}: {t.num_embeddings}x{t.embedding_dim} {t.data_type.value}"
            for t in self._configs
        )
        return (
            f"tables=[{tables}], is_weighted={self._is_weighted}, output_dtype={self._output_dtype}"
        )


class ScriptablePooledLookup(nn.Module):
    """`forward(values, lengths, weights)` of a KJT whose keys are `keys`, batch inferred
    from `lengths` `(F * B,)`; returns the pooled `(B, sum of dims)` tensor whose column
    blocks are `embedding_names` (as the KeyedTensor). Scriptable with `torch.jit.script`."""

    def __init__(
        self,
        lookup: nn.Module,
        keys: list[str],
        feature_index: list[int],
        embedding_names: list[str],
        output_dtype: torch.dtype,
    ) -> None:
        super().__init__()
        self.lookup = lookup
        self.keys = keys
        self.feature_index = feature_index
        self.embedding_names = embedding_names
        self.half_output = output_dtype == torch.float16

    def forward(
        self, values: torch.Tensor, lengths: torch.Tensor, weights: torch.Tensor | None = None
    ) -> torch.Tensor:
        """values: `(N,)` ids; lengths: `(F * B,)`; weights: `(N,)` or None."""
        num_keys = len(self.keys)
        batch = lengths.numel() // num_keys if num_keys > 0 else 0
        counts: list[int] = lengths.view(num_keys, batch).sum(1).tolist()
        offset_per_key = [0]
        for n in counts:
            offset_per_key.append(offset_per_key[-1] + n)
        out: torch.Tensor = self.lookup(
            values, lengths, weights, offset_per_key, self.feature_index, batch
        )
        return out.half() if self.half_output else out
