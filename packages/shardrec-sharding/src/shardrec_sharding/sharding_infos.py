"""Per-table sharding infos grouped by sharding type, with each table's fused params.

TorchRec's sharded collections turn their plan into `EmbeddingShardingInfo`s before building
one sharding per type (`ShardedEmbeddingBagCollection.create_grouped_sharding_infos`); shardrec
builds its strategies from the plan directly, and offers the same grouping for code that reads
it. A table's `fused_params` are merged in three layers, later ones winning:

```
sharder fused_params  <  the weight's apply_optimizer_in_backward optimizer (kwargs, "optimizer")
                      <  the table's ParameterSharding options (from its ParameterConstraints)
```

The ParameterSharding options map to TorchRec's fused-param keys: `cache_params` to
`cache_algorithm`, `cache_load_factor`, `cache_reserved_memory`, `cache_precision`,
`prefetch_pipeline`, `multipass_prefetch_config` (each only when set), `enforce_hbm`,
`stochastic_rounding`, `bounds_check_mode` as themselves, and `key_value_params` by its set
fields. Values keep shardrec's types (TorchRec converts them to fbgemm's).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence

from torch import Tensor, nn

from shardrec_embedding import EmbeddingBagConfig, EmbeddingConfig
from shardrec_embedding._grouping import embedding_names_by_table
from shardrec_optim import fused_spec_of_param
from shardrec_planner import ParameterSharding

__all__ = [
    "EmbeddingShardingInfo",
    "add_params_from_parameter_sharding",
    "create_grouped_sharding_infos",
    "merge_fused_params",
    "table_fused_params",
]

TableConfig = EmbeddingBagConfig | EmbeddingConfig

_CACHE_KEYS = (
    ("algorithm", "cache_algorithm"),
    ("load_factor", "cache_load_factor"),
    ("reserved_memory", "cache_reserved_memory"),
    ("precision", "cache_precision"),
    ("prefetch_pipeline", "prefetch_pipeline"),
    ("multipass_prefetch_config", "multipass_prefetch_config"),
)
_PLAIN_KEYS = ("enforce_hbm", "stochastic_rounding", "bounds_check_mode")


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class EmbeddingShardingInfo:
    """One table as its sharding sees it.

    embedding_config: a copy of the module's table config; embedding_names: its output names
    (`feature@table` for a feature that several tables read); param_sharding: its plan entry;
    param: its unsharded weight; fused_params: the merged settings (module docstring).
    """

    embedding_config: TableConfig
    embedding_names: list[str]
    param_sharding: ParameterSharding
    param: Tensor
    fused_params: dict[str, object]


def table_fused_params(
    fused_params: Mapping[str, object] | None,
    parameter_sharding: ParameterSharding,
    param: Tensor | None = None,
) -> dict[str, object]:
    """The fused params of one table: the sharder's, then `param`'s in-backward optimizer,
    then `parameter_sharding`'s options, each later layer overriding the earlier ones."""
    out: dict[str, object] = dict(fused_params or {})
    if param is not None:
        spec = fused_spec_of_param(param)
        if spec is not None:
            kwargs: Sequence[Mapping[str, object]] = param._optimizer_kwargs  # type: ignore[attr-defined]  # set with the spec
            out.update(kwargs[0])
            out["optimizer"] = spec.optimizer
    cache = parameter_sharding.cache_params
    if cache is not None:
        for field, key in _CACHE_KEYS:
            value = getattr(cache, field)
            if value is not None:
                out[key] = value
    for key in _PLAIN_KEYS:
        value = getattr(parameter_sharding, key)
        if value is not None:
            out[key] = value
    kv = parameter_sharding.key_value_params
    if kv is not None:
        out.update({k: v for k, v in dataclasses.asdict(kv).items() if v is not None})
    return out


def merge_fused_params(
    fused_params: Mapping[str, object] | None = None,
    param_fused_params: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """TorchRec's merge of a sharder's `fused_params` with one table's (`param_fused_params`
    wins; its `lr` is renamed `learning_rate`). Returns a new dict; the inputs are not changed
    (values are shared, not copied)."""
    out: dict[str, object] = dict(fused_params or {})
    table = dict(param_fused_params or {})
    if "lr" in table:
        if "learning_rate" in table and table["learning_rate"] != table["lr"]:
            raise ValueError(
                f"param_fused_params sets both lr={table['lr']!r} and "
                f"learning_rate={table['learning_rate']!r}: they name the same setting, pass one"
            )
        table["learning_rate"] = table.pop("lr")
    out.update(table)
    return out


def add_params_from_parameter_sharding(
    fused_params: Mapping[str, object] | None, parameter_sharding: ParameterSharding
) -> dict[str, object]:
    """TorchRec's name for the plan layer of `table_fused_params`: `fused_params` with
    `parameter_sharding`'s options (cache params, `enforce_hbm`, `stochastic_rounding`,
    `bounds_check_mode`, key-value params) written over it, as a new dict."""
    if not isinstance(parameter_sharding, ParameterSharding):
        raise TypeError(
            "parameter_sharding must be a ParameterSharding, "
            f"got {type(parameter_sharding).__name__}"
        )
    return table_fused_params(fused_params, parameter_sharding)


def create_grouped_sharding_infos(
    module: nn.Module,
    configs: Sequence[TableConfig],
    table_name_to_parameter_sharding: Mapping[str, ParameterSharding],
    prefix: str,
    fused_params: Mapping[str, object] | None,
    suffix: str | None = "weight",
) -> dict[str, list[EmbeddingShardingInfo]]:
    """`EmbeddingShardingInfo`s of `configs` (the tables of `module`) grouped by sharding type
    value, in table order within a group and groups in order of first appearance.

    The weight of table `t` is `module`'s parameter (or state_dict entry) named
    `prefix + t` (plus `.suffix` when given). Raises ValueError naming the table when it has no
    plan entry or its weight is not found, and TypeError for a plan entry that is not a
    ParameterSharding.
    """
    params = dict(module.named_parameters())
    state = module.state_dict()
    out: dict[str, list[EmbeddingShardingInfo]] = {}
    for config, names in zip(configs, embedding_names_by_table(configs), strict=True):
        sharding = table_name_to_parameter_sharding.get(config.name)
        if sharding is None:
            raise ValueError(
                f"table {config.name!r} has no entry in the plan (tables planned: "
                f"{sorted(table_name_to_parameter_sharding)}); plan every table of the module"
            )
        if not isinstance(sharding, ParameterSharding):
            raise TypeError(
                f"plan entry of table {config.name!r} must be a ParameterSharding, "
                f"got {type(sharding).__name__}"
            )
        name = prefix + config.name if suffix is None else f"{prefix}{config.name}.{suffix}"
        weight = params.get(name, state.get(name))
        if weight is None:
            raise ValueError(
                f"no weight {name!r} for table {config.name!r} in {type(module).__name__}; "
                f"pass the prefix of its tables (e.g. 'embedding_bags.')"
            )
        info = EmbeddingShardingInfo(
            embedding_config=copy.deepcopy(config),
            embedding_names=names,
            param_sharding=sharding,
            param=weight,
            fused_params=table_fused_params(fused_params, sharding, weight),
        )
        out.setdefault(sharding.sharding_type.value, []).append(info)
    return out
