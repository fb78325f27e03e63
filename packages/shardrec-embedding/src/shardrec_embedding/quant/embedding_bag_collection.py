"""`QuantEmbeddingBagCollection`: pooled lookups over row-wise quantized tables (inference)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from shardrec_embedding._tables import check_features
from shardrec_embedding.configs import EmbeddingBagConfig, PoolingType
from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.quant._storage import QuantStorage
from shardrec_embedding.quant.config import output_dtype_of, weight_data_types
from shardrec_embedding.quant.lookup import PooledLookup, kjt_lookup_args
from shardrec_jagged import KeyedJaggedTensor, KeyedTensor, TorchScriptable

__all__ = ["QuantEmbeddingBagCollection", "ScriptablePooledLookup"]

_OWNER = "QuantEmbeddingBagCollection"


class QuantEmbeddingBagCollection(TorchScriptable, nn.Module):
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

    __jit_unused_properties__ = ["device"]  # noqa: RUF012  # read by torch.jit.script

    def __init__(
        self,
        tables: Sequence[EmbeddingBagConfig],
        is_weighted: bool = False,
        device: torch.device | str | None = None,
        output_dtype: torch.dtype = torch.float32,
        *,
        check_ids: bool = True,
    ) -> None:
        super().__init__()
        for t in tables:
            if not isinstance(t, EmbeddingBagConfig):
                raise TypeError(f"{_OWNER} takes EmbeddingBagConfigs, got {type(t).__name__}")
            if t.pooling is PoolingType.NONE:
                raise ValueError(f"{_OWNER}: table {t.name!r} has pooling NONE; use SUM or MEAN")
            if is_weighted and t.pooling is PoolingType.MEAN:
                raise ValueError(
                    f"{_OWNER}: table {t.name!r} has MEAN pooling but is_weighted=True"
                )
        if output_dtype not in (torch.float32, torch.float16):
            raise ValueError(
                f"{_OWNER}: output_dtype {output_dtype} must be torch.float or torch.half"
            )
        names = [t.name for t in tables]
        if len(set(names)) != len(names) or not all(names):
            raise ValueError(f"{_OWNER}: table names {names} must be non-empty and unique")
        self._configs = list(tables)
        self._is_weighted = is_weighted
        self._output_dtype = output_dtype
        self._storage = QuantStorage(tables, [t.pooling for t in tables], device, _OWNER)
        self.lookup = PooledLookup(
            self._storage.groups,
            self._storage.segments,
            check_ids,
            half_output=output_dtype == torch.float16,
        )
        self._plan = self._storage.plan
        self._embedding_names = [s.embedding_name for s in self._plan.segments]
        self._lengths_per_embedding = [s.dim for s in self._plan.segments]

    @classmethod
    def from_float(
        cls, module: nn.Module, use_precomputed_fake_quant: bool = False
    ) -> QuantEmbeddingBagCollection:
        """Quantize a trained `EmbeddingBagCollection` carrying `module.qconfig` (a
        `QuantConfig`). `use_precomputed_fake_quant` is accepted for `quantize_dynamic`."""
        if not isinstance(module, EmbeddingBagCollection):
            raise TypeError(
                f"{_OWNER}.from_float takes an EmbeddingBagCollection, got {type(module).__name__}"
            )
        qconfig = getattr(module, "qconfig", None)
        if qconfig is None:
            raise ValueError(
                f"{_OWNER}.from_float: the EmbeddingBagCollection has no qconfig; set "
                "module.qconfig = QuantConfig(activation=..., weight=...) or call "
                "quantize_inference_model"
            )
        configs = module.embedding_bag_configs()
        data_types = weight_data_types(qconfig, [t.name for t in configs])
        tables = [dataclasses.replace(t, data_type=data_types[t.name]) for t in configs]
        quant = cls(
            tables,
            module.is_weighted(),
            module.device,
            output_dtype_of(qconfig),
            check_ids=module._check_ids,
        )
        quant.load_float_weights({t.name: _weight(module.embedding_bags[t.name]) for t in configs})
        return quant

    def load_float_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Quantize float `(R, D)` tables by name into this module's storage."""
        for t in self._configs:
            if t.name not in weights:
                raise KeyError(f"{_OWNER}: no float weight for table {t.name!r}")
            w = weights[t.name]
            if tuple(w.shape) != (t.num_embeddings, t.embedding_dim):
                raise ValueError(
                    f"{_OWNER}: table {t.name!r} is ({t.num_embeddings}, {t.embedding_dim}), "
                    f"got a weight of shape {tuple(w.shape)}"
                )
            self._storage.load_float(t, w)

    def forward(self, features: KeyedJaggedTensor) -> KeyedTensor:
        """features: KJT `(F * B,)` lengths. Returns `KeyedTensor` `(B, sum of dims)` in
        `output_dtype`. Under `torch.jit.script` the code after the first branch runs."""
        if not torch._jit_internal.is_scripting():
            return self._forward_eager(features)
        meta = self.lookup.segments
        owner = "QuantEmbeddingBagCollection"  # TorchScript reads no global str
        args = kjt_lookup_args(features, self._is_weighted, owner, meta.features, meta.tables)
        out = self.lookup(*args)
        return KeyedTensor(
            self._embedding_names, self._lengths_per_embedding, out.to(self._output_dtype)
        )

    def _forward_eager(self, features: KeyedJaggedTensor) -> KeyedTensor:
        values, weights = check_features(features, weighted=self._is_weighted, owner=_OWNER)
        feature_index = self._plan.feature_indices(features.keys())
        out = self.lookup(
            values,
            features.lengths(),
            weights,
            list(features.offset_per_key()),
            feature_index,
            features.stride(),
        )
        return KeyedTensor(
            keys=self._embedding_names,
            length_per_key=self._lengths_per_embedding,
            values=out.to(self._output_dtype),
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

    def is_weighted(self) -> bool:
        return self._is_weighted

    def output_dtype(self) -> torch.dtype:
        return self._output_dtype

    def embedding_bag_configs(self) -> list[EmbeddingBagConfig]:
        return list(self._configs)

    def embedding_names(self) -> list[str]:
        return list(self._embedding_names)

    def storage_bytes(self) -> int:
        """Bytes of the quantized rows (all tables)."""
        return self._storage.nbytes()

    @property
    def device(self) -> torch.device:
        for b in self.buffers():
            return b.device
        return torch.device("cpu")

    def _save_to_state_dict(
        self, destination: dict[str, torch.Tensor], prefix: str, keep_vars: bool
    ) -> None:
        self._storage.save(destination, prefix + "embedding_bags.")

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
            state_dict,
            prefix + "embedding_bags.",
            missing_keys,
            unexpected_keys,
            error_msgs,
            strict,
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


def _weight(module: nn.Module) -> torch.Tensor:
    weight = module.weight
    assert isinstance(weight, torch.Tensor)
    return weight
