"""Helpers both collections share: config validation, packed table modules, input checks."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from shardrec_embedding._grouping import TablePlan
from shardrec_embedding.batched_lookup import (
    GradWorkspace,
    allocate_packed,
    packed_weight,
    repack_,
)
from shardrec_embedding.configs import TRAINABLE_DATA_TYPES, BaseEmbeddingConfig, PoolingType
from shardrec_embedding.virtual import resolve_virtual_tables
from shardrec_jagged import KeyedJaggedTensor, register_torchscript_types

__all__ = [
    "PackedCollection",
    "WeightsDevice",
    "build_packed_modules",
    "check_features",
    "check_offsets_of",
    "group_weights",
    "materialize_and_init",
    "module_weight",
    "repack_all",
    "validate_tables",
]


class WeightsDevice(nn.Module):
    """`device`: where the module's weights live (CPU for a module without parameters)."""

    __jit_unused_properties__ = ["device"]  # noqa: RUF012  # read by torch.jit.script

    @property
    def device(self) -> torch.device:
        for p in self.parameters():
            return p.device
        return torch.device("cpu")


class PackedCollection(WeightsDevice):
    """Base of the float collections, whose tables are packed per lookup group (`_grouped`).

    `.to()`, `.half()`, `to_empty()` give each weight its own storage: `_apply` re-packs the
    groups so the next forward is one lookup per group again.
    """

    # Python-only state (set by `_pack_tables`) a scripted forward never reads; subclasses
    # add their own.
    __jit_ignored_attributes__ = ["_plan", "_grouped", "_workspaces"]  # noqa: RUF012

    if TYPE_CHECKING:  # for mypy only: torch.jit.script would read class annotations
        _plan: TablePlan
        _grouped: list[list[nn.Module]]
        _workspaces: list[GradWorkspace]
        _table_features: list[list[str]]

    def _pack_tables(
        self,
        tables: Sequence[BaseEmbeddingConfig],
        poolings: Sequence[PoolingType],
        device: torch.device | str | None,
        make: Callable[[BaseEmbeddingConfig, torch.Tensor], nn.Module],
    ) -> nn.ModuleDict:
        """The table modules (`build_packed_modules`) of `tables`, grouped by `TablePlan`.

        Sets `_plan`, `_grouped` (each group's modules), `_workspaces` (each group's reused
        gradient buffer) and `_table_features` (per table, the features it reads, in output
        order: the plain forward's loop).
        """
        self._plan = TablePlan(tables, list(poolings))
        modules = build_packed_modules(tables, self._plan, device, make)
        self._grouped = [[modules[tables[i].name] for i in g.tables] for g in self._plan.groups]
        self._workspaces = [GradWorkspace() for _ in self._plan.groups]
        self._table_features = features_by_table(tables, self._plan)
        return modules

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> nn.Module:
        result: nn.Module = super()._apply(fn, recurse)  # type: ignore[no-untyped-call]  # untyped in torch
        repack_all(self._grouped)
        return result


def validate_tables(
    tables: Sequence[BaseEmbeddingConfig],
    config_type: type[BaseEmbeddingConfig],
    owner: str,
    *,
    device: torch.device | str | None,
) -> list[BaseEmbeddingConfig]:
    """Type, name and data-type checks shared by the collections; returns the tables, each
    virtual one (`use_virtual_table=True`) as the raw-id table it runs as on `device`
    (shardrec_embedding.virtual)."""
    if isinstance(tables, BaseEmbeddingConfig) or not isinstance(tables, Sequence):
        raise TypeError(f"{owner} takes a list of {config_type.__name__}, got {tables!r}")
    seen: set[str] = set()
    for t in tables:
        if not isinstance(t, config_type):
            raise TypeError(f"{owner} takes {config_type.__name__}s, got {type(t).__name__}: {t!r}")
        if not t.name or "." in t.name:
            raise ValueError(
                f"{owner}: table name {t.name!r} must be non-empty and contain no '.' "
                "(it keys the state_dict)"
            )
        if hasattr(nn.ModuleDict, t.name):
            # Table names key an nn.ModuleDict, whose own attributes (items, keys, ...) they
            # would shadow; torch raises an opaque KeyError there.
            raise ValueError(
                f"{owner}: table name {t.name!r} is reserved by nn.ModuleDict; rename the table"
            )
        if t.name in seen:
            raise ValueError(f"{owner}: duplicate table name {t.name!r}; names must be unique")
        seen.add(t.name)
        if t.data_type not in TRAINABLE_DATA_TYPES:
            valid = ", ".join(d.value for d in TRAINABLE_DATA_TYPES)
            raise ValueError(
                f"{owner}: table {t.name!r} has data_type {t.data_type.value}; "
                f"float tables are {valid}"
            )
    return resolve_virtual_tables(list(tables), device)


def build_packed_modules(
    tables: Sequence[BaseEmbeddingConfig],
    plan: TablePlan,
    device: torch.device | str | None,
    make: Callable[[BaseEmbeddingConfig, torch.Tensor], nn.Module],
) -> nn.ModuleDict:
    """One module per table (table order) whose `weight` views its group's packed buffer."""
    views: dict[int, torch.Tensor] = {}
    for group in plan.groups:
        rows = [tables[i].num_embeddings for i in group.tables]
        parts = allocate_packed(rows, group.dim, dtype=group.dtype, device=device)
        views.update(zip(group.tables, parts, strict=True))
    return nn.ModuleDict({t.name: make(t, views[i]) for i, t in enumerate(tables)})


def group_weights(modules: Sequence[nn.Module]) -> list[torch.Tensor]:
    """The `weight` of each module of a group, re-packed first if something split them
    (`load_state_dict(assign=True)`, `deepcopy`, assigning a new Parameter)."""
    weights = [module_weight(m) for m in modules]
    if packed_weight(weights) is None and weights[0].device.type != "meta":
        repack_(weights)
    return weights


def repack_all(grouped: Sequence[Sequence[nn.Module]]) -> None:
    for modules in grouped:
        weights = [module_weight(m) for m in modules]
        if weights and weights[0].device.type != "meta":
            repack_(weights)


def module_weight(module: nn.Module) -> torch.Tensor:
    """`module.weight` (an `nn.Embedding` / `nn.EmbeddingBag` table) as a Tensor."""
    weight = module.weight
    assert isinstance(weight, torch.Tensor)
    return weight


def materialize_and_init(
    owner: nn.Module,
    tables: Sequence[BaseEmbeddingConfig],
    modules: nn.ModuleDict,
    device: torch.device | str | None,
) -> None:
    """Allocate meta weights on `device` (default CPU), then run each table's init."""
    if any(p.device.type == "meta" for p in modules.parameters()):
        owner.to_empty(device=device if device is not None else "cpu")
    for t in tables:
        weight = modules[t.name].weight
        assert isinstance(weight, torch.Tensor)
        t.init_weight_(weight)


def check_features(
    features: KeyedJaggedTensor, *, weighted: bool, owner: str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Bad-input checks of a lookup's KJT; returns `(values, weights)`."""
    if not isinstance(features, KeyedJaggedTensor):
        raise TypeError(f"{owner}.forward takes a KeyedJaggedTensor, got {type(features).__name__}")
    values = features.values()
    if values.dim() != 1:  # a KJT may hold per-id vectors; a lookup needs one id per entry
        raise ValueError(
            f"{owner}: ids must be 1-D (N,), got KeyedJaggedTensor values of shape "
            f"{tuple(values.shape)}; pass one id per entry (values.flatten() if each row is one id)"
        )
    if values.is_floating_point() or values.is_complex() or values.dtype == torch.bool:
        raise TypeError(
            f"{owner}: ids must be an integer tensor, got values of dtype {values.dtype}; "
            "cast them with .long() if they are whole numbers"
        )
    weights = features.weights_or_none()
    if weighted and weights is None:
        raise ValueError(
            f"{owner} is weighted (is_weighted=True) but the KeyedJaggedTensor has no weights; "
            "pass weights=... or build the module with is_weighted=False"
        )
    if not weighted and weights is not None:
        raise ValueError(
            f"{owner} is unweighted but the KeyedJaggedTensor carries weights; "
            "build the module with is_weighted=True or drop the weights"
        )
    if features.variable_stride_per_key():
        raise ValueError(
            f"{owner}: variable batch size per feature (stride_per_key "
            f"{features.stride_per_key()}) is not supported by unsharded modules"
        )
    check_offsets_of(features)
    return values, weights


def traced_input(features: object) -> bool:
    """True when `features` is a torch.fx Proxy (symbolic tracing); then also registers the
    TorchScript forms of the value types, so the traced module scripts
    (docs/design/torchscript.md)."""
    import torch.fx

    if isinstance(features, torch.fx.Proxy):
        register_torchscript_types()
        return True
    return False


def features_by_table(tables: Sequence[BaseEmbeddingConfig], plan: TablePlan) -> list[list[str]]:
    """Per table, the features it reads, in the order of the plan's output segments."""
    out: list[list[str]] = [[] for _ in tables]
    for seg in plan.segments:
        out[seg.table_index].append(seg.feature)
    return out


def outputs_by_table(tables: Sequence[BaseEmbeddingConfig], plan: TablePlan) -> list[list[str]]:
    """Per table, its output names (`feature` or `feature@table`), in segment order."""
    out: list[list[str]] = [[] for _ in tables]
    for seg in plan.segments:
        out[seg.table_index].append(seg.embedding_name)
    return out


def tables_on_meta(modules: nn.ModuleDict) -> bool:
    """Whether the tables live on `meta` (one table is looked at: they share a device, and
    this runs at every forward)."""
    for module in modules.values():
        weight = module.weight
        return isinstance(weight, torch.Tensor) and weight.device.type == "meta"
    return False


def check_offsets_of(features: KeyedJaggedTensor) -> None:
    """Refuse a KJT built from offsets that decrease inside one key, naming the offset.

    Its first read checks the per-key bounds only (a full pass is left to ``validate()``), so
    such offsets came out as negative lengths: rows for the wrong bags, or a failure inside a
    torch kernel. Runs while the KJT has no lengths yet (built from offsets alone, the case
    that needs it); one comparison over the offsets, per batch. Call before ``lengths()``."""
    if features.lengths_or_none() is not None:
        return
    offsets = features.offsets()
    if offsets.numel() < 2:
        return
    drop = offsets[1:] < offsets[:-1]
    if not bool(drop.any()):
        return
    i = int(drop.nonzero()[0, 0])
    starts = [0, *itertools.accumulate(features.stride_per_key())]
    k = bisect.bisect_right(starts, i) - 1
    raise ValueError(
        f"offsets decrease at index {i + 1} ({int(offsets[i])} -> {int(offsets[i + 1])}), "
        f"in feature {features.keys()[k]!r} sample {i - starts[k]}: offsets must be "
        "non-decreasing (offsets[i] is where bag i starts in values)"
    )
