"""Quantized comms in a sharded EmbeddingCollection (2 real gloo ranks).

`EmbeddingCollectionSharder(qcomm_codecs_registry=get_qcomm_codecs_registry(...))`, as in
TorchRec: the sequence all-to-all (table_wise, column_wise, row_wise tables) sends every id's row
in the forward precision and its gradient in the backward precision. Checked against the
unsharded collection (forward rows within the forward codec's documented bound) and against the
same sharded training without codecs (tables after fused SGD steps, within the bound the backward
codec gives them); uneven batches per rank; a registry of FP32 is None (exact); a bad precision
and a bad registry are refused on every rank.
"""

from __future__ import annotations

import pytest
import torch
from _qcomm_common import CONFIGS, REL, abs_gradients, fill, shard

from shardrec_collectives.qcomm import CommType, QCommsConfig, get_qcomm_codecs_registry
from shardrec_embedding import EmbeddingCollection, EmbeddingConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_sharding import EmbeddingCollectionSharder
from shardrec_testing import RankContext, seeded_generator
from shardrec_testing.random_ids import random_ids

# (name, rows, dim, feature, sharding type)
TABLES = [
    ("s0", 11, 8, "f0", "table_wise"),
    ("s1", 9, 8, "f1", "column_wise"),
    ("s2", 13, 8, "f2", "row_wise"),
]
FEATURES = [f for *_, f, _ in TABLES]
LR = 0.1
STEPS = 2


def build() -> EmbeddingCollection:
    ec = EmbeddingCollection(
        [
            EmbeddingConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=[f])
            for n, r, d, f, _ in TABLES
        ]
    )
    fill(ec.embeddings, [(n, r, d) for n, r, d, *_ in TABLES], "qcomm-ec-weights")
    return ec


def batch(rank: int, step: int) -> tuple[KeyedJaggedTensor, torch.Tensor]:
    g = seeded_generator("qcomm-ec-batch", rank, step)
    size = 2 + rank + step  # uneven batches
    lengths, values = random_ids({f: r for _, r, _, f, _ in TABLES}, size, 3, g)
    coefficients = torch.randn(int(lengths.sum()), 8, generator=g)
    return KeyedJaggedTensor(FEATURES, values, lengths=lengths, stride=size), coefficients


def rows_of(out: dict[str, object]) -> torch.Tensor:
    return torch.cat([out[f].values() for f in FEATURES])  # type: ignore[attr-defined]


def run(ctx: RankContext, name: str | None) -> dict[str, object]:
    """This rank's first forward rows, the unsharded ones, and the tables (full, from the
    state_dict's local shards; NaN where another rank holds them) after training with the
    registry of CONFIGS[name] (None: exact)."""
    ec, plain = build(), build()
    kinds = [(n, kind) for n, *_, kind in TABLES]
    sharded = shard(ctx, EmbeddingCollectionSharder, ec, kinds, name, LR)
    first = None
    for step in range(STEPS):
        kjt, coefficients = batch(ctx.rank, step)
        out = sharded(kjt).wait()
        if step == 0:
            first = (rows_of(out).detach().clone(), rows_of(plain(kjt)).detach())
        (rows_of(out) * coefficients).sum().backward()
    tables = {}
    for key, value in sharded.state_dict().items():
        name_, rows = key.split(".")[1], {n: r for n, r, *_ in TABLES}[key.split(".")[1]]
        full = torch.full((rows, 8), float("nan"))
        for s in value.local_shards():
            (r0, c0), (nr, nc) = s.metadata.shard_offsets, s.metadata.shard_sizes
            full[r0 : r0 + nr, c0 : c0 + nc] = s.tensor
        tables[name_] = full
    return {"first": first, "tables": tables}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_quantized_sharded_ec(pool_factory, name: str) -> None:  # type: ignore[no-untyped-def]
    pool = pool_factory(2)
    config = CONFIGS[name]
    quantized = pool.run(run, name)
    exact = pool.run(run, None)
    biggest = max(build().embeddings[n].weight.abs().max() for n, *_ in TABLES)
    plain = build()
    batches = [batch(rank, step) for step in range(STEPS) for rank in range(2)]
    grads = abs_gradients(plain, plain.embeddings, batches, rows_of)  # type: ignore[arg-type]
    changed = False
    for rank in range(2):
        got, ref = quantized[rank]["first"]
        exact_rows, _ = exact[rank]["first"]
        torch.testing.assert_close(exact_rows, ref, rtol=0, atol=0)  # exact run: no rounding
        err = (got - ref).abs()
        if config.forward_precision is CommType.INT8:  # groups of 32 consecutive values
            limit = 2 * biggest / 510 + 1e-6
        else:
            limit = REL[config.forward_precision] * ref.abs() + 1e-6
        assert bool((err <= limit).all()), err.max()
        assert not torch.equal(got, ref)  # the codec ran
        # Linear loss: every id's gradient row is its coefficients, each off by at most
        # rel * |coefficient| after the backward codec.
        rel = REL[config.backward_precision]
        for table, full in quantized[rank]["tables"].items():
            held = ~full.isnan()
            diff = (full - exact[rank]["tables"][table]).abs()[held]
            assert bool((diff <= (rel * LR * grads[table] + 1e-6)[held]).all()), table
            changed = changed or bool((diff > 0).any())
    assert changed  # the gradients' codec ran


def refusals(ctx: RankContext) -> bool:
    """A bad precision and a bad registry raise on every rank, before any communication."""
    with pytest.raises(ValueError, match="forward_precision='fp12' is not a CommType"):
        QCommsConfig(forward_precision="fp12")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown key 'SEQUENCE'"):
        EmbeddingCollectionSharder(qcomm_codecs_registry={"SEQUENCE": object()})
    return True


def test_bad_precision_refused_on_every_rank(pool_factory) -> None:  # type: ignore[no-untyped-def]
    assert get_qcomm_codecs_registry(QCommsConfig()) is None  # FP32 both ways: exact
    assert pool_factory(2).run(refusals) == [True, True]
