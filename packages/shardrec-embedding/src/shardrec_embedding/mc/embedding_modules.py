"""`ManagedCollisionEmbeddingBagCollection` / `ManagedCollisionEmbeddingCollection`.

    raw-id KJT --ManagedCollisionCollection--> row KJT ----------------> EBC / EC --> embeddings
                                                  \\--evict(): rows freed this step, reset to
                                                     the table's init before the lookup

`forward(features)` returns `(embeddings, remapped features or None)`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from shardrec_embedding.configs import BaseEmbeddingConfig
from shardrec_embedding.dynamic.reset import init_rows_
from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_embedding.mc.collection import ManagedCollisionCollection
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor

__all__ = [
    "BaseManagedCollisionEmbeddingCollection",
    "ManagedCollisionEmbeddingBagCollection",
    "ManagedCollisionEmbeddingCollection",
    "evict",
]


@torch.no_grad()
def evict(evictions: Mapping[str, torch.Tensor | None], module: nn.Module) -> None:
    """Reset the rows `evictions[table]` of `module`'s tables to each table's initializer.

    A row freed by the MC module goes to a new raw id, which must not inherit the old id's
    vector. (TorchRec 1.8's unsharded `evict` does nothing; see docs/porting.md.) Optimizer
    state lives outside the module: a fused optimizer's sharded module resets its own.
    """
    configs = _configs(module)
    weights = _weights(module)
    for table, rows in evictions.items():
        if rows is None or rows.numel() == 0 or table not in weights:
            continue
        weight = weights[table]
        if weight.device.type == "meta":
            continue
        config = configs[table]
        if config.init_fn is None:
            # the default uniform initializer by the counter-based rows (dynamic/reset.py):
            # written in place, several times faster than `uniform_` and a scatter; the seed
            # is drawn from torch's generator, so `torch.manual_seed` still repeats a run
            seed = int(torch.randint(-(2**62), 2**62, (1,)))
            low, high = config.get_weight_init_min(), config.get_weight_init_max()
            init_rows_(weight, rows, row_offset=0, seed=seed, generation=0, low=low, high=high)
            continue
        fresh = weight.new_empty((rows.numel(), weight.size(1)))
        config.init_weight_(fresh)
        weight[rows.to(device=weight.device, dtype=torch.int64)] = fresh


def _configs(module: nn.Module) -> dict[str, BaseEmbeddingConfig]:
    if isinstance(module, EmbeddingBagCollection):
        return {c.name: c for c in module.embedding_bag_configs()}
    assert isinstance(module, EmbeddingCollection)
    return {c.name: c for c in module.embedding_configs()}


def _weights(module: nn.Module) -> dict[str, torch.Tensor]:
    tables = (
        module.embedding_bags if isinstance(module, EmbeddingBagCollection) else module.embeddings
    )
    assert isinstance(tables, nn.ModuleDict)
    out: dict[str, torch.Tensor] = {}
    for name, table in tables.items():
        weight = table.weight
        assert isinstance(weight, torch.Tensor)
        out[name] = weight
    return out


class BaseManagedCollisionEmbeddingCollection(nn.Module):
    """An embedding collection behind a `ManagedCollisionCollection` (TorchRec's base class).

    Args:
        embedding_module: the EmbeddingBagCollection or EmbeddingCollection; its configs must be
            the collection's.
        managed_collision_collection: the tables' MC modules.
        return_remapped_features: also return the remapped KJT.
        allow_in_place_embed_weight_update: kept for TorchRec's signature; freed rows are always
            reset in place under `no_grad`.
    """

    def __init__(
        self,
        embedding_module: EmbeddingBagCollection | EmbeddingCollection,
        managed_collision_collection: ManagedCollisionCollection,
        return_remapped_features: bool = False,
        allow_in_place_embed_weight_update: bool = False,
    ) -> None:
        super().__init__()
        configs: list[BaseEmbeddingConfig]
        if isinstance(embedding_module, EmbeddingBagCollection):
            configs = list(embedding_module.embedding_bag_configs())
        elif isinstance(embedding_module, EmbeddingCollection):
            configs = list(embedding_module.embedding_configs())
        else:
            raise TypeError(
                f"{type(self).__name__}: embedding module must be an EmbeddingBagCollection or "
                f"EmbeddingCollection, got {type(embedding_module).__name__}"
            )
        mc_configs = list(managed_collision_collection.embedding_configs())
        if configs != mc_configs:
            raise ValueError(
                f"{type(self).__name__}: the embedding module's tables "
                f"{[c.name for c in configs]} and the managed-collision collection's "
                f"{[c.name for c in mc_configs]} must be the same configs; build both from one list"
            )
        self._managed_collision_collection = managed_collision_collection
        self._return_remapped_features = return_remapped_features
        self._allow_in_place_embed_weight_update = allow_in_place_embed_weight_update
        self._embedding_module = embedding_module
        self.register_load_state_dict_post_hook(_reread_reused_rows)  # type: ignore[no-untyped-call]  # untyped in torch

    def __prepare_scriptable__(self) -> nn.Module:
        raise NotImplementedError(
            f"torch.jit.script of a {type(self).__name__} is not supported (TorchRec 1.8 "
            "cannot script it on CPU either); script its ManagedCollisionCollection "
            "(`module._managed_collision_collection`, eval mode) and its embedding module "
            "separately, or trace the module with torch.fx"
        )

    def forward(
        self,
        features: KeyedJaggedTensor,
        mutate_miss_lengths: bool = True,
    ) -> tuple[KeyedTensor | dict[str, JaggedTensor], KeyedJaggedTensor | None]:
        features = _remap_and_reset(
            self._managed_collision_collection,
            self._embedding_module,
            features,
            mutate_miss_lengths,
        )
        embeddings = self._embedding_module(features)
        return embeddings, features if self._return_remapped_features else None


class ManagedCollisionEmbeddingCollection(BaseManagedCollisionEmbeddingCollection):
    """Sequence embeddings (`dict[str, JaggedTensor]`) of raw ids (TorchRec's MC-EC)."""

    def __init__(
        self,
        embedding_collection: EmbeddingCollection,
        managed_collision_collection: ManagedCollisionCollection,
        return_remapped_features: bool = False,
        allow_in_place_embed_weight_update: bool = False,
    ) -> None:
        _check_kind(embedding_collection, EmbeddingCollection, type(self).__name__)
        super().__init__(
            embedding_collection,
            managed_collision_collection,
            return_remapped_features,
            allow_in_place_embed_weight_update,
        )

    @property
    def _embedding_collection(self) -> EmbeddingCollection:
        module = self._embedding_module
        assert isinstance(module, EmbeddingCollection)
        return module


@torch.fx.wrap
def _remap_and_reset(
    collection: ManagedCollisionCollection,
    embedding_module: nn.Module,
    features: KeyedJaggedTensor,
    mutate_miss_lengths: bool,
) -> KeyedJaggedTensor:
    """Raw ids -> rows; the rows taken from other ids this step are reset before the lookup
    reads them (TorchRec does not reset them, so a new id reads and trains the evicted id's
    row); rows no id held keep their initial weights, as in TorchRec (mc/reused_rows.py).
    A leaf of torch.fx graphs: a traced module remaps and resets as the eager one."""
    reused = collection._reused_rows
    reused.prepare(collection._managed_collision_modules)
    remapped: KeyedJaggedTensor = collection(features, mutate_miss_lengths=mutate_miss_lengths)
    evict(reused.reused(collection.evict()), embedding_module)
    return remapped


def _reread_reused_rows(module: nn.Module, incompatible_keys: object) -> None:
    if isinstance(module, BaseManagedCollisionEmbeddingCollection):
        module._managed_collision_collection._reused_rows.invalidate()


def _check_kind(module: nn.Module, kind: type[nn.Module], owner: str) -> None:
    """`owner` wraps an embedding module of `kind` only (the other kind has its own class)."""
    if not isinstance(module, kind):
        other = {
            EmbeddingBagCollection: "ManagedCollisionEmbeddingBagCollection",
            EmbeddingCollection: "ManagedCollisionEmbeddingCollection",
        }.get(type(module))
        fix = f"; wrap it in {other}" if other else ""
        raise TypeError(f"{owner} wraps an {kind.__name__}, got {type(module).__name__}{fix}")


class ManagedCollisionEmbeddingBagCollection(BaseManagedCollisionEmbeddingCollection):
    """Pooled embeddings (`KeyedTensor`) of raw ids (TorchRec's MC-EBC)."""

    def __init__(
        self,
        embedding_bag_collection: EmbeddingBagCollection,
        managed_collision_collection: ManagedCollisionCollection,
        return_remapped_features: bool = False,
        allow_in_place_embed_weight_update: bool = False,
    ) -> None:
        _check_kind(embedding_bag_collection, EmbeddingBagCollection, type(self).__name__)
        super().__init__(
            embedding_bag_collection,
            managed_collision_collection,
            return_remapped_features,
            allow_in_place_embed_weight_update,
        )

    @property
    def _embedding_bag_collection(self) -> EmbeddingBagCollection:
        module = self._embedding_module
        assert isinstance(module, EmbeddingBagCollection)
        return module
