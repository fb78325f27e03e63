"""Sharders of the managed-collision modules (TorchRec's `mc_modules` / `mc_embeddingbag` /
`mc_embedding` sharders), as the planner sees them.

TorchRec shards an MC collection row-wise only: each rank owns a contiguous part of the raw-id
range and the matching rows. These sharders offer exactly that (the intersection of the
embedding sharder's types and the MC sharder's `row_wise`) with TorchRec's compute kernels, so
the planner enumerates and prices MC tables as TorchRec does; their storage adds the id map and
the policy metadata per row (`MCH: 16 + 8 x metadata bytes`, `HashZch: 8 + 4 bytes`).

The MC EmbeddingBagCollection and EmbeddingCollection shard row-wise and table-wise
(`mc.sharded`); the bare collection's `shard` raises `NotImplementedError` (docs/porting.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, TypeVar

import torch
from torch import nn

from shardrec_collectives import ShardingEnv
from shardrec_embedding.mc import (
    BaseManagedCollisionEmbeddingCollection,
    ManagedCollisionCollection,
    ManagedCollisionEmbeddingBagCollection,
    ManagedCollisionEmbeddingCollection,
)
from shardrec_planner import EmbeddingComputeKernel, ParameterSharding, ShardingType
from shardrec_planner.sharder_data import BaseEmbeddingSharder
from shardrec_sharding.embedding import EmbeddingCollectionSharder
from shardrec_sharding.embeddingbag import EmbeddingBagCollectionSharder
from shardrec_sharding.mc.sharded import (
    ShardedManagedCollisionEmbeddingBagCollection,
    ShardedManagedCollisionEmbeddingCollection,
)

__all__ = [
    "BaseManagedCollisionEmbeddingCollectionSharder",
    "ManagedCollisionCollectionSharder",
    "ManagedCollisionEmbeddingBagCollectionSharder",
    "ManagedCollisionEmbeddingCollectionSharder",
]

_MC_KERNELS = (
    EmbeddingComputeKernel.FUSED,
    EmbeddingComputeKernel.FUSED_UVM_CACHING,
    EmbeddingComputeKernel.FUSED_UVM,
    EmbeddingComputeKernel.KEY_VALUE,
)


def _mc_kernels(compute_device_type: str) -> list[str]:
    """TorchRec's MC kernels on cuda; on other devices `fused` (what runs there)."""
    if compute_device_type == "cuda":
        return [kernel.value for kernel in _MC_KERNELS]
    return [EmbeddingComputeKernel.FUSED.value]


def _not_yet(module: nn.Module) -> NotImplementedError:
    return NotImplementedError(
        f"sharding a {type(module).__name__} is not implemented yet in shardrec; run the module "
        "unsharded (leave it out of DistributedModelParallel's sharders) or shard an "
        "EmbeddingBagCollection on pre-mapped ids (docs/dynamic.md)"
    )


class ManagedCollisionCollectionSharder:
    """The MC collection's sharder: row-wise only (TorchRec's ManagedCollisionCollectionSharder)."""

    @property
    def module_type(self) -> type[nn.Module]:
        return ManagedCollisionCollection

    @property
    def fused_params(self) -> Mapping[str, object] | None:
        return None

    def sharding_types(self, compute_device_type: str) -> list[str]:
        return [ShardingType.ROW_WISE.value]

    def compute_kernels(self, sharding_type: str, compute_device_type: str) -> list[str]:
        return _mc_kernels(compute_device_type)

    def shardable_parameters(self, module: nn.Module) -> dict[str, nn.Parameter]:
        return {}

    def shard(
        self,
        module: nn.Module,
        params: Mapping[str, ParameterSharding],
        env: ShardingEnv,
        device: torch.device | str | None = None,
    ) -> nn.Module:
        raise _not_yet(module)


M = TypeVar("M", bound=nn.Module)


class BaseManagedCollisionEmbeddingCollectionSharder(Generic[M]):
    """An embedding sharder and the MC sharder together: the sharding types both offer.

    Generic in the module type, as TorchRec's: user code subclasses
    `BaseManagedCollisionEmbeddingCollectionSharder[ManagedCollisionEmbeddingBagCollection]`; the
    parameter is for type checkers only.
    """

    _module: type[BaseManagedCollisionEmbeddingCollection] = BaseManagedCollisionEmbeddingCollection
    # what `shard` builds (None: sharding this module kind is not implemented), and the
    # embedding sharder used when the caller gives none
    _sharded_cls: type[nn.Module] | None = None
    _e_sharder_cls: type[EmbeddingBagCollectionSharder | EmbeddingCollectionSharder] = (
        EmbeddingBagCollectionSharder
    )

    def __init__(
        self,
        e_sharder: EmbeddingBagCollectionSharder | EmbeddingCollectionSharder | None = None,
        mc_sharder: ManagedCollisionCollectionSharder | None = None,
        qcomm_codecs_registry: Mapping[str, object] | None = None,
        fused_params: Mapping[str, object] | None = None,
    ) -> None:
        if qcomm_codecs_registry:
            raise ValueError(
                f"qcomm_codecs_registry {dict(qcomm_codecs_registry)!r}: the "
                "managed-collision sharders apply no quantized-comm codecs yet; pass None"
            )
        self._e_sharder = e_sharder or self._e_sharder_cls(fused_params=fused_params)
        self._mc_sharder = mc_sharder or ManagedCollisionCollectionSharder()

    @property
    def module_type(self) -> type[nn.Module]:
        return self._module

    @property
    def fused_params(self) -> Mapping[str, object] | None:
        return self._e_sharder.fused_params

    def sharding_types(self, compute_device_type: str) -> list[str]:
        mc = set(self._mc_sharder.sharding_types(compute_device_type))
        return [t for t in self._e_sharder.sharding_types(compute_device_type) if t in mc]

    def compute_kernels(self, sharding_type: str, compute_device_type: str) -> list[str]:
        return _mc_kernels(compute_device_type)

    def shardable_parameters(self, module: nn.Module) -> dict[str, nn.Parameter]:
        if not isinstance(module, self._module):
            raise TypeError(f"expected a {self._module.__name__}, got {type(module).__name__}")
        return self._e_sharder.shardable_parameters(module._embedding_module)

    def shard(
        self,
        module: nn.Module,
        params: Mapping[str, ParameterSharding],
        env: ShardingEnv,
        device: torch.device | str | None = None,
    ) -> nn.Module:
        if self._sharded_cls is None:
            raise _not_yet(module)
        if not isinstance(module, self._module):
            raise TypeError(f"expected a {self._module.__name__}, got {type(module).__name__}")
        return self._sharded_cls(module, params, env, device, self._e_sharder)


class ManagedCollisionEmbeddingBagCollectionSharder(
    BaseManagedCollisionEmbeddingCollectionSharder[ManagedCollisionEmbeddingBagCollection]
):
    """Sharder of `ManagedCollisionEmbeddingBagCollection` (TorchRec's name and arguments).

    Shards row-wise and table-wise (`ShardedManagedCollisionEmbeddingBagCollection`); the
    planner is offered row-wise, as TorchRec's.
    """

    _module = ManagedCollisionEmbeddingBagCollection
    _sharded_cls = ShardedManagedCollisionEmbeddingBagCollection
    _e_sharder_cls = EmbeddingBagCollectionSharder

    def __init__(
        self,
        ebc_sharder: EmbeddingBagCollectionSharder | None = None,
        mc_sharder: ManagedCollisionCollectionSharder | None = None,
        fused_params: Mapping[str, object] | None = None,
        qcomm_codecs_registry: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(ebc_sharder, mc_sharder, qcomm_codecs_registry, fused_params)


class ManagedCollisionEmbeddingCollectionSharder(
    BaseManagedCollisionEmbeddingCollectionSharder[ManagedCollisionEmbeddingCollection]
):
    """Sharder of `ManagedCollisionEmbeddingCollection` (TorchRec's name and arguments); shards
    row-wise and table-wise (`ShardedManagedCollisionEmbeddingCollection`)."""

    _module = ManagedCollisionEmbeddingCollection
    _sharded_cls = ShardedManagedCollisionEmbeddingCollection
    _e_sharder_cls = EmbeddingCollectionSharder

    def __init__(
        self,
        ec_sharder: EmbeddingCollectionSharder | None = None,
        mc_sharder: ManagedCollisionCollectionSharder | None = None,
        fused_params: Mapping[str, object] | None = None,
        qcomm_codecs_registry: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(ec_sharder, mc_sharder, qcomm_codecs_registry, fused_params)


# TorchRec's `isinstance(sharder, BaseEmbeddingSharder)` holds without a base class.
BaseEmbeddingSharder.register(BaseManagedCollisionEmbeddingCollectionSharder)
