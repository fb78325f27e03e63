"""Per-table hints and limits for the planner (TorchRec's ParameterConstraints)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from shardrec_embedding import DataType
from shardrec_planner.cache_params import BoundsCheckMode, CacheParams, KeyValueParams
from shardrec_planner.enums import EmbeddingComputeKernel, ShardingType
from shardrec_planner.hashing import hash_sha256_to_int

_PER_FEATURE = ("pooling_factors", "num_poolings", "batch_sizes")
_TYPED: dict[str, type] = {
    "cache_params": CacheParams,
    "bounds_check_mode": BoundsCheckMode,
    "output_dtype": DataType,
    "key_value_params": KeyValueParams,
}


class DefaultPoolingFactors(tuple[float, ...]):
    """TorchRec's default `pooling_factors` (`[1.0]`), told apart from a list the user gave: the
    planner reads it as 1.0 for each feature of the table, and it joins no length check."""


def _names(field: str, values: object, known: Callable[[str], object]) -> tuple[object, ...]:
    """A non-empty list of names as a tuple; a known name becomes its enum member, another
    stays a string (refused where it is used: TorchRec's hashing and copies accept it)."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise TypeError(f"{field} must be a list of names, got {values!r}")
    if not values:
        raise ValueError(f"{field} must not be empty (use None for any)")
    out: list[object] = []
    for value in values:
        if not isinstance(value, str) or not value:
            raise TypeError(f"{field} must hold non-empty strings, got {value!r} in {list(values)}")
        try:
            out.append(known(value))
        except ValueError:
            out.append(value)
    return tuple(out)


def _numbers(field: str, values: object) -> tuple[float, ...]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
        raise ValueError(f"{field} must be a non-empty list of numbers, got {values!r}")
    if any(not isinstance(v, int | float) or not v >= 0 for v in values):
        raise ValueError(f"{field} must be >= 0, got {list(values)}")
    return tuple(values)


def _checked(field: str, value: object) -> object:
    """`value` normalised for `field` of ParameterConstraints, or a ValueError / TypeError."""
    if value is None:
        return None
    if field == "sharding_types":
        return _names(field, value, ShardingType)
    if field == "compute_kernels":
        return _names(field, value, EmbeddingComputeKernel)
    if field in _PER_FEATURE:
        return value if isinstance(value, DefaultPoolingFactors) else _numbers(field, value)
    if field in _TYPED and not isinstance(value, _TYPED[field]):
        raise TypeError(f"{field} must be a {_TYPED[field].__name__} or None, got {value!r}")
    if field == "feature_names":  # a list, as TorchRec's (compared with the configs' lists)
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            raise TypeError(f"feature_names must be a list of names, got {value!r}")
        if any(not isinstance(v, str) or not v for v in value):
            raise TypeError(f"feature_names must hold non-empty strings, got {list(value)}")
        return list(value)
    if field == "min_partition" and (not isinstance(value, int) or value < 1):
        raise ValueError(f"min_partition must be >= 1, got {value!r}")
    return value


@dataclasses.dataclass(kw_only=True)
class ParameterConstraints:
    """What the planner may do with one table, and what its input looks like.

    - `sharding_types` / `compute_kernels`: allowed choices (plain strings accepted); None = any
      the sharder offers. A name shardrec does not know is kept (TorchRec's constraints are
      hashed and copied with any string) and refused with a `ValueError` by the planner.
    - `min_partition`: narrowest column block for column-split types (default 128).
    - `pooling_factors`: average ids per sample for each feature of the table (default
      TorchRec's `[1.0]`, a `DefaultPoolingFactors`: 1.0 for each feature).
    - `num_poolings`: poolings per sample for each feature (default 1.0 each).
    - `batch_sizes`: per-rank batch size for each feature (default: the planner's batch_size).
    - `is_weighted`: ids carry per-id weights (more input bytes, slower backward).

    The three per-feature lists must have equal lengths: TorchRec zips them, silently dropping
    features, so shardrec refuses unequal ones. To change their length on an existing
    constraint, use `dataclasses.replace(c, pooling_factors=..., num_poolings=...)`.

    Mutable as TorchRec's (its users assign `c.enforce_hbm = None`); every assignment is
    checked as construction is, so a bad value raises a `ValueError` / `TypeError` naming the
    field. Lists are stored as tuples, except `feature_names`, a list (copied) as TorchRec's.
    `hash()` is stable across processes (`stable_hash`).

    `compute_kernels` may name TorchRec's UVM and key-value kernels (`fused_uvm`,
    `fused_uvm_caching`, `key_value`): they run as `fused` (`kernel_choice`). Kernels shardrec
    does not execute (`quant`, the virtual-table kernels, ...) are never picked by the search,
    and a table left with only those raises `PlannerError`.

    TorchRec's kernel options `cache_params`, `enforce_hbm`, `stochastic_rounding`,
    `bounds_check_mode` and `key_value_params` are copied into the table's `ParameterSharding`;
    `plan.report()` says what became of each (`kernel_choice.kernel_notes`: the cache's
    `load_factor` shapes the cuda estimate, the rest is named as not applied).
    `feature_names`, `output_dtype` and `device_group` are carried as TorchRec carries them.
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

    def __setattr__(self, name: str, value: object) -> None:
        value = _checked(name, value)
        if name in _PER_FEATURE and value is not None:
            if isinstance(value, DefaultPoolingFactors):
                super().__setattr__(name, value)
                return
            lengths = {
                f: len(getattr(self, f) or ())
                for f in _PER_FEATURE
                if f != name and not isinstance(getattr(self, f, None), DefaultPoolingFactors)
            }
            lengths = {f: n for f, n in lengths.items() if n}
            lengths[name] = len(value)  # type: ignore[arg-type]  # a tuple from _checked
            if len(set(lengths.values())) > 1:
                raise ValueError(
                    "pooling_factors, num_poolings and batch_sizes describe the same features "
                    f"and must have equal lengths, got {lengths}; to change the length of all, "
                    "use dataclasses.replace(constraints, pooling_factors=..., ...)"
                )
        super().__setattr__(name, value)

    def check_names(self, where: str) -> None:
        """Raise `ValueError` when `sharding_types` or `compute_kernels` name something
        shardrec does not know (`where` names the table in the message)."""
        for field, kind in (
            ("sharding_types", ShardingType),
            ("compute_kernels", EmbeddingComputeKernel),
        ):
            names = getattr(self, field) or ()
            unknown = [n for n in names if not isinstance(n, kind)]
            if unknown:
                raise ValueError(
                    f"{where}: constraint {field} names unknown {unknown}; valid: "
                    f"{[k.value for k in kind]}"
                )

    def stable_hash(self) -> int:
        """A hash of every field, the same in every process (SHA-256 of their canonical form)."""
        return hash_sha256_to_int(getattr(self, f.name) for f in dataclasses.fields(self))

    def __hash__(self) -> int:
        return self.stable_hash()
