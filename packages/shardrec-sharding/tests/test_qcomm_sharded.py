"""Quantized comms in a sharded EmbeddingBagCollection (2 real gloo ranks).

`EmbeddingBagCollectionSharder(qcomm_codecs_registry=get_qcomm_codecs_registry(...))`, as in
TorchRec: the pooled all-to-all of table_wise / column_wise tables and the reduce-scatter of
row_wise tables send their rows (partial sums) in the forward precision and their gradients in
the backward precision. Checked against the unsharded collection (forward, within the codec's
documented bound: per value for the all-to-all, per partial sum for the reduce-scatter) and
against the same sharded training without codecs (tables after 3 fused SGD steps, within the
bound the backward codec gives them), unweighted and weighted, uneven batches, and FP32
configs change nothing.
"""

from __future__ import annotations

import pytest
import torch
from _qcomm_common import CONFIGS, REL, fill, shard
from _qcomm_common import abs_gradients as abs_gradients_of

from shardrec_collectives.qcomm import CommOp, CommType, QCommsConfig, get_qcomm_codecs_registry
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import ShardingType
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_sharding.registry import POOLED_COMM_OPS, SEQUENCE_COMM_OPS
from shardrec_testing import RankContext, seeded_generator
from shardrec_testing.random_ids import random_ids

# (name, rows, dim, features, sharding type)
TABLES = [
    ("t0", 20, 8, ["f0"], "table_wise"),
    ("t1", 16, 12, ["f1"], "column_wise"),
    ("t2", 24, 4, ["f2"], "row_wise"),
]
FEATURES = ["f0", "f1", "f2"]
LR = 0.1
STEPS = 3


def build(weighted: bool = False) -> EmbeddingBagCollection:
    ebc = EmbeddingBagCollection(
        [
            EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=f)
            for n, r, d, f, _ in TABLES
        ],
        is_weighted=weighted,
    )
    fill(ebc.embedding_bags, [(n, r, d) for n, r, d, *_ in TABLES], "qcomm-sharded-weights")
    return ebc


def batch(rank: int, step: int, weighted: bool = False) -> tuple[KeyedJaggedTensor, torch.Tensor]:
    """Uneven batches; weighted: per-id weights in [0.5, 1.5) (positive, so the pooled |W|
    still bounds every partial sum)."""
    g = seeded_generator("qcomm-sharded-batch", rank, step)
    size = 3 + rank
    lengths, values = random_ids({"f0": 20, "f1": 16, "f2": 24}, size, 3, g)
    coefficients = torch.randn(size, 8 + 12 + 4, generator=g)
    weights = torch.rand(values.numel(), generator=g) + 0.5 if weighted else None
    return KeyedJaggedTensor(FEATURES, values, weights, lengths, stride=size), coefficients


def run(ctx: RankContext, name: str | None, weighted: bool = False) -> dict[str, object]:
    """This rank's first forward output, its unsharded reference, and the tables (gathered
    through state_dict) after training with the registry of CONFIGS[name] (None: exact)."""
    ebc = build(weighted)
    plain = build(weighted)
    kinds = [(n, kind) for n, *_, kind in TABLES]
    sharded = shard(ctx, EmbeddingBagCollectionSharder, ebc, kinds, name, LR)
    first = None
    for step in range(STEPS):
        kjt, coefficients = batch(ctx.rank, step, weighted)
        out = sharded(kjt).wait()
        if step == 0:
            first = (
                out.values().detach().clone(),
                plain(kjt).values().detach(),
                absolute(plain)(kjt).values().detach(),
            )
        (out.values() * coefficients).sum().backward()
    tables = {}
    for key, value in sharded.state_dict().items():
        shards = value.local_shards()
        tables[key] = [(tuple(s.metadata.shard_offsets), s.tensor.clone()) for s in shards]
    return {"first": first, "tables": tables}


def absolute(ebc: EmbeddingBagCollection) -> EmbeddingBagCollection:
    """`ebc` with every weight replaced by its absolute value (a copy): its pooled output
    bounds every partial sum of the reduce-scatter."""
    out = build(ebc.is_weighted())
    with torch.no_grad():
        for n, *_ in TABLES:
            out.embedding_bags[n].weight.copy_(ebc.embedding_bags[n].weight.abs())
    return out


def columns_of(kind: str) -> slice:
    start = 0
    for _, _, d, _, k in TABLES:
        if k == kind:
            return slice(start, start + d)
        start += d
    raise AssertionError(kind)


@pytest.mark.parametrize("name", [*CONFIGS, "fp32", "bf16/fp16 weighted"])
def test_quantized_sharded_ebc(pool_factory, name: str) -> None:  # type: ignore[no-untyped-def]
    pool = pool_factory(2)
    weighted = name.endswith(" weighted")
    name = name.removesuffix(" weighted")
    if name == "fp32":  # a registry of FP32 both ways is None: the exact run
        assert get_qcomm_codecs_registry(QCommsConfig()) is None
        return
    config = CONFIGS[name]
    quantized = pool.run(run, name, weighted)
    exact = pool.run(run, None, weighted)
    for rank in range(2):
        got, ref, abs_ref = quantized[rank]["first"]
        exact_out, *_ = exact[rank]["first"]
        torch.testing.assert_close(exact_out, ref)  # the exact run equals the unsharded one
        # row_wise columns travel by reduce-scatter: each rank's partial sum p_r is encoded, the
        # decoded ones summed in float32: |error| <= rel * sum_r |p_r| <= rel * |W| pooled
        # (INT8: (max - min) / 510 <= 2 max|p_r| / 510 per partial, 2 partials)
        rows = columns_of("row_wise")
        err = (got[:, rows] - ref[:, rows]).abs()
        if config.forward_precision is CommType.INT8:
            limit = 2 * 2 * abs_ref[:, rows].max() / 510 + 1e-5
        else:
            limit = REL[config.forward_precision] * abs_ref[:, rows] + 1e-5
        assert bool((err <= limit).all()), ("row_wise", err.max())
        assert not torch.equal(got[:, rows], ref[:, rows])  # the reduce-scatter's codec ran
        for kind in ("table_wise", "column_wise"):
            cols = columns_of(kind)
            err = (got[:, cols] - ref[:, cols]).abs()
            if config.forward_precision is CommType.INT8:  # groups of 32 consecutive values
                limit = (ref.abs().max() * 2) / 510 + 1e-6
            else:
                limit = REL[config.forward_precision] * ref[:, cols].abs() + 1e-6
            assert bool((err <= limit).all()), (kind, err.max())
        assert not torch.equal(got, ref)  # the codec ran
        # Tables after training: only the gradients' codec separates them from the exact run.
        # The loss is linear, so a number's update is LR * the sum of the coefficients that
        # reach it; each coefficient is off by at most rel * |coefficient|: the bound is
        # rel * LR * (the gradient of the same loss with |coefficients|).
        rel = REL[config.backward_precision]
        limit = {k: rel * LR * g + 1e-6 for k, g in abs_gradients(weighted).items()}
        for key, shards in quantized[rank]["tables"].items():
            for (offsets, tensor), (offsets_e, tensor_e) in zip(
                shards, exact[rank]["tables"][key], strict=True
            ):
                assert offsets == offsets_e
                (r0, c0), (r, c) = offsets, tensor.shape
                err = (tensor - tensor_e).abs()
                assert bool((err <= limit[key][r0 : r0 + r, c0 : c0 + c]).all()), key


def abs_gradients(weighted: bool) -> dict[str, torch.Tensor]:
    """Per table, the gradient of sum(|coefficients| * output) over every rank and step."""
    plain = build(weighted)
    batches = [batch(rank, step, weighted) for step in range(STEPS) for rank in range(2)]
    grads = abs_gradients_of(plain, plain.embedding_bags, batches, lambda out: out.values())  # type: ignore[attr-defined]
    return {f"embedding_bags.{n}.weight": g for n, g in grads.items()}


def test_each_output_dist_takes_its_registry_entry() -> None:
    """Which `CommOp` entry each sharding type's output dist applies (TorchRec's mapping)."""
    a2a, rs = CommOp.POOLED_EMBEDDINGS_ALL_TO_ALL, CommOp.POOLED_EMBEDDINGS_REDUCE_SCATTER
    t = ShardingType
    assert dict(POOLED_COMM_OPS) == {
        t.DATA_PARALLEL: None,
        t.TABLE_WISE: a2a,
        t.COLUMN_WISE: a2a,
        t.TABLE_COLUMN_WISE: a2a,
        t.ROW_WISE: rs,
        t.TABLE_ROW_WISE: rs,
    }
    seq = CommOp.SEQUENCE_EMBEDDINGS_ALL_TO_ALL
    assert dict(SEQUENCE_COMM_OPS) == {
        k: None if v is None else seq for k, v in POOLED_COMM_OPS.items()
    }
