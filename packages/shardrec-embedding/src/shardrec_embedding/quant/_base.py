"""What the two quantized collections share: argument checks, conversion from a float module,
quantized storage and TorchRec's per-table state dict."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar

import torch
from torch import nn

from shardrec_embedding.configs import BaseEmbeddingConfig, PoolingType
from shardrec_embedding.dynamic import DynamicTables
from shardrec_embedding.quant._storage import QuantStorage
from shardrec_embedding.quant.config import (
    MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS,
    weight_data_types,
)
from shardrec_embedding.quant.dynamic import IdMapped
from shardrec_jagged import TorchScriptable

__all__ = ["QuantCollectionBase"]

C = TypeVar("C", bound=BaseEmbeddingConfig)
M = TypeVar("M", bound=nn.Module)


class QuantCollectionBase(TorchScriptable, nn.Module, Generic[C]):
    """Base of `QuantEmbeddingBagCollection` and `QuantEmbeddingCollection`.

    Subclasses set `_owner` (the name errors use), `_config_type` (the table config they take)
    and `_state_prefix` (`embedding_bags.` or `embeddings.`); their `__init__` checks its
    tables with `_checked_tables` and calls `_init_storage`.
    """

    __jit_unused_properties__ = ["device"]  # noqa: RUF012  # read by torch.jit.script
    # Python-only state the scripted forward never reads (TorchScript would try to compile
    # their classes, typed by the first module it saw).
    __jit_ignored_attributes__ = ["_configs", "_storage", "_plan"]  # noqa: RUF012
    _owner = "QuantCollection"
    _config_type: type[BaseEmbeddingConfig] = BaseEmbeddingConfig
    _state_prefix = "embeddings."

    def _checked_tables(self, tables: Sequence[C]) -> Sequence[C]:
        """`tables`, after a `TypeError` for any that is not a `_config_type`."""
        for t in tables:
            if not isinstance(t, self._config_type):
                kind = self._config_type.__name__
                raise TypeError(f"{self._owner} takes {kind}s, got {type(t).__name__}")
        return tables

    def _init_storage(
        self,
        tables: Sequence[C],
        poolings: Sequence[PoolingType],
        device: torch.device | str | None,
        output_dtype: torch.dtype,
        split_scale_bias: bool = False,
    ) -> None:
        if output_dtype not in (torch.float32, torch.float16):
            raise ValueError(
                f"{self._owner}: output_dtype {output_dtype} must be torch.float or torch.half"
            )
        names = [t.name for t in tables]
        if len(set(names)) != len(names) or not all(names):
            raise ValueError(f"{self._owner}: table names {names} must be non-empty and unique")
        self._configs = list(tables)
        self._output_dtype = output_dtype
        self._split_scale_bias = split_scale_bias
        self._storage = QuantStorage(tables, poolings, device, self._owner)
        self._plan = self._storage.plan

    @classmethod
    def _checked_float(cls, module: nn.Module, float_class: type[M]) -> tuple[M, object]:
        """`from_float`'s checks: `(module as float_class, module.qconfig)`."""
        kind = float_class.__name__
        if not isinstance(module, float_class):
            raise TypeError(f"{cls._owner}.from_float takes an {kind}, got {type(module).__name__}")
        qconfig = getattr(module, "qconfig", None)
        if qconfig is None:
            raise ValueError(
                f"{cls._owner}.from_float: the {kind} has no qconfig; set "
                "module.qconfig = QuantConfig(activation=..., weight=...) or call "
                "quantize_inference_model"
            )
        return module, qconfig

    @staticmethod
    def _split_requested(module: nn.Module) -> bool:
        """Whether `quant_prep_enable_quant_state_dict_split_scale_bias` marked `module`."""
        return bool(getattr(module, MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS, False))

    @staticmethod
    def _quantized(qconfig: object, configs: list[C]) -> list[C]:
        """`configs` with the data types `qconfig` gives each table."""
        data_types = weight_data_types(qconfig, [t.name for t in configs])
        return [dataclasses.replace(t, data_type=data_types[t.name]) for t in configs]

    def load_float_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Quantize float `(R, D)` tables by name into this module's storage."""
        for t in self._configs:
            if t.name not in weights:
                raise KeyError(f"{self._owner}: no float weight for table {t.name!r}")
            w = weights[t.name]
            if tuple(w.shape) != (t.num_embeddings, t.embedding_dim):
                raise ValueError(
                    f"{self._owner}: table {t.name!r} is ({t.num_embeddings}, "
                    f"{t.embedding_dim}), got a weight of shape {tuple(w.shape)}"
                )
            self._storage.load_float(t, w)

    def load_id_maps(
        self, tables: DynamicTables | Mapping[str, tuple[torch.Tensor, torch.Tensor]]
    ) -> None:
        """The dynamic tables' id maps: a float collection's `dynamic_tables` (its ids and
        default rows), or `{table: (ids, slots)}`. `from_float` calls it."""
        lookup = getattr(self, "lookup", None)
        if not isinstance(lookup, IdMapped):
            raise ValueError(f"{self._owner}: no table is dynamic; there is no id map to load")
        lookup.load_maps(tables)

    def output_dtype(self) -> torch.dtype:
        return self._output_dtype

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
        self._storage.save(destination, prefix + self._state_prefix, self._split_scale_bias)

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
            prefix + self._state_prefix,
            missing_keys,
            unexpected_keys,
            error_msgs,
            strict,
            self._split_scale_bias,
        )
