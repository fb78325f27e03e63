"""A plain-data snapshot of what the planner's estimators read from a sharder (TorchRec's
`SharderData`, `build_sharder_data`), so estimates can be made where no live sharder is.

`StorageUsageType` says which sizing rule the sharder's tables follow: a float embedding
sharder (`BaseEmbeddingSharder`), a quantized one (`BaseQuantEmbeddingSharder`) or any other
module sharder. The two base classes are markers: shardrec's sharders are not built on them
(STYLE rule 5) but registered with them as virtual subclasses by the sharding package, so
`isinstance` answers as in TorchRec.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

import torch

# TorchRec's `CommOp` names of the collectives a quantized-comms registry may hold codecs for.
_QCOMM_OPS = (
    "POOLED_EMBEDDINGS_ALL_TO_ALL",
    "SEQUENCE_EMBEDDINGS_ALL_TO_ALL",
    "POOLED_EMBEDDINGS_REDUCE_SCATTER",
)


class StorageUsageType(enum.Enum):
    """Which kind of sharder sizes a table (TorchRec's values: the kind's class name)."""

    BASE_QUANT = "BaseQuantEmbeddingSharder"
    BASE = "BaseEmbeddingSharder"
    DEFAULT = "ModuleSharder"


class BaseEmbeddingSharder(abc.ABC):  # noqa: B024  # a marker: no abstract methods on purpose
    """Marker of the float embedding-collection sharders (TorchRec's base class name)."""


class BaseQuantEmbeddingSharder(abc.ABC):  # noqa: B024  # a marker, as above
    """Marker of the quantized (forward-only) embedding-collection sharders."""


@dataclasses.dataclass(kw_only=True)
class SharderData:
    """`fused_params` (a copy), per quantized collective `(forward, backward)` bytes per
    element of its codec, and the sharder's `StorageUsageType`."""

    fused_params: dict[str, Any]
    qcomm_dtype_sizes: dict[str, tuple[float, float]]
    storage_usage_type: StorageUsageType


SharderDataMap = dict[str, SharderData]


def _element_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def build_sharder_data(sharder: object) -> SharderData:
    """The snapshot of `sharder`: its fused params ({} when it has none), the element sizes of
    the codecs its `qcomm_codecs_registry` holds (keyed by TorchRec's `CommOp` names; shardrec's
    own sharders have no registry: their collectives are not quantized), and its kind."""
    fused = getattr(sharder, "fused_params", None)
    registry = getattr(sharder, "qcomm_codecs_registry", None)
    sizes: dict[str, tuple[float, float]] = {}
    if isinstance(registry, Mapping):
        for op in _QCOMM_OPS:
            if op in registry:
                codecs = registry[op]
                sizes[op] = (
                    _element_size(codecs.forward.quantized_dtype),
                    _element_size(codecs.backward.quantized_dtype),
                )
    if isinstance(sharder, BaseQuantEmbeddingSharder):
        kind = StorageUsageType.BASE_QUANT
    elif isinstance(sharder, BaseEmbeddingSharder):
        kind = StorageUsageType.BASE
    else:
        kind = StorageUsageType.DEFAULT
    return SharderData(
        fused_params=dict(fused) if fused else {},
        qcomm_dtype_sizes=sizes,
        storage_usage_type=kind,
    )


def build_sharder_data_map(sharder_map: Mapping[str, object]) -> SharderDataMap:
    """`build_sharder_data` of every sharder, under the same keys."""
    return {key: build_sharder_data(sharder) for key, sharder in sharder_map.items()}
