"""`ManagedCollisionCollection`: one MC module per table, applied to a KeyedJaggedTensor.

KJT (any key order, extra keys)  --permute to the tables' features-->  split per table
  --> {table: JaggedTensor(values of its features, lengths)} --> table's MC module
  --> remapped values, concatenated back: a KJT of the tables' features only
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from shardrec_embedding.configs import BaseEmbeddingConfig
from shardrec_embedding.mc.base import ManagedCollisionModule
from shardrec_embedding.mc.reused_rows import ReusedRows
from shardrec_embedding.mc.scripted import ScriptedManagedCollisionCollection
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, register_torchscript_types

__all__ = ["ManagedCollisionCollection"]


@torch.fx.wrap
def _tables_features(features: KeyedJaggedTensor, feature_names: list[str]) -> KeyedJaggedTensor:
    """`features` restricted to and ordered as `feature_names` (the tables' features)."""
    keys = features.keys()
    if list(keys) == feature_names:
        return features
    missing = [name for name in feature_names if name not in keys]
    if missing:
        raise ValueError(
            f"ManagedCollisionCollection: the input KeyedJaggedTensor lacks features {missing} "
            f"its tables read (it has {list(keys)}); pass every table feature"
        )
    index = {key: i for i, key in enumerate(keys)}
    return features.permute([index[name] for name in feature_names])


@torch.fx.wrap
def _remap_tables(
    features: KeyedJaggedTensor,
    modules: list[nn.Module],
    tables: list[str],
    splits: list[int],
    mutate_miss_lengths: bool,
) -> KeyedJaggedTensor:
    values: list[torch.Tensor] = []
    lengths: list[torch.Tensor] = []
    for table, module, part in zip(tables, modules, features.split(splits), strict=True):
        jt = JaggedTensor(values=part.values(), lengths=part.lengths())
        out = module({table: jt}, mutate_miss_lengths=mutate_miss_lengths)[table]
        values.append(out.values())
        lengths.append(out.lengths())
    return KeyedJaggedTensor(
        keys=features.keys(),
        values=torch.cat(values) if values else features.values(),
        lengths=torch.cat(lengths) if lengths else features.lengths(),
        weights=features.weights_or_none(),
        stride=features.stride(),
        stride_per_key_per_rank=features.stride_per_key_per_rank() or None,
        inverse_indices=features.inverse_indices_or_none(),
    )


class ManagedCollisionCollection(nn.Module):
    """The MC modules of a list of tables (TorchRec's `ManagedCollisionCollection`).

    Args:
        managed_collision_modules: `{table name: MC module}`, one per config; each module's
            `output_size()` equals its table's `num_embeddings`.
        embedding_configs: the tables (EmbeddingBagConfig or EmbeddingConfig), in the order of
            the embedding collection they feed.
        need_preprocess: kept for TorchRec's signature (the modules preprocess themselves).

    `forward(features: KeyedJaggedTensor) -> KeyedJaggedTensor` returns the tables' features
    (config order; features no table reads are dropped) with ids remapped to rows.
    """

    def __init__(
        self,
        managed_collision_modules: Mapping[str, ManagedCollisionModule],
        embedding_configs: Sequence[BaseEmbeddingConfig],
        need_preprocess: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(managed_collision_modules, Mapping):
            raise TypeError(
                "ManagedCollisionCollection: managed_collision_modules must be a dict {table "
                f"name: managed-collision module}}, got {type(managed_collision_modules).__name__}"
            )
        names = [config.name for config in embedding_configs]
        missing = [name for name in names if name not in managed_collision_modules]
        if missing:
            raise ValueError(
                f"ManagedCollisionCollection: tables {missing} have no managed-collision module; "
                f"pass one per table (got modules for {list(managed_collision_modules)})"
            )
        for config in embedding_configs:
            module = managed_collision_modules[config.name]
            if not isinstance(module, ManagedCollisionModule):
                raise TypeError(
                    f"ManagedCollisionCollection: the module of table {config.name!r} is a "
                    f"{type(module).__name__}, not a ManagedCollisionModule; pass e.g. "
                    "MCHManagedCollisionModule or HashZchManagedCollisionModule"
                )
            rows = module.output_size()
            if rows != config.num_embeddings:
                raise ValueError(
                    f"ManagedCollisionCollection: table {config.name!r} has num_embeddings="
                    f"{config.num_embeddings} but its managed-collision module outputs {rows} "
                    "rows; make zch_size equal num_embeddings"
                )
        self._managed_collision_modules = nn.ModuleDict(
            {name: managed_collision_modules[name] for name in names}
        )
        self._embedding_configs = embedding_configs
        self.need_preprocess = need_preprocess
        self._table_to_features: dict[str, list[str]] = {
            config.name: list(config.feature_names) for config in embedding_configs
        }
        self._feature_to_table: dict[str, str] = {
            feature: config.name for config in embedding_configs for feature in config.feature_names
        }
        self._table_feature_splits: list[int] = [
            len(features) for features in self._table_to_features.values()
        ]
        self._table_name_to_config: dict[str, BaseEmbeddingConfig] = {
            config.name: config for config in embedding_configs
        }
        self._feature_names: list[str] = [
            feature for config in embedding_configs for feature in config.feature_names
        ]
        # the rows an MC embedding collection resets (mc/reused_rows.py); kept here for
        # `_remap_and_reset`, a torch.fx leaf that takes this collection
        self._reused_rows = ReusedRows()

    def embedding_configs(self) -> Sequence[BaseEmbeddingConfig]:
        return self._embedding_configs

    def table_to_number_buckets(self) -> dict[str, int]:
        return {table: _mc(module).buckets() for table, module in self._modules_by_table()}

    def forward(
        self,
        features: KeyedJaggedTensor,
        mutate_miss_lengths: bool = True,
    ) -> KeyedJaggedTensor:
        features = _tables_features(features, self._feature_names)
        return _remap_tables(
            features,
            list(self._managed_collision_modules.values()),
            list(self._managed_collision_modules.keys()),
            self._table_feature_splits,
            mutate_miss_lengths,
        )

    def __prepare_scriptable__(self) -> nn.Module:
        """What `torch.jit.script(collection)` compiles: the lookup-only twin of `mc.scripted`
        (eval-mode remapping, the same state tensors)."""
        register_torchscript_types()
        modules = {table: _mc(module) for table, module in self._modules_by_table()}
        return ScriptedManagedCollisionCollection(
            modules, self._feature_names, self._table_feature_splits, self.training
        )

    def evict(self) -> dict[str, torch.Tensor | None]:
        """`{table: rows freed since the last call, or None}`."""
        return {table: _mc(module).evict() for table, module in self._modules_by_table()}

    def open_slots(self) -> dict[str, torch.Tensor]:
        """`{table: rows not owned by an id, (1,)}`."""
        return {table: _mc(module).open_slots() for table, module in self._modules_by_table()}

    def _modules_by_table(self) -> list[tuple[str, nn.Module]]:
        return list(self._managed_collision_modules.items())


def _mc(module: nn.Module) -> ManagedCollisionModule:
    assert isinstance(module, ManagedCollisionModule)
    return module
