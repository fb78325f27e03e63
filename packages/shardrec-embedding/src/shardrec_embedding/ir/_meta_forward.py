"""Shape-only forwards that stand in for a collection's forward in an exported program,
through the `shardrec::ir_*` stand-in ops (part of `shardrec_embedding.ir.serializer`)."""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from shardrec_embedding._grouping import TablePlan
from shardrec_embedding.configs import (
    DataType,
    data_type_to_dtype,
)
from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_embedding.ir import _ops
from shardrec_embedding.quant import QuantEmbeddingBagCollection, QuantEmbeddingCollection
from shardrec_embedding.regroup import KTRegroupAsDict
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor

# --- shape-only forwards --------------------------------------------------------------------


def _kjt_tensors(features: KeyedJaggedTensor) -> list[torch.Tensor | None]:
    return [
        features.values(),
        features.weights_or_none(),
        features.lengths_or_none(),
        features.offsets_or_none(),
    ]


def _pooled_meta(module: nn.Module, features: KeyedJaggedTensor, dtype: torch.dtype) -> KeyedTensor:
    dims = cast(list[int], module._lengths_per_embedding)
    batch = features.stride()
    if dims:
        outputs = _ops.ir_emb_lookup(_kjt_tensors(features), batch, dims, dtype)
        values = torch.cat(outputs, dim=1)
    else:  # no op: torch.export.load cannot read back an op returning an empty list
        values = torch.zeros(batch, 0, dtype=dtype, device=features.values().device)
    return KeyedTensor(
        keys=cast(list[str], module._embedding_names), length_per_key=dims, values=values
    )


def ebc_meta_forward(ebc: EmbeddingBagCollection, features: KeyedJaggedTensor) -> KeyedTensor:
    """An EmbeddingBagCollection's output shape and keys, through `shardrec::ir_emb_lookup`."""
    return _pooled_meta(ebc, features, torch.float32)


def qebc_meta_forward(
    qebc: QuantEmbeddingBagCollection, features: KeyedJaggedTensor
) -> KeyedTensor:
    return _pooled_meta(qebc, features, qebc.output_dtype())


def _sequence_meta(
    module: EmbeddingCollection | QuantEmbeddingCollection,
    features: KeyedJaggedTensor,
    need_indices: bool,
    dtype: torch.dtype,
) -> dict[str, JaggedTensor]:
    plan: TablePlan = module._plan
    segments = plan.segments
    if not segments:  # (an op returning an empty list does not load back)
        return {}
    keys = features.keys()
    feature_index = list(plan.feature_indices(keys))
    lengths = features.lengths()
    batch = features.stride()
    out = _ops.ir_ec_lookup(
        features.values(),
        lengths,
        len(keys),
        list(feature_index),
        [s.dim for s in segments],
        need_indices,
        dtype,
    )
    n = len(segments)
    result: dict[str, JaggedTensor] = {}
    for s, (seg, k) in enumerate(zip(segments, feature_index, strict=True)):
        result[seg.embedding_name] = JaggedTensor._unchecked(
            out[s],
            out[n + s] if need_indices else None,
            lengths[k * batch : (k + 1) * batch],
            None,
        )
    return result


def ec_meta_forward(
    ec: EmbeddingCollection, features: KeyedJaggedTensor
) -> dict[str, JaggedTensor]:
    """An EmbeddingCollection's output shapes, through `shardrec::ir_ec_lookup`."""
    return _sequence_meta(ec, features, ec.need_indices(), torch.float32)


def qec_meta_forward(
    qec: QuantEmbeddingCollection, features: KeyedJaggedTensor
) -> dict[str, JaggedTensor]:
    return _sequence_meta(qec, features, bool(qec._need_indices), qec.output_dtype())


def kt_regroup_meta_forward(
    op_module: KTRegroupAsDict, keyed_tensors: list[KeyedTensor]
) -> dict[str, torch.Tensor]:
    """A KTRegroupAsDict's output shapes, through `shardrec::ir_kt_regroup`."""
    width: dict[str, int] = {}
    for kt in keyed_tensors:
        width.update(zip(kt.keys(), kt.length_per_key(), strict=True))
    dims = [sum(width[k] for k in group) for group in op_module._groups]
    dtype = (
        data_type_to_dtype(DataType(op_module._emb_dtype))
        if op_module._emb_dtype is not None
        else torch.float32
    )
    outputs = _ops.ir_kt_regroup(
        [kt.values() for kt in keyed_tensors],
        keyed_tensors[0].values().size(0),
        dims,
        dtype,
    )
    return dict(zip(op_module._keys, outputs, strict=True))
