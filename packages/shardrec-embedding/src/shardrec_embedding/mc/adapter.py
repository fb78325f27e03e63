"""`McEmbeddingCollectionAdapter` / `McEmbeddingBagCollectionAdapter` (TorchRec's `mc_adapter`).

Build a managed-collision collection from plain table configs: `zch_method="sort_zch"` gives
each table an `MCHManagedCollisionModule` (DistanceLFU, `eviction_interval` forwards),
`"mpzch"` a `HashZchManagedCollisionModule` (single TTL of `eviction_interval` hours, buckets
`mpzch_num_buckets` or the world size). `forward` returns only the embeddings; `parameters()`
only the tables'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from shardrec_embedding.configs import BaseEmbeddingConfig, EmbeddingBagConfig, EmbeddingConfig
from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_embedding.mc.base import ManagedCollisionModule
from shardrec_embedding.mc.collection import ManagedCollisionCollection
from shardrec_embedding.mc.embedding_modules import (
    ManagedCollisionEmbeddingBagCollection,
    ManagedCollisionEmbeddingCollection,
)
from shardrec_embedding.mc.hash_evictions import HashZchEvictionConfig, HashZchEvictionPolicyName
from shardrec_embedding.mc.hash_zch import HashZchManagedCollisionModule
from shardrec_embedding.mc.mch import MCHManagedCollisionModule
from shardrec_embedding.mc.policies import DistanceLFU_EvictionPolicy
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor

__all__ = ["McEmbeddingBagCollectionAdapter", "McEmbeddingCollectionAdapter"]

_METHODS = ("sort_zch", "mpzch")


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Settings:
    """The adapters' shared arguments (TorchRec's names)."""

    input_hash_size: int
    device: torch.device
    world_size: int
    eviction_interval: int
    zch_method: str
    mpzch_num_buckets: int | None
    mpzch_max_probe: int | None


_SETTINGS = frozenset(f.name for f in dataclasses.fields(_Settings))


def _collection(
    configs: Sequence[BaseEmbeddingConfig], settings: _Settings, *, cap_probe: bool
) -> ManagedCollisionCollection:
    return ManagedCollisionCollection(_mc_modules(configs, settings, cap_probe), configs)


def _mc_modules(
    configs: Sequence[BaseEmbeddingConfig], settings: _Settings, cap_probe: bool
) -> dict[str, ManagedCollisionModule]:
    input_hash_size, device = settings.input_hash_size, settings.device
    world_size, eviction_interval = settings.world_size, settings.eviction_interval
    zch_method = settings.zch_method
    mpzch_num_buckets, mpzch_max_probe = settings.mpzch_num_buckets, settings.mpzch_max_probe
    if zch_method not in _METHODS:
        raise ValueError(f"zch_method must be one of {list(_METHODS)}, got {zch_method!r}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(
            f"world_size must be an int >= 1 (the ranks the tables will be sharded over), got "
            f"{world_size!r}"
        )
    out: dict[str, ManagedCollisionModule] = {}
    for config in configs:
        if zch_method == "sort_zch":
            out[config.name] = MCHManagedCollisionModule(
                zch_size=config.num_embeddings,
                device=device,
                input_hash_size=input_hash_size,
                eviction_interval=eviction_interval,
                eviction_policy=DistanceLFU_EvictionPolicy(),
                name=config.name,
            )
            continue
        buckets = mpzch_num_buckets or world_size
        probe = mpzch_max_probe or 128
        if cap_probe:
            probe = min(probe, max(config.num_embeddings // world_size // buckets, 1))
        out[config.name] = HashZchManagedCollisionModule(
            zch_size=config.num_embeddings,
            device=device,
            total_num_buckets=buckets,
            max_probe=probe,
            input_hash_size=input_hash_size,
            name=config.name,
            eviction_policy_name=HashZchEvictionPolicyName.SINGLE_TTL_EVICTION,
            eviction_config=HashZchEvictionConfig(
                features=list(config.feature_names), single_ttl=eviction_interval
            ),
        )
    return out


class McEmbeddingCollectionAdapter(nn.Module):
    """An EmbeddingCollection over raw ids (TorchRec's adapter; arguments as TorchRec)."""

    def __init__(
        self,
        tables: list[EmbeddingConfig],
        input_hash_size: int,
        device: torch.device,
        world_size: int,
        eviction_interval: int = 1,
        allow_in_place_embed_weight_update: bool = False,
        zch_method: str = "",
        mpzch_num_buckets: int | None = 80,
        mpzch_max_probe: int | None = 100,
    ) -> None:
        super().__init__()
        ec = EmbeddingCollection(tables=tables, device=device)
        # the shared arguments above, by name
        settings = _Settings(**{k: v for k, v in locals().items() if k in _SETTINGS})
        self.mc_embedding_collection = ManagedCollisionEmbeddingCollection(
            ec,
            _collection(ec.embedding_configs(), settings, cap_probe=False),
            allow_in_place_embed_weight_update=allow_in_place_embed_weight_update,
        )
        self.remapped_ids: KeyedJaggedTensor | None = None

    def forward(self, input: KeyedJaggedTensor) -> dict[str, JaggedTensor]:
        out, self.remapped_ids = self.mc_embedding_collection(input)
        assert isinstance(out, dict)
        return out

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]:
        return self.mc_embedding_collection._embedding_module.parameters(recurse=recurse)

    def embedding_bag_configs(self) -> list[EmbeddingConfig]:
        return list(self.mc_embedding_collection._embedding_collection.embedding_configs())


class McEmbeddingBagCollectionAdapter(nn.Module):
    """An EmbeddingBagCollection over raw ids (TorchRec's adapter; arguments as TorchRec)."""

    def __init__(
        self,
        tables: list[EmbeddingBagConfig],
        input_hash_size: int,
        device: torch.device,
        world_size: int,
        eviction_interval: int = 1,
        allow_in_place_embed_weight_update: bool = False,
        zch_method: str = "",
        mpzch_num_buckets: int | None = 80,
        mpzch_max_probe: int | None = 100,
    ) -> None:
        super().__init__()
        ebc = EmbeddingBagCollection(tables=tables, device=device)
        settings = _Settings(**{k: v for k, v in locals().items() if k in _SETTINGS})
        # TorchRec's bag adapter (only) caps the probe at a bucket's rows per rank
        self.mc_embedding_bag_collection = ManagedCollisionEmbeddingBagCollection(
            ebc,
            _collection(ebc.embedding_bag_configs(), settings, cap_probe=True),
            allow_in_place_embed_weight_update=allow_in_place_embed_weight_update,
        )

    def forward(self, input_kjt: KeyedJaggedTensor) -> KeyedTensor:
        out, _ = self.mc_embedding_bag_collection(input_kjt)
        assert isinstance(out, KeyedTensor)
        return out

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]:
        return self.mc_embedding_bag_collection._embedding_module.parameters(recurse=recurse)

    def embedding_bag_configs(self) -> list[EmbeddingBagConfig]:
        return list(
            self.mc_embedding_bag_collection._embedding_bag_collection.embedding_bag_configs()
        )
