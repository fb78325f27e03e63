"""`QuantEmbeddingCollection`: per-id (unpooled) lookups over row-wise quantized tables."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from shardrec_embedding._tables import check_features
from shardrec_embedding.configs import EmbeddingConfig, PoolingType
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_embedding.quant._storage import QuantStorage
from shardrec_embedding.quant.config import output_dtype_of, weight_data_types
from shardrec_embedding.quant.embedding_bag_collection import _weight
from shardrec_embedding.quant.lookup import SequenceLookup, check_kjt_input, kjt_segment_index
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, TorchScriptable

__all__ = ["QuantEmbeddingCollection"]

_OWNER = "QuantEmbeddingCollection"


class QuantEmbeddingCollection(TorchScriptable, nn.Module):
    """Unpooled embeddings of quantized tables (TorchRec's `quant.EmbeddingCollection`).

    Args as `QuantEmbeddingBagCollection` (no weights); tables are `EmbeddingConfig`s of one
    `embedding_dim`. `forward(kjt)` returns `{name: JaggedTensor}` with `(N_f, D)` rows in
    `output_dtype`. `state_dict()` keys: `embeddings.<table>.weight` (+ `weight_qscaleshift`).
    """

    __jit_unused_properties__ = ["device"]  # noqa: RUF012  # read by torch.jit.script

    def __init__(
        self,
        tables: Sequence[EmbeddingConfig],
        device: torch.device | str | None = None,
        output_dtype: torch.dtype = torch.float32,
        need_indices: bool = False,
        *,
        check_ids: bool = True,
    ) -> None:
        super().__init__()
        for t in tables:
            if not isinstance(t, EmbeddingConfig):
                raise TypeError(f"{_OWNER} takes EmbeddingConfigs, got {type(t).__name__}")
        if len({t.embedding_dim for t in tables}) > 1:
            dims = {t.name: t.embedding_dim for t in tables}
            raise ValueError(f"{_OWNER} needs one embedding_dim for all tables, got {dims}")
        if output_dtype not in (torch.float32, torch.float16):
            raise ValueError(
                f"{_OWNER}: output_dtype {output_dtype} must be torch.float or torch.half"
            )
        names = [t.name for t in tables]
        if len(set(names)) != len(names) or not all(names):
            raise ValueError(f"{_OWNER}: table names {names} must be non-empty and unique")
        self._configs = list(tables)
        self._output_dtype = output_dtype
        self._need_indices = need_indices
        self._storage = QuantStorage(tables, [PoolingType.NONE] * len(tables), device, _OWNER)
        self.lookup = SequenceLookup(self._storage.groups, self._storage.segments, check_ids)
        self._plan = self._storage.plan
        self._embedding_names = [seg.embedding_name for seg in self._plan.segments]

    @classmethod
    def from_float(
        cls, module: nn.Module, use_precomputed_fake_quant: bool = False
    ) -> QuantEmbeddingCollection:
        """Quantize a trained `EmbeddingCollection` carrying `module.qconfig`."""
        if not isinstance(module, EmbeddingCollection):
            raise TypeError(
                f"{_OWNER}.from_float takes an EmbeddingCollection, got {type(module).__name__}"
            )
        qconfig = getattr(module, "qconfig", None)
        if qconfig is None:
            raise ValueError(
                f"{_OWNER}.from_float: the EmbeddingCollection has no qconfig; set "
                "module.qconfig = QuantConfig(activation=..., weight=...) or call "
                "quantize_inference_model"
            )
        configs = module.embedding_configs()
        data_types = weight_data_types(qconfig, [t.name for t in configs])
        tables = [dataclasses.replace(t, data_type=data_types[t.name]) for t in configs]
        quant = cls(
            tables,
            module.device,
            output_dtype_of(qconfig),
            module.need_indices(),
            check_ids=module._check_ids,
        )
        quant.load_float_weights({t.name: _weight(module.embeddings[t.name]) for t in configs})
        return quant

    def load_float_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Quantize float `(R, D)` tables by name into this module's storage."""
        for t in self._configs:
            w = weights[t.name]
            if tuple(w.shape) != (t.num_embeddings, t.embedding_dim):
                raise ValueError(
                    f"{_OWNER}: table {t.name!r} is ({t.num_embeddings}, {t.embedding_dim}), "
                    f"got a weight of shape {tuple(w.shape)}"
                )
            self._storage.load_float(t, w)

    def forward(self, features: KeyedJaggedTensor) -> dict[str, JaggedTensor]:
        """Under `torch.jit.script` the code after the first branch runs."""
        if not torch._jit_internal.is_scripting():
            return self._forward_eager(features)
        values = features.values()
        check_kjt_input(values, features.weights_or_none(), False, "QuantEmbeddingCollection")
        meta = self.lookup.segments
        feature_index = kjt_segment_index(features.keys(), meta.features, meta.tables)
        offset_per_key = features.offset_per_key()
        rows = self.lookup(values, offset_per_key, feature_index)
        per_key = features.lengths().view(len(features.keys()), features.stride())
        out: dict[str, JaggedTensor] = {}
        for s in range(len(feature_index)):
            k = feature_index[s]
            ids: torch.Tensor | None = None
            if self._need_indices:
                ids = values[offset_per_key[k] : offset_per_key[k + 1]]
            out[self._embedding_names[s]] = JaggedTensor(
                values=rows[s].to(self._output_dtype), lengths=per_key[k], weights=ids
            )
        return out

    def _forward_eager(self, features: KeyedJaggedTensor) -> dict[str, JaggedTensor]:
        values, _ = check_features(features, weighted=False, owner=_OWNER)
        feature_index = self._plan.feature_indices(features.keys())
        offset_per_key = list(features.offset_per_key())
        rows = self.lookup(values, offset_per_key, feature_index)
        batch = features.stride()
        per_key = features.lengths().view(len(features.keys()), batch)
        out: dict[str, JaggedTensor] = {}
        for s, seg in enumerate(self._plan.segments):
            k = feature_index[s]
            ids = values[offset_per_key[k] : offset_per_key[k + 1]]
            out[seg.embedding_name] = JaggedTensor(
                values=rows[s].to(self._output_dtype),
                lengths=per_key[k],
                weights=ids if self._need_indices else None,
            )
        return out

    def embedding_configs(self) -> list[EmbeddingConfig]:
        return list(self._configs)

    def output_dtype(self) -> torch.dtype:
        return self._output_dtype

    def storage_bytes(self) -> int:
        return self._storage.nbytes()

    @property
    def device(self) -> torch.device:
        for b in self.buffers():
            return b.device
        return torch.device("cpu")

    def _save_to_state_dict(
        self, destination: dict[str, torch.Tensor], prefix: str, keep_vars: bool
    ) -> None:
        self._storage.save(destination, prefix + "embeddings.")

    def _load_from_state_dict(
        self,
        state_dict: Mapping[str, torch.Tensor],
        prefix: str,
        local_metadata: object,
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        self._storage.load(
            state_dict, prefix + "embeddings.", missing_keys, unexpected_keys, error_msgs, strict
        )
