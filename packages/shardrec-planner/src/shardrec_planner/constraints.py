"""Per-table hints and limits for the planner (TorchRec's ParameterConstraints)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from shardrec_embedding import DataType
from shardrec_planner.cache_params import BoundsCheckMode, CacheParams, KeyValueParams
from shardrec_planner.enums import EmbeddingComputeKernel, ShardingType


class DefaultPoolingFactors(tuple[float, ...]):
    """TorchRec's default `pooling_factors` (`[1.0]`), told apart from a list the user gave: the
    planner reads it as 1.0 for each feature of the table, and it joins no length check."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ParameterConstraints:
    """What the planner may do with one table, and what its input looks like.

    - `sharding_types` / `compute_kernels`: allowed choices (plain strings accepted); None = any
      the sharder offers.
    - `min_partition`: narrowest column block for column-split types (default 128).
    - `pooling_factors`: average ids per sample for each feature of the table (default
      TorchRec's `[1.0]`, a `DefaultPoolingFactors`: 1.0 for each feature).
    - `num_poolings`: poolings per sample for each feature (default 1.0 each).
    - `batch_sizes`: per-rank batch size for each feature (default: the planner's batch_size).
    - `is_weighted`: ids carry per-id weights (more input bytes, slower backward).

    `compute_kernels` may name TorchRec's kernels shardrec does not execute (`key_value`, ...):
    the search never picks them, and a table left with only those raises `PlannerError`.

    TorchRec's kernel options, carried for the sharder (the planner's search does not read
    them): `cache_params` (a UVM-cached table's cache), `enforce_hbm`, `stochastic_rounding`,
    `bounds_check_mode`, `feature_names`, `output_dtype`, `device_group`, `key_value_params`.
    """

    sharding_types: Sequence[str] | None = None
    compute_kernels: Sequence[str] | None = None
    min_partition: int | None = None
    pooling_factors: Sequence[float] | None = dataclasses.field(
        default_factory=lambda: DefaultPoolingFactors((1.0,))
    )
    num_poolings: Sequence[float] | None = None
    batch_sizes: Sequence[int] | None = None
    is_weighted: bool = False
    cache_params: CacheParams | None = None
    enforce_hbm: bool | None = None
    stochastic_rounding: bool | None = None
    bounds_check_mode: BoundsCheckMode | None = None
    feature_names: Sequence[str] | None = None
    output_dtype: DataType | None = None
    device_group: str | None = None
    key_value_params: KeyValueParams | None = None

    def __post_init__(self) -> None:
        typed = (
            ("cache_params", CacheParams),
            ("bounds_check_mode", BoundsCheckMode),
            ("output_dtype", DataType),
            ("key_value_params", KeyValueParams),
        )
        for field, kind in typed:
            value = getattr(self, field)
            if value is not None and not isinstance(value, kind):
                raise TypeError(f"{field} must be a {kind.__name__} or None, got {value!r}")
        if self.feature_names is not None:
            if isinstance(self.feature_names, str):
                raise TypeError(
                    f"feature_names must be a list of names, got the string {self.feature_names!r}"
                )
            object.__setattr__(self, "feature_names", tuple(self.feature_names))
        if self.sharding_types is not None:
            types = tuple(ShardingType(t) for t in self.sharding_types)
            if not types:
                raise ValueError("sharding_types must not be empty (use None for any)")
            object.__setattr__(self, "sharding_types", types)
        if self.compute_kernels is not None:
            kernels = tuple(EmbeddingComputeKernel(k) for k in self.compute_kernels)
            if not kernels:
                raise ValueError("compute_kernels must not be empty (use None for any)")
            object.__setattr__(self, "compute_kernels", kernels)
        if self.min_partition is not None and self.min_partition < 1:
            raise ValueError(f"min_partition must be >= 1, got {self.min_partition}")
        for field in ("pooling_factors", "num_poolings", "batch_sizes"):
            values = getattr(self, field)
            if values is None or isinstance(values, DefaultPoolingFactors):
                continue
            if isinstance(values, str | bytes) or not values:
                raise ValueError(f"{field} must be a non-empty list of numbers, got {values!r}")
            if any(not v >= 0 for v in values):
                raise ValueError(f"{field} must be >= 0, got {list(values)}")
            object.__setattr__(self, field, tuple(values))
        lengths = {
            f: len(getattr(self, f))
            for f in ("pooling_factors", "num_poolings", "batch_sizes")
            if getattr(self, f) is not None
            and not isinstance(getattr(self, f), DefaultPoolingFactors)
        }
        if len(set(lengths.values())) > 1:
            raise ValueError(
                f"pooling_factors, num_poolings and batch_sizes describe the same features and "
                f"must have equal lengths, got {lengths}"
            )
