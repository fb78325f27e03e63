"""Naive references and random inputs for the embedding tests (exposed as fixtures)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest
import torch

from shardrec_embedding import BaseEmbeddingConfig, EmbeddingBagConfig, PoolingType
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import random_lengths, seeded_generator


def random_kjt(
    tables: Sequence[BaseEmbeddingConfig],
    batch: int,
    seed: object,
    *,
    max_length: int = 4,
    weighted: bool = False,
    extra_keys: Sequence[str] = (),
    shuffle_keys: bool = True,
) -> KeyedJaggedTensor:
    """A KJT with every feature the tables read; a feature's ids fit every table reading it."""
    gen = seeded_generator("kjt", seed)
    rows: dict[str, int] = {}
    for t in tables:
        for f in t.feature_names:
            rows[f] = min(rows.get(f, t.num_embeddings), t.num_embeddings)
    for k in extra_keys:
        rows[k] = 1000
    keys = list(rows)
    if shuffle_keys:
        keys = [keys[i] for i in torch.randperm(len(keys), generator=gen).tolist()]
    lengths = [random_lengths(batch, max_length, gen) for _ in keys]
    values = [
        torch.randint(0, rows[k], (int(n.sum()),), generator=gen)
        for k, n in zip(keys, lengths, strict=True)
    ]
    weights = torch.rand(sum(int(v.numel()) for v in values), generator=gen) if weighted else None
    return KeyedJaggedTensor(
        keys=keys,
        values=torch.cat(values) if values else torch.zeros(0, dtype=torch.int64),
        lengths=torch.cat(lengths) if lengths else torch.zeros(0, dtype=torch.int64),
        weights=weights,
        stride=batch,
    )


def names_by_table(tables: Sequence[BaseEmbeddingConfig]) -> list[list[str]]:
    count: dict[str, int] = {}
    for t in tables:
        for f in t.feature_names:
            count[f] = count.get(f, 0) + 1
    return [[f if count[f] == 1 else f"{f}@{t.name}" for f in t.feature_names] for t in tables]


def naive_pooled(
    tables: Sequence[EmbeddingBagConfig],
    weights: dict[str, torch.Tensor],
    kjt: KeyedJaggedTensor,
) -> dict[str, torch.Tensor]:
    """Per-bag Python sum over `weight[id]` (times the id's weight), fp32, keyed like the EBC."""
    jts = kjt.to_dict()
    out: dict[str, torch.Tensor] = {}
    for t, names in zip(tables, names_by_table(tables), strict=True):
        w = weights[t.name].float()
        for f, name in zip(t.feature_names, names, strict=True):
            jt = jts[f]
            ids, lengths = jt.values().tolist(), jt.lengths().tolist()
            per_id = jt.weights_or_none()
            rows = []
            start = 0
            for n in lengths:
                acc = torch.zeros(t.embedding_dim)
                for p in range(start, start + n):
                    row = w[ids[p]]
                    acc = acc + (row * per_id[p] if per_id is not None else row)
                if t.pooling is PoolingType.MEAN and n > 0:
                    acc = acc / n
                rows.append(acc)
                start += n
            out[name] = torch.stack(rows) if rows else torch.zeros(0, t.embedding_dim)
    return out


def naive_sequence(
    tables: Sequence[BaseEmbeddingConfig],
    weights: dict[str, torch.Tensor],
    kjt: KeyedJaggedTensor,
) -> dict[str, torch.Tensor]:
    """Per-id rows `weight[id]`, fp32, keyed like the EC."""
    jts = kjt.to_dict()
    out: dict[str, torch.Tensor] = {}
    for t, names in zip(tables, names_by_table(tables), strict=True):
        w = weights[t.name].float()
        for f, name in zip(t.feature_names, names, strict=True):
            ids = jts[f].values().tolist()
            rows = [w[i] for i in ids]
            out[name] = torch.stack(rows) if rows else torch.zeros(0, t.embedding_dim)
    return out


@dataclass(frozen=True)
class Helpers:
    random_kjt: Callable[..., KeyedJaggedTensor]
    naive_pooled: Callable[..., dict[str, torch.Tensor]]
    naive_sequence: Callable[..., dict[str, torch.Tensor]]


@pytest.fixture
def helpers() -> Helpers:
    return Helpers(random_kjt=random_kjt, naive_pooled=naive_pooled, naive_sequence=naive_sequence)
