"""Small meta-device models for the planner's tests.

`make_ebc` builds shardrec's EmbeddingBagCollection when shardrec-embedding provides it, else a
stand-in with the same planner-visible surface (`embedding_bag_configs()`, weights at
`embedding_bags.<table>.weight`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import nn

from shardrec_planner import EmbeddingTableSharder


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
