"""The planner's view of a sharder, and of the tables a module holds.

The sharding layer (above this one) implements `PlannerSharder` structurally; the planner never
imports it. `EmbeddingTableSharder` is a plain implementation for planning before (or without) the
sharding layer, e.g. in benchmarks or to inspect a plan offline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from torch import nn

from shardrec_planner.dynamic_storage import dynamic_bytes_per_row
from shardrec_planner.enums import EmbeddingComputeKernel, ShardingType


class PlannerSharder(Protocol):
    """What the planner needs to know about how a module type can be sharded."""

    @property
    def module_type(self) -> type[nn.Module]:
        """Modules of this type (or a subclass) are planned with this sharder."""
        ...

    @property
    def fused_params(self) -> Mapping[str, object] | None:
        """Fused-optimizer settings; `fused_params["optimizer"]` sizes the optimizer state."""
        ...

    def sharding_types(self, compute_device_type: str) -> list[str]:
        """Sharding type names this sharder implements on `compute_device_type`."""
        ...

    def compute_kernels(self, sharding_type: str, compute_device_type: str) -> list[str]:
        """Compute kernel names available for `sharding_type` on `compute_device_type`."""
        ...

    def shardable_parameters(self, module: nn.Module) -> dict[str, nn.Parameter]:
        """Table name -> its (rows, dim) weight; may live on the meta device."""
        ...


M = TypeVar("M", bound=nn.Module, covariant=True)


class ModuleSharder(PlannerSharder, Protocol[M]):
    """TorchRec's name for a sharder of modules of type `M` (`ModuleSharder[nn.Module]` in the
    tutorials' type casts); the same protocol as `PlannerSharder`, typed by module."""

    @property
    def module_type(self) -> type[M]:
        """Modules of this type (or a subclass) are planned with this sharder."""
        ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class TableInfo:
    """One table as the planner sees it."""

    module_path: str
    name: str
    rows: int
    dim: int
    element_bytes: int
    feature_names: tuple[str, ...]
    pooled: bool
    dynamic_bytes_per_row: float = 0.0
    """A dynamic (raw-id) table's host bytes of id map and metadata per slot (dynamic_storage)."""


def _configs(module: nn.Module) -> tuple[list[object], bool]:
    inner = getattr(module, "_embedding_module", None)  # a managed-collision collection's tables
    if isinstance(inner, nn.Module):
        module = inner
    for attr, pooled in (("embedding_bag_configs", True), ("embedding_configs", False)):
        getter = getattr(module, attr, None)
        if callable(getter):
            return list(getter()), pooled
    return [], True


def table_infos(module_path: str, module: nn.Module, sharder: PlannerSharder) -> list[TableInfo]:
    """The tables of `module` that `sharder` can shard, in the sharder's order.

    Feature names come from the module's `embedding_bag_configs()` / `embedding_configs()` when it
    has them (each feature is one pooling of the table per sample); otherwise one feature per table.
    """
    configs, pooled = _configs(module)
    features: dict[str, tuple[str, ...]] = {}
    for cfg in configs:
        name = getattr(cfg, "name", None)
        names = getattr(cfg, "feature_names", None)
        if isinstance(name, str) and isinstance(names, Sequence):
            features[name] = tuple(str(n) for n in names)
    out: list[TableInfo] = []
    for name, param in sharder.shardable_parameters(module).items():
        if param.dim() != 2:
            raise ValueError(
                f"table {name!r} of module {module_path!r} has a weight of shape "
                f"{tuple(param.shape)}; the planner shards 2-d (rows, dim) weights only"
            )
        rows, dim = int(param.shape[0]), int(param.shape[1])
        out.append(
            TableInfo(
                module_path=module_path,
                name=name,
                rows=rows,
                dim=dim,
                element_bytes=param.element_size(),
                feature_names=features.get(name, (name,)) or (name,),
                pooled=pooled,
                dynamic_bytes_per_row=dynamic_bytes_per_row(configs, name),
            )
        )
    return out


def find_table_weights(module: nn.Module) -> dict[str, nn.Parameter]:
    """Table name -> weight, for modules with `embedding_bag_configs()` / `embedding_configs()`.

    The weight of table `t` is the parameter named `t.weight` or ending in `.t.weight` (the layout
    of TorchRec's and shardrec's collections: `embedding_bags.t.weight`).
    """
    configs, _ = _configs(module)
    if not configs:
        raise ValueError(
            f"{type(module).__name__} has no embedding_bag_configs() or embedding_configs(); "
            "pass a sharder whose shardable_parameters() knows its tables"
        )
    by_table: dict[str, list[nn.Parameter]] = {}
    for key, param in module.named_parameters():
        parts = key.split(".")
        if len(parts) >= 2 and parts[-1] == "weight":
            by_table.setdefault(parts[-2], []).append(param)
    out: dict[str, nn.Parameter] = {}
    for cfg in configs:
        name = str(getattr(cfg, "name", ""))
        hits = by_table.get(name, [])
        if len(hits) != 1:
            raise ValueError(
                f"table {name!r} of {type(module).__name__}: expected one parameter named "
                f"'<...>.{name}.weight', found {len(hits)}"
            )
        out[name] = hits[0]
    return out


_ALL_TYPES = tuple(t.value for t in ShardingType)


class EmbeddingTableSharder:
    """A `PlannerSharder` for modules with `embedding_bag_configs()` or `embedding_configs()`.

    Offers every sharding type (or `sharding_types`) on every device; kernels as TorchRec's
    EmbeddingBagCollectionSharder: `dense` for data_parallel, `fused` (and `dense`) for sharded
    types, plus `fused_uvm` and `fused_uvm_caching` on cuda, unless `compute_kernels` narrows them.
    """

    def __init__(
        self,
        module_type: type[nn.Module],
        *,
        sharding_types: Sequence[str] | None = None,
        compute_kernels: Sequence[str] | None = None,
        fused_params: Mapping[str, object] | None = None,
    ) -> None:
        self._module_type = module_type
        self._types = [ShardingType(t).value for t in (sharding_types or _ALL_TYPES)]
        self._kernels = (
            None
            if compute_kernels is None
            else [EmbeddingComputeKernel(k).value for k in compute_kernels]
        )
        self._fused_params = dict(fused_params) if fused_params is not None else None

    @property
    def module_type(self) -> type[nn.Module]:
        return self._module_type

    @property
    def fused_params(self) -> Mapping[str, object] | None:
        return self._fused_params

    def sharding_types(self, compute_device_type: str) -> list[str]:
        return list(self._types)

    def compute_kernels(self, sharding_type: str, compute_device_type: str) -> list[str]:
        if sharding_type == ShardingType.DATA_PARALLEL:
            default = ["dense"]
        elif compute_device_type == "cuda":
            default = ["fused", "dense", "fused_uvm", "fused_uvm_caching"]
        else:
            default = ["fused", "dense"]
        if self._kernels is None:
            return default
        return [k for k in self._kernels if k in default]

    def shardable_parameters(self, module: nn.Module) -> dict[str, nn.Parameter]:
        return find_table_weights(module)
