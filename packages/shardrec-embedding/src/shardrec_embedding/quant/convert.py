"""`quantize_inference_model`: swap every float collection of a model for its quantized form."""

from __future__ import annotations

import torch
from torch import nn
from torch.ao.quantization import PlaceholderObserver, quantize_dynamic

from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_embedding.quant.config import (
    MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS,
    QuantConfig,
    data_type_of_dtype,
)
from shardrec_embedding.quant.embedding_bag_collection import QuantEmbeddingBagCollection
from shardrec_embedding.quant.embedding_collection import QuantEmbeddingCollection

__all__ = [
    "MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS",
    "meta_to_cpu_placement",
    "quant_prep_enable_quant_state_dict_split_scale_bias",
    "quant_prep_enable_quant_state_dict_split_scale_bias_for_types",
    "quantize_embeddings",
    "quantize_inference_model",
]


def quant_prep_enable_quant_state_dict_split_scale_bias(module: nn.Module) -> None:
    """Mark `module` (a float collection about to be quantized) so that its quantized form's
    `state_dict()` holds `<table>.weight_qscale` and `<table>.weight_qbias` (`(R, 1)` fp16
    each) instead of `<table>.weight_qscaleshift` (TorchRec's function of the same name)."""
    setattr(module, MODULE_ATTR_QUANT_STATE_DICT_SPLIT_SCALE_BIAS, True)


def quant_prep_enable_quant_state_dict_split_scale_bias_for_types(
    module: nn.Module, module_types: list[type[nn.Module]]
) -> None:
    """`quant_prep_enable_quant_state_dict_split_scale_bias` on every submodule of `module`
    (itself included) that is an instance of one of `module_types`."""
    for m in module.modules():
        if isinstance(m, tuple(module_types)):
            quant_prep_enable_quant_state_dict_split_scale_bias(m)


def quantize_embeddings(
    module: nn.Module,
    dtype: torch.dtype,
    inplace: bool,
    additional_qconfig_spec_keys: list[type[nn.Module]] | None = None,
    additional_mapping: dict[type[nn.Module], type[nn.Module]] | None = None,
    output_dtype: torch.dtype = torch.float,
    per_table_weight_dtype: dict[str, torch.dtype] | None = None,
) -> nn.Module:
    """TorchRec's `torchrec.inference.modules.quantize_embeddings`: `quantize_dynamic` with a
    `QuantConfig` storing `dtype` (per table: `per_table_weight_dtype`) and returning
    `output_dtype`. By default only `EmbeddingBagCollection`s are swapped (for
    `QuantEmbeddingBagCollection`); `additional_qconfig_spec_keys` / `additional_mapping` add
    more (e.g. `EmbeddingCollection` -> `QuantEmbeddingCollection`). `inplace=False` returns a
    converted copy and leaves `module` as it was."""
    data_type_of_dtype(dtype, "quantize_embeddings")  # ValueError for a bad dtype first
    qconfig = QuantConfig(
        activation=PlaceholderObserver.with_args(dtype=output_dtype),
        weight=PlaceholderObserver.with_args(dtype=dtype),
        per_table_weight_dtype=per_table_weight_dtype,
    )
    qconfig_spec: dict[type[nn.Module], QuantConfig] = {EmbeddingBagCollection: qconfig}
    mapping: dict[type[nn.Module], type[nn.Module]] = {
        EmbeddingBagCollection: QuantEmbeddingBagCollection
    }
    for key in additional_qconfig_spec_keys or []:
        qconfig_spec[key] = qconfig
    mapping.update(additional_mapping or {})
    converted: nn.Module = quantize_dynamic(  # type: ignore[no-untyped-call]
        module, qconfig_spec=qconfig_spec, mapping=mapping, inplace=inplace
    )
    return converted


def quantize_inference_model(
    model: nn.Module,
    dtype: torch.dtype = torch.int8,
    *,
    output_dtype: torch.dtype = torch.float32,
    per_table_weight_dtype: dict[str, torch.dtype] | None = None,
) -> nn.Module:
    """Replace (in place) every `EmbeddingBagCollection` / `EmbeddingCollection` in `model`
    with its quantized form storing `dtype` (int8, quint4x2, quint2x4, float16, bfloat16) and
    returning `output_dtype`; a model that *is* a collection returns the new module.
    """
    data_type_of_dtype(dtype, "quantize_inference_model")  # ValueError for a bad dtype first
    qconfig = QuantConfig(
        activation=PlaceholderObserver.with_args(dtype=output_dtype),
        weight=PlaceholderObserver.with_args(dtype=dtype),
        per_table_weight_dtype=per_table_weight_dtype,
    )
    return _swap(model, qconfig)


def _swap(module: nn.Module, qconfig: QuantConfig) -> nn.Module:
    if isinstance(module, EmbeddingBagCollection | EmbeddingCollection):
        # the attribute quantize_dynamic's propagate_qconfig_ sets, read by from_float
        setattr(module, "qconfig", qconfig)  # noqa: B010
        try:
            if isinstance(module, EmbeddingBagCollection):
                return QuantEmbeddingBagCollection.from_float(module)
            return QuantEmbeddingCollection.from_float(module)
        finally:
            del module.qconfig
    for name, child in list(module.named_children()):
        new = _swap(child, qconfig)
        if new is not child:
            setattr(module, name, new)
    return module


def _on_cpu(module: nn.Module) -> nn.Module | None:
    """A CPU twin (same tables and options, freshly initialized rows) of a quantized collection
    on `meta`; None for any other module."""
    if isinstance(module, QuantEmbeddingBagCollection) and module.device.type == "meta":
        return QuantEmbeddingBagCollection(
            module.embedding_bag_configs(),
            module.is_weighted(),
            torch.device("cpu"),
            module.output_dtype(),
            check_ids=bool(module.lookup.check_ids),
            quant_state_dict_split_scale_bias=module._split_scale_bias,
        )
    if isinstance(module, QuantEmbeddingCollection) and module.device.type == "meta":
        return QuantEmbeddingCollection(
            module.embedding_configs(),
            torch.device("cpu"),
            module.output_dtype(),
            bool(module._need_indices),
            check_ids=bool(module.lookup.check_ids),
            quant_state_dict_split_scale_bias=module._split_scale_bias,
        )
    return None


def meta_to_cpu_placement(module: nn.Module) -> None:
    """Replace, in place, every quantized collection on `meta` below `module` (a model, or a
    DistributedModelParallel wrapping one) by the same collection on CPU (TorchRec's
    `torchrec.quant.utils.meta_to_cpu_placement`). The new rows are uninitialized: load a
    `state_dict` afterwards. `module` itself is never replaced (it has no parent to hold the
    new one)."""
    for name, child in list(module.named_children()):
        cpu = _on_cpu(child)
        if cpu is None:
            meta_to_cpu_placement(child)
        else:
            setattr(module, name, cpu)
