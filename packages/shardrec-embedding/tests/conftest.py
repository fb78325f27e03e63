"""Naive references and random inputs for the embedding tests (exposed as fixtures); the tests'
helper module (`_quant_cases`) importable under --import-mode=importlib."""

from __future__ import annotations

import pathlib
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pytest
import torch

from shardrec_embedding import BaseEmbeddingConfig, EmbeddingBagConfig, PoolingType
from shardrec_embedding._grouping import embedding_names_by_table
from shardrec_embedding.fused.lookup import fused_update
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor
from shardrec_optim import FusedOptimSpec, init_state
from shardrec_testing import random_lengths, seeded_generator, tolerance

_HERE = str(pathlib.Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

_Table = TypeVar("_Table", bound=BaseEmbeddingConfig)


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


def _table_features(
    tables: Sequence[_Table], weights: dict[str, torch.Tensor], kjt: KeyedJaggedTensor
) -> Iterator[tuple[_Table, str, torch.Tensor, JaggedTensor]]:
    """(table, output key, fp32 weight, the feature's JaggedTensor) per table and feature."""
    jts = kjt.to_dict()
    # The output keys follow the package's naming rule (`feature@table` for a shared feature),
    # which the collections' tests pin with literal keys.
    for t, names in zip(tables, embedding_names_by_table(tables), strict=True):
        w = weights[t.name].float()
        for f, name in zip(t.feature_names, names, strict=True):
            yield t, name, w, jts[f]


def naive_pooled(
    tables: Sequence[EmbeddingBagConfig],
    weights: dict[str, torch.Tensor],
    kjt: KeyedJaggedTensor,
) -> dict[str, torch.Tensor]:
    """Per-bag Python sum over `weight[id]` (times the id's weight), fp32, keyed like the EBC."""
    out: dict[str, torch.Tensor] = {}
    for t, name, w, jt in _table_features(tables, weights, kjt):
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
        out[name] = _stacked(rows, t.embedding_dim)
    return out


def naive_sequence(
    tables: Sequence[BaseEmbeddingConfig],
    weights: dict[str, torch.Tensor],
    kjt: KeyedJaggedTensor,
) -> dict[str, torch.Tensor]:
    """Per-id rows `weight[id]`, fp32, keyed like the EC."""
    return {
        name: _stacked([w[i] for i in jt.values().tolist()], t.embedding_dim)
        for t, name, w, jt in _table_features(tables, weights, kjt)
    }


def _stacked(rows: list[torch.Tensor], dim: int) -> torch.Tensor:
    """`(len(rows), dim)`; no rows: an empty `(0, dim)`."""
    return torch.stack(rows) if rows else torch.zeros(0, dim)


def fused_batch(
    seed: int, rows: int, dim: int, bags: int, weighted: bool, max_length: int = 5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """One table's (ids, offsets `(bags + 1,)`, per-sample weights or None, output gradient
    `(bags, dim)`) for the fused updates: heavy duplicates (ids from a third of the rows),
    every fourth bag empty."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, max_length + 1, (bags,), generator=gen)
    lengths[::4] = 0
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    n = int(offsets[-1])
    ids = torch.randint(0, max(1, rows // 3), (n,), generator=gen)
    psw = torch.rand(n, generator=gen) * 2 - 0.5 if weighted else None
    return ids, offsets, psw, torch.randn(bags, dim, generator=gen)


def backend_matches_torch_over_steps(
    backend: str,
    spec: FusedOptimSpec,
    pooling: PoolingType,
    weighted: bool,
    *,
    rows: int,
    dim: int,
    bags: int,
    max_length: int = 5,
    tol: tuple[float, float] = tolerance(torch.float32),
) -> None:
    """Four fused updates of one table by `backend` and by the torch reference, from the same
    weight and `fused_batch`es: weights and every state tensor agree after each step (within
    `tol` = (rtol, atol)), and the weight moved."""
    weight = torch.randn(rows, dim, generator=torch.Generator().manual_seed(7))
    w_torch, w_other = weight.clone(), weight.clone()
    st_torch = init_state(spec.optimizer, rows, dim)
    st_other = init_state(spec.optimizer, rows, dim)
    rtol, atol = tol
    for step in range(1, 5):
        ids, offsets, psw, grad_out = fused_batch(step, rows, dim, bags, weighted, max_length)
        args = (spec, ids, offsets, psw, pooling, grad_out, spec.learning_rate, step)
        fused_update(w_torch, st_torch, *args, backend="torch")
        fused_update(w_other, st_other, *args, backend=backend)
        torch.testing.assert_close(w_other, w_torch, rtol=rtol, atol=atol)
        for name in st_torch:
            torch.testing.assert_close(st_other[name], st_torch[name], rtol=rtol, atol=atol)
    assert not torch.equal(w_other, weight)


@dataclass(frozen=True)
class Helpers:
    random_kjt: Callable[..., KeyedJaggedTensor]
    naive_pooled: Callable[..., dict[str, torch.Tensor]]
    naive_sequence: Callable[..., dict[str, torch.Tensor]]
    fused_batch: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]]
    backend_matches_torch_over_steps: Callable[..., None]


@pytest.fixture
def helpers() -> Helpers:
    return Helpers(
        random_kjt=random_kjt,
        naive_pooled=naive_pooled,
        naive_sequence=naive_sequence,
        fused_batch=fused_batch,
        backend_matches_torch_over_steps=backend_matches_torch_over_steps,
    )


@pytest.fixture(
    params=[(PoolingType.SUM, False), (PoolingType.SUM, True), (PoolingType.MEAN, False)],
    ids=["sum", "weighted-sum", "mean"],
)
def pooled_case(request: pytest.FixtureRequest) -> tuple[PoolingType, bool]:
    """(pooling, weighted): the cases every pooled-lookup test covers (a MEAN bag is unweighted)."""
    case: tuple[PoolingType, bool] = request.param
    return case
