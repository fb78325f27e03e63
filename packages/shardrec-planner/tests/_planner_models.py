"""Small meta-device models and hand-made planner inputs for the planner's tests.

`make_ebc` builds shardrec's EmbeddingBagCollection when shardrec-embedding provides it, else a
stand-in with the same planner-visible surface (`embedding_bag_configs()`, weights at
`embedding_bags.<table>.weight`). `hand_shard` / `hand_option` build TorchRec-style sharding
options with estimates set by hand; `table_info` one table as our planner sees it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import nn

from shardrec_planner import (
    EmbeddingTableSharder,
    Perf,
    Shard,
    ShardingOption,
    Storage,
    TableInfo,
)

HAND_MODULE = ("m", nn.Module())
"""The (path, module) every hand-made option belongs to unless a test names another."""


@dataclasses.dataclass(frozen=True)
class StubConfig:
    name: str
    num_embeddings: int
    embedding_dim: int
    feature_names: list[str]


class StubEBC(nn.Module):
    """Planner-visible surface of an EmbeddingBagCollection, weights on the meta device."""

    def __init__(self, tables: Sequence[StubConfig]) -> None:
        super().__init__()
        self._configs = list(tables)
        self.embedding_bags = nn.ModuleDict()
        for t in tables:
            bag = nn.Module()
            bag.weight = nn.Parameter(torch.empty(t.num_embeddings, t.embedding_dim, device="meta"))
            self.embedding_bags[t.name] = bag

    def embedding_bag_configs(self) -> list[StubConfig]:
        return list(self._configs)


def make_ebc(spec: Sequence[tuple[str, int, int]], features_per_table: int = 1) -> nn.Module:
    """EBC on meta with tables (name, rows, dim); table t reads features t_f0, t_f1, ..."""
    configs = [
        StubConfig(name, rows, dim, [f"{name}_f{i}" for i in range(features_per_table)])
        for name, rows, dim in spec
    ]
    return StubEBC(configs)


def sharder(**kwargs: object) -> EmbeddingTableSharder:
    return EmbeddingTableSharder(StubEBC, **kwargs)  # type: ignore[arg-type]


def table_info(rows: int, dim: int, feature_names: Sequence[str] = ("t",)) -> TableInfo:
    """Pooled fp32 table "t" at the root module reading `feature_names`."""
    return TableInfo(
        module_path="",
        name="t",
        rows=rows,
        dim=dim,
        element_bytes=4,
        feature_names=tuple(feature_names),
        pooled=True,
    )


def hand_shard(
    size: list[int], hbm: int, perf: float, offset: list[int] | None = None, rank: int | None = None
) -> Shard:
    """A shard with `hbm` bytes of HBM and `perf` ms of forward compute (nothing else)."""
    return Shard(
        size=size,
        offset=offset or [0, 0],
        rank=rank,
        perf=Perf(fwd_compute=perf, fwd_comms=0, bwd_compute=0, bwd_comms=0),
        storage=Storage(hbm=hbm, ddr=0),
    )


def hand_option(
    name: str,
    sharding_type: str,
    shards: list[Shard],
    shape: tuple[int, int],
    *,
    module: tuple[str, nn.Module] = HAND_MODULE,
    compute_kernel: str = "fused",
    partition_by: str = "device",
    **kwargs: object,
) -> ShardingOption:
    """An option of a `shape` meta table read by one feature of pooling 1, batch 8;
    `kwargs` are further ShardingOption arguments (cache_params, is_pooled, ...)."""
    return ShardingOption(
        name=name,
        tensor=torch.empty(*shape, device="meta"),
        module=module,
        input_lengths=[1.0],
        batch_size=8,
        sharding_type=sharding_type,
        partition_by=partition_by,
        compute_kernel=compute_kernel,
        shards=shards,
        **kwargs,  # type: ignore[arg-type]
    )
