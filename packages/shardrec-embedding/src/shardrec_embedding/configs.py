"""Table configs: `EmbeddingBagConfig`, `EmbeddingConfig`, `PoolingType`, `DataType`.

Fields, names and defaults follow TorchRec 1.8, so tutorials carry over, with two differences:
the configs are frozen keyword-only dataclasses validated on construction, and an empty
`feature_names` is resolved to `[name]` here (TorchRec mutates the config inside the module).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import torch

from shardrec_embedding.dynamic.config import DynamicTableConfig
from shardrec_embedding.virtual import (
    VirtualTableEvictionPolicy,
    check_policy,
    virtual_dynamic_config,
)

__all__ = [
    "BaseEmbeddingConfig",
    "DataType",
    "EmbeddingBagConfig",
    "EmbeddingConfig",
    "PoolingType",
    "data_type_to_dtype",
    "dtype_to_data_type",
    "module_dtype",
]


class PoolingType(StrEnum):
    """How the rows of one bag are reduced. `PoolingType("SUM") is PoolingType.SUM`."""

    SUM = "SUM"
    MEAN = "MEAN"
    NONE = "NONE"

    def __str__(self) -> str:
        return self.value


class DataType(StrEnum):
    """Storage type of a table. `DataType("FP16") is DataType.FP16`."""

    FP32 = "FP32"
    FP16 = "FP16"
    BF16 = "BF16"
    INT64 = "INT64"
    INT32 = "INT32"
    INT8 = "INT8"
    UINT8 = "UINT8"
    INT4 = "INT4"
    INT2 = "INT2"
    NFP8 = "NFP8"

    def __str__(self) -> str:
        return self.value


_TORCH_DTYPES: dict[DataType, torch.dtype] = {
    DataType.FP32: torch.float32,
    DataType.FP16: torch.float16,
    DataType.BF16: torch.bfloat16,
    DataType.INT64: torch.int64,
    DataType.INT32: torch.int32,
    DataType.INT8: torch.int8,
    DataType.UINT8: torch.uint8,
    DataType.INT4: torch.quint4x2,
    DataType.INT2: torch.quint2x4,
    DataType.NFP8: torch.float8_e4m3fn,
}

# Types a trainable (unquantized) table may have. The row-wise quantized types are accepted too,
# as in TorchRec: such a table trains in fp16 and is quantized to its type for serving.
TRAINABLE_DATA_TYPES = (
    DataType.FP32,
    DataType.FP16,
    DataType.BF16,
    DataType.INT8,
    DataType.INT4,
    DataType.INT2,
)


def module_dtype(data_type: DataType | str) -> torch.dtype:
    """The dtype of a float (trainable) collection's weights for a table of `data_type`: its
    own for FP32 / FP16 / BF16, fp16 for INT8 / INT4 / INT2 (TorchRec's rule)."""
    dtype = _TORCH_DTYPES[DataType(data_type)]
    return dtype if dtype.is_floating_point else torch.float16


def data_type_to_dtype(data_type: DataType | str) -> torch.dtype:
    """The torch dtype that stores a table of `data_type`."""
    return _TORCH_DTYPES[DataType(data_type)]


def dtype_to_data_type(dtype: torch.dtype) -> DataType:
    """Inverse of `data_type_to_dtype`; `ValueError` for a dtype no table can have."""
    for data_type, torch_dtype in _TORCH_DTYPES.items():
        if torch_dtype == dtype:
            return data_type
    raise ValueError(f"dtype {dtype} has no DataType; valid: {sorted(map(str, _TORCH_DTYPES))}")


InitFn = Callable[[torch.Tensor], object]


@dataclass(frozen=True, kw_only=True)
class BaseEmbeddingConfig:
    """Fields every table config shares.

    num_embeddings: rows of the table; ids must lie in `[0, num_embeddings)`.
    embedding_dim: columns (the width of one embedding).
    name: table name, unique within a module; keys the `state_dict` entry.
    data_type: storage type of the weights.
    feature_names: features looked up in this table; empty means `[name]`.
    weight_init_min / weight_init_max: bounds of the default uniform init; `None` means
        `-/+ sqrt(1 / num_embeddings)`.
    init_fn: called with the weight (in place) instead of the uniform init when given.
    need_pos: TorchRec's marker for position-weighted tables (kept for compatibility).
    total_num_buckets: TorchRec's bucket count of a raw-id (virtual) table: rows come in
        `total_num_buckets` equal buckets (`num_embeddings` must be a multiple), and row-wise
        sharding gives each rank whole buckets (the planner's enumerator). A row-wise sharded
        raw-id table sends each id to the rank owning its bucket of the id space (`id_space`),
        TorchRec's rule (shardrec_sharding.id_buckets, docs/dynamic.md "Bucket routing").
    id_space: shardrec: a raw-id table's id space `[0, id_space)` that `total_num_buckets`
        cuts into buckets (set to a virtual table's `num_embeddings` when it runs as a raw-id
        table); None: `num_embeddings`. Needs `total_num_buckets`, which must divide it.
    use_virtual_table: TorchRec's key-value table: `num_embeddings` is the virtual id space
        (e.g. 2^50); the modules run it as a raw-id table of the capacity given as
        `dynamic=DynamicTableConfig(capacity=N)`, or, with none given and a space of at most
        2^24 ids, as a plain table of the whole space (shardrec_embedding.virtual,
        docs/dynamic.md).
    virtual_table_eviction_policy: TorchRec's eviction policy of a virtual table, mapped to
        the raw-id table's eviction (count-based: LFU, timestamp-based: TTL, none: NONE).
    dynamic: a `DynamicTableConfig` makes this a raw-id table: any int64 id is mapped to one
        of `num_embeddings` slots (its capacity) by the table's id map (docs/dynamic.md).
    """

    num_embeddings: int
    embedding_dim: int
    name: str = ""
    data_type: DataType = DataType.FP32
    feature_names: list[str] = field(default_factory=list)
    weight_init_max: float | None = None
    weight_init_min: float | None = None
    num_embeddings_post_pruning: int | None = None
    init_fn: InitFn | None = None
    need_pos: bool = False
    total_num_buckets: int | None = None
    use_virtual_table: bool = False
    virtual_table_eviction_policy: VirtualTableEvictionPolicy | None = None
    dynamic: DynamicTableConfig | None = None
    id_space: int | None = None

    def __post_init__(self) -> None:
        capacity = self.num_embeddings
        if self.dynamic is not None and type(capacity) is int and capacity < 1:
            raise ValueError(
                f"table {self.name!r}: dynamic capacity (num_embeddings) must be >= 1, got "
                f"{capacity}; set it to the number of slots (rows) the table holds"
            )
        _require_int("num_embeddings", self.num_embeddings, self.name, minimum=1)
        _require_int("embedding_dim", self.embedding_dim, self.name, minimum=1)
        self._check_virtual_fields()
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a str, got {self.name!r}")
        try:
            data_type = DataType(self.data_type)
        except ValueError:
            valid = ", ".join(d.value for d in DataType)
            raise ValueError(
                f"table {self.name!r}: data_type {self.data_type!r} is not one of {valid}"
            ) from None
        object.__setattr__(self, "data_type", data_type)
        given: object = self.feature_names
        if isinstance(given, str) or not isinstance(given, Sequence):
            raise TypeError(
                f"table {self.name!r}: feature_names must be a list of str, got {given!r}"
            )
        names = list(given) or [self.name]
        for feature in names:
            if not isinstance(feature, str) or not feature:
                raise ValueError(
                    f"table {self.name!r}: feature name {feature!r} must be a non-empty str"
                )
        if len(set(names)) != len(names):
            raise ValueError(f"table {self.name!r}: feature_names {names} repeat a feature")
        object.__setattr__(self, "feature_names", names)
        if self.use_virtual_table:
            # Validate what it runs as; a module resolves it (shardrec_embedding.virtual).
            check_policy(self.name, self.virtual_table_eviction_policy)
            if self.dynamic is not None:
                merged = virtual_dynamic_config(
                    self.name, self.virtual_table_eviction_policy, self.dynamic
                )
                merged.validate(self.name, merged.capacity or self.num_embeddings)
        elif self.dynamic is not None:
            if not isinstance(self.dynamic, DynamicTableConfig):
                raise TypeError(
                    f"table {self.name!r}: dynamic must be a DynamicTableConfig or None, got "
                    f"{self.dynamic!r}"
                )
            self.dynamic.validate(self.name, self.num_embeddings)
        low, high = self.get_weight_init_min(), self.get_weight_init_max()
        for field_name, bound in (("weight_init_min", low), ("weight_init_max", high)):
            if isinstance(bound, bool) or not isinstance(bound, int | float):
                raise TypeError(
                    f"table {self.name!r}: {field_name} must be a number, got {bound!r}"
                )
            if not math.isfinite(bound):
                # torch's uniform_ fails on it ("to is out of bounds for float") at construction
                raise ValueError(
                    f"table {self.name!r}: {field_name} must be finite, got {bound}; pass a "
                    "finite bound or None (the default, +-sqrt(1 / num_embeddings))"
                )
        if not low <= high:
            raise ValueError(
                f"table {self.name!r}: weight_init_min {low} must not exceed weight_init_max {high}"
            )

    def _check_virtual_fields(self) -> None:
        if not isinstance(self.use_virtual_table, bool):
            raise TypeError(
                f"table {self.name!r}: use_virtual_table must be a bool, got "
                f"{self.use_virtual_table!r}"
            )
        if self.virtual_table_eviction_policy is not None and not self.use_virtual_table:
            raise ValueError(
                f"table {self.name!r}: virtual_table_eviction_policy "
                f"{type(self.virtual_table_eviction_policy).__name__} is given but "
                "use_virtual_table is False; set use_virtual_table=True (a raw-id table) or drop "
                "the policy"
            )
        buckets = self.total_num_buckets
        if buckets is None:
            if self.id_space is not None:
                raise ValueError(
                    f"table {self.name!r}: id_space {self.id_space!r} is given without "
                    "total_num_buckets; it is the space the buckets cut: give "
                    "total_num_buckets too, or drop id_space"
                )
            return
        _require_int("total_num_buckets", buckets, self.name, minimum=1)
        if self.id_space is not None:
            _require_int("id_space", self.id_space, self.name, minimum=1)
            if self.id_space >= 1 << 63 or self.id_space % buckets:
                raise ValueError(
                    f"table {self.name!r}: id_space {self.id_space} must be below 2^63 and a "
                    f"multiple of total_num_buckets {buckets} (buckets hold equal id ranges); "
                    "pick a bucket count that divides it"
                )
        if self.num_embeddings % buckets:
            raise ValueError(
                f"table {self.name!r}: num_embeddings {self.num_embeddings} is not a multiple of "
                f"total_num_buckets {buckets}; buckets hold equal row ranges, so pick a bucket "
                "count that divides num_embeddings"
            )

    def get_weight_init_max(self) -> float:
        if self.weight_init_max is None:
            return math.sqrt(1 / self.num_embeddings)
        return self.weight_init_max

    def get_weight_init_min(self) -> float:
        if self.weight_init_min is None:
            return -math.sqrt(1 / self.num_embeddings)
        return self.weight_init_min

    def num_features(self) -> int:
        return len(self.feature_names)

    def init_weight_(self, weight: torch.Tensor) -> None:
        """Initialize `weight` in place: `init_fn` when given, else uniform(min, max)."""
        with torch.no_grad():
            if self.init_fn is not None:
                self.init_fn(weight)
            else:
                weight.uniform_(self.get_weight_init_min(), self.get_weight_init_max())


@dataclass(frozen=True, kw_only=True)
class EmbeddingBagConfig(BaseEmbeddingConfig):
    """A table whose rows are pooled per bag (`EmbeddingBagCollection`)."""

    pooling: PoolingType = PoolingType.SUM

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            pooling = PoolingType(self.pooling)
        except ValueError:
            raise ValueError(
                f"table {self.name!r}: pooling {self.pooling!r} is not one of SUM, MEAN, NONE"
            ) from None
        object.__setattr__(self, "pooling", pooling)


@dataclass(frozen=True, kw_only=True)
class EmbeddingConfig(BaseEmbeddingConfig):
    """A table whose rows are returned per id, unpooled (`EmbeddingCollection`)."""


def _require_int(field_name: str, value: object, table: str, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"table {table!r}: {field_name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"table {table!r}: {field_name} must be >= {minimum}, got {value}")
