"""The grouped quantized lookup (one kernel call per group of tables, ids shifted into the packed
buffer, output written in place) against one lookup per table, plus its output layout."""

from __future__ import annotations

import pytest
import torch
from _quant_cases import float_and_quantized, quantized
from torch.ao.quantization import PlaceholderObserver

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    PoolingType,
    QuantConfig,
    QuantEmbeddingBagCollection,
)
from shardrec_embedding.quant import SegmentMeta
from shardrec_jagged import KeyedJaggedTensor


def _tables(pooling: PoolingType) -> list[EmbeddingBagConfig]:
    # same dim: one group of four tables, rows packed at offsets 0, 30, 70, 95
    return [
        EmbeddingBagConfig(
            name=f"t{i}",
            num_embeddings=rows,
            embedding_dim=8,
            feature_names=[f"f{i}"],
            pooling=pooling,
        )
        for i, rows in enumerate([30, 40, 25, 50])
    ]


def _kjt(
    keys: list[str], batch: int, weighted: bool, seed: int, id_dtype: torch.dtype
) -> KeyedJaggedTensor:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (len(keys) * batch,), generator=gen)
    if batch > 0:
        lengths[0] = 0  # an empty bag in every non-empty batch
    values = torch.randint(0, 25, (int(lengths.sum()),), generator=gen).to(id_dtype)
    weights = torch.rand(values.numel(), generator=gen) if weighted else None
    return KeyedJaggedTensor(
        keys=keys, values=values, lengths=lengths, weights=weights, stride=batch
    )


def _per_table(
    ebc: EmbeddingBagCollection, dtype: torch.dtype, kjt: KeyedJaggedTensor
) -> torch.Tensor:
    """Reference: one quantized collection (one group, one kernel call) per table, then `cat`.
    Row-wise quantization is per row, so each table's rows are identical to the grouped ones."""
    blocks = []
    for t in ebc.embedding_bag_configs():
        single = EmbeddingBagCollection([t], is_weighted=ebc.is_weighted())
        single.embedding_bags[t.name].weight.data.copy_(ebc.embedding_bags[t.name].weight)
        blocks.append(quantized(single, dtype)(kjt).values())
    return torch.cat(blocks, dim=1)


@pytest.mark.parametrize("dtype", [torch.int8, torch.quint4x2, torch.float16])
@pytest.mark.parametrize("key_order", ["table", "shuffled"])
def test_grouped_equals_per_table(
    dtype: torch.dtype, pooled_case: tuple[PoolingType, bool], key_order: str
) -> None:
    pooling, weighted = pooled_case
    ebc, grouped = float_and_quantized(_tables(pooling), weighted, dtype)
    assert len(grouped.lookup.groups) == 1
    keys = ["f0", "f1", "f2", "f3"] if key_order == "table" else ["f2", "f0", "f3", "f1"]
    for seed, batch, id_dtype in [(0, 6, torch.int64), (1, 1, torch.int32), (2, 0, torch.int64)]:
        kjt = _kjt(keys, batch, weighted, seed, id_dtype)
        got = grouped(kjt).values()
        want = _per_table(ebc, dtype, kjt)
        assert got.shape == (batch, 32)
        # same rows, same per-bag summation order: bit-equal
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_mixed_groups_interleaved_in_output() -> None:
    # groups: dim 8 INT8 {t0, t2}, dim 4 INT8 {t1}, dim 8 FP16 {t3}; output order t0 t1 t2 t3
    torch.manual_seed(1)
    tables = [
        EmbeddingBagConfig(name="t0", num_embeddings=30, embedding_dim=8, feature_names=["a"]),
        EmbeddingBagConfig(name="t1", num_embeddings=30, embedding_dim=4, feature_names=["b"]),
        EmbeddingBagConfig(name="t2", num_embeddings=30, embedding_dim=8, feature_names=["a", "c"]),
        EmbeddingBagConfig(name="t3", num_embeddings=30, embedding_dim=8, feature_names=["d"]),
    ]
    ebc = EmbeddingBagCollection(tables)
    ebc.qconfig = QuantConfig(
        activation=PlaceholderObserver.with_args(dtype=torch.float),
        weight=PlaceholderObserver.with_args(dtype=torch.int8),
        per_table_weight_dtype={"t3": torch.float16},
    )
    grouped = QuantEmbeddingBagCollection.from_float(ebc)
    assert len(grouped.lookup.groups) == 3
    kjt = _kjt(["d", "c", "b", "a"], 5, False, 3, torch.int64)
    got = grouped(kjt).to_dict()
    for t in tables:
        single = EmbeddingBagCollection([t])
        single.embedding_bags[t.name].weight.data.copy_(ebc.embedding_bags[t.name].weight)
        want = quantized(single, torch.float16 if t.name == "t3" else torch.int8)(kjt).to_dict()
        for f in t.feature_names:
            name = f if f != "a" else f"a@{t.name}"
            torch.testing.assert_close(got[name], want[f], rtol=0, atol=0)


def test_output_runs_of_segments() -> None:
    # segments in output order: a@t0 (g0), b (g1), a@t2 (g0), c (g0), d (g2)
    meta = SegmentMeta(
        features=["a", "b", "a", "c", "d"],
        tables=["t0", "t1", "t2", "t2", "t3"],
        rows=[30, 30, 30, 30, 30],
        groups=[0, 1, 0, 0, 2],
        row_offsets=[0, 0, 30, 30, 0],
        group_segments=[[0, 2, 3], [1], [4]],
        dims=[8, 4, 8, 8, 8],
    )
    assert meta.total_dim == 36
    # (first position in group, segments, first column), flattened per group
    assert meta.group_runs == [[0, 1, 0, 1, 2, 12], [0, 1, 8], [0, 1, 28]]
    assert meta.no_shift == [False, True, True]


@pytest.mark.parametrize("dtype", [torch.int8, torch.float16])
def test_half_output_is_the_rounded_fp32_output(dtype: torch.dtype) -> None:
    torch.manual_seed(2)
    ebc = EmbeddingBagCollection(_tables(PoolingType.SUM))
    fp32 = quantized(ebc, dtype)
    fp16 = quantized(ebc, dtype, torch.half)
    kjt = _kjt(["f0", "f1", "f2", "f3"], 4, False, 4, torch.int64)
    out = fp16(kjt).values()
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, fp32(kjt).values().half(), rtol=0, atol=0)


def test_scripted_grouped_lookup_equals_eager() -> None:
    torch.manual_seed(3)
    ebc = EmbeddingBagCollection(_tables(PoolingType.SUM), is_weighted=True)
    qebc = quantized(ebc, torch.quint4x2)
    keys = ["f3", "f1", "f0", "f2"]
    scripted = torch.jit.script(qebc.scriptable(keys))
    kjt = _kjt(keys, 5, True, 5, torch.int64)
    torch.testing.assert_close(
        scripted(kjt.values(), kjt.lengths(), kjt.weights()), qebc(kjt).values(), rtol=0, atol=0
    )


def test_out_of_range_id_in_a_packed_group_names_its_table() -> None:
    # id 35 is a valid row of the packed buffer (t1's rows start at 30) but not of t0
    ebc = EmbeddingBagCollection(_tables(PoolingType.SUM))
    qebc = quantized(ebc, torch.int8)
    kjt = KeyedJaggedTensor.from_lengths_sync(
        ["f0", "f1", "f2", "f3"], torch.tensor([35, 1, 2, 3]), torch.tensor([1, 1, 1, 1])
    )
    with pytest.raises(IndexError, match=r"feature 'f0' id 35 .* table 't0' with 30 rows"):
        qebc(kjt)
