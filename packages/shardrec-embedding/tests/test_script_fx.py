"""The collections under torch.jit.script, torch.fx and meta: the same outputs as eager (which
the other test files check against naive loops), and TorchRec's initial-weight stream."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
    FeatureProcessedEmbeddingBagCollection,
    PoolingType,
    PositionWeightedModule,
    PositionWeightedModuleCollection,
)
from shardrec_jagged import KeyedJaggedTensor, symbolic_trace
from shardrec_testing import assert_close

# (name, rows, dim, features, pooling): "f1" is read by two tables, one of them MEAN.
_BAG_SPECS = [
    ("t1", 10, 3, ["f1", "f3"], PoolingType.SUM),
    ("t2", 7, 4, ["f1"], PoolingType.MEAN),
    ("t3", 5, 2, ["f2"], PoolingType.SUM),
]


def _bag_tables() -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name=name, num_embeddings=rows, embedding_dim=dim, feature_names=feats, pooling=pool
        )
        for name, rows, dim, feats, pool in _BAG_SPECS
    ]


def _forms(module: torch.nn.Module, *, direct: bool = True) -> list[torch.nn.Module]:
    """Traced, traced then scripted, and (direct) scripted."""
    traced = symbolic_trace(module)
    return [traced, torch.jit.script(traced)] + ([torch.jit.script(module)] if direct else [])


@pytest.mark.parametrize("weighted", [False, True])
def test_ebc_scripted_and_traced_match_eager(helpers: Any, weighted: bool) -> None:
    tables = _bag_tables()
    if weighted:
        tables = [t for t in tables if t.pooling is PoolingType.SUM]
    ebc = EmbeddingBagCollection(tables, is_weighted=weighted)
    kjt = helpers.random_kjt(
        tables, 5, ("script-ebc", weighted), weighted=weighted, extra_keys=["x"]
    )
    want = ebc(kjt)
    for form in _forms(ebc):
        got = form(kjt)
        assert got.keys() == want.keys()
        assert got.length_per_key() == want.length_per_key()
        assert_close(got.values(), want.values())


def test_ec_scripted_and_traced_match_eager(helpers: Any) -> None:
    tables = [
        EmbeddingConfig(name="t1", num_embeddings=10, embedding_dim=3, feature_names=["f1", "f2"]),
        EmbeddingConfig(name="t2", num_embeddings=6, embedding_dim=3, feature_names=["f2"]),
    ]
    ec = EmbeddingCollection(tables, need_indices=True)
    kjt = helpers.random_kjt(tables, 4, "script-ec")
    want = ec(kjt)
    for form in _forms(ec):
        got = form(kjt)
        assert list(got) == list(want)
        for k, jt in want.items():
            assert_close(got[k].values(), jt.values())
            assert torch.equal(got[k].lengths(), jt.lengths())
            assert torch.equal(got[k].weights(), jt.weights())


def test_feature_processed_forms_match_eager(helpers: Any) -> None:
    tables = [t for t in _bag_tables() if t.pooling is PoolingType.SUM]
    kjt = helpers.random_kjt(tables, 4, "script-fp", max_length=3)
    for processors in (
        {
            "f1": PositionWeightedModule(3),
            "f3": PositionWeightedModule(4),
            "f2": PositionWeightedModule(3),
        },
        PositionWeightedModuleCollection({"f1": 3, "f2": 5}),
    ):
        for p in torch.nn.ModuleList(
            list(processors.values()) if isinstance(processors, dict) else [processors]
        ).parameters():
            with torch.no_grad():
                p.copy_(torch.linspace(0.5, 2.0, p.numel()))
        fp = FeatureProcessedEmbeddingBagCollection(
            EmbeddingBagCollection(tables, is_weighted=True),
            processors,  # type: ignore[arg-type]  # both forms under test
        )
        want = fp(kjt)
        # As TorchRec's, the FP-EBC scripts once traced (its forward branches on its
        # processors' type).
        for form in _forms(fp, direct=False):
            assert_close(form(kjt).values(), want.values())
        first, ebc = fp.split()
        assert_close(ebc(first(kjt)).values(), want.values())


def test_meta_collections_give_shapes_without_data() -> None:
    ebc = EmbeddingBagCollection(_bag_tables(), device="meta")
    kjt = KeyedJaggedTensor(
        keys=["f1", "f2", "f3"],
        values=torch.tensor([1, 2, 3, 4]),
        lengths=torch.tensor([1, 1, 0, 1, 0, 1]),
    )
    out = ebc(kjt)
    assert out.values().device.type == "meta" and tuple(out.values().shape) == (2, 12)
    with torch.device("meta"):
        ebc = EmbeddingBagCollection(_bag_tables())
    assert ebc.device.type == "meta"


def test_a_seed_gives_torchrec_s_initial_weights() -> None:
    """TorchRec builds nn.EmbeddingBag / nn.Embedding modules (each draws N(0, 1) weights),
    then runs the configs' inits (default uniform(+-sqrt(1 / rows))): after all bags for the
    EBC, table by table for the EC."""
    tables = _bag_tables()
    torch.manual_seed(7)
    ebc = EmbeddingBagCollection(tables)
    torch.manual_seed(7)
    ref = [torch.empty(t.num_embeddings, t.embedding_dim).normal_() for t in tables]
    for t, w in zip(tables, ref, strict=True):
        bound = math.sqrt(1 / t.num_embeddings)
        w.uniform_(-bound, bound)
    for t, w in zip(tables, ref, strict=True):
        assert torch.equal(ebc.embedding_bags[t.name].weight.detach(), w)
    seq = [
        EmbeddingConfig(name="a", num_embeddings=4, embedding_dim=2),
        EmbeddingConfig(name="b", num_embeddings=3, embedding_dim=2),
    ]
    torch.manual_seed(3)
    ec = EmbeddingCollection(seq)
    torch.manual_seed(3)
    for t in seq:
        w = torch.empty(t.num_embeddings, t.embedding_dim).normal_()
        w.uniform_(-math.sqrt(1 / t.num_embeddings), math.sqrt(1 / t.num_embeddings))
        assert torch.equal(ec.embeddings[t.name].weight.detach(), w)
