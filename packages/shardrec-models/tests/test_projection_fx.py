"""DLRM_Projection, DLRMWrapper, `choose`, and the models traced by fx then scripted, against
per-sample references and the eager models."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor, symbolic_trace
from shardrec_models import (
    DLRM,
    DLRM_DCN,
    DenseArch,
    DLRM_Projection,
    DLRMWrapper,
    InteractionProjectionArch,
    SparseArch,
    choose,
)
from shardrec_testing import assert_close, seeded_generator

D = 4


def _ebc(num: int = 3) -> EmbeddingBagCollection:
    tables = [
        EmbeddingBagConfig(
            name=f"t{i}", num_embeddings=11, embedding_dim=D, feature_names=[f"f{i}"]
        )
        for i in range(num)
    ]
    return EmbeddingBagCollection(tables)


def _inputs(batch: int, seed: str, num: int = 3) -> tuple[torch.Tensor, KeyedJaggedTensor]:
    g = seeded_generator(seed)
    lengths = torch.randint(0, 3, (num * batch,), generator=g)
    values = torch.randint(0, 11, (int(lengths.sum()),), generator=g)
    kjt = KeyedJaggedTensor(keys=[f"f{i}" for i in range(num)], values=values, lengths=lengths)
    return torch.randn(batch, 6, generator=g), kjt


def test_choose_is_the_binomial_coefficient() -> None:
    for n in range(8):
        for k in range(-1, 10):
            assert choose(n, k) == (math.comb(n, k) if 0 <= k <= n else 0)


def test_projection_interaction_per_sample() -> None:
    b1, b2 = DenseArch(3 * D, [8, 2 * D]), DenseArch(3 * D, [3 * D])
    arch = InteractionProjectionArch(2, b1, b2)
    g = seeded_generator("projection")
    dense, sparse = torch.randn(5, D, generator=g), torch.randn(5, 2, D, generator=g)
    out = arch(dense, sparse)
    for i in range(5):
        x = torch.cat([dense[i], sparse[i].flatten()])[None]
        p1, p2 = b1(x).view(2, D), b2(x).view(D, 3)
        assert_close(out[i], torch.cat([dense[i], (p1 @ p2).flatten()]))
    assert InteractionProjectionArch(0, b1, b2)(dense, sparse[:, :0]) is dense


def test_dlrm_projection_sizes_and_bad_branch() -> None:
    model = DLRM_Projection(_ebc(), 6, [8, D], [5, 1], [16, 2 * D], [3 * D])
    assert isinstance(model.inter_arch, InteractionProjectionArch)
    assert model.over_arch.model[0].in_features == D + 2 * 3
    dense, kjt = _inputs(4, "proj-model")
    assert model(dense, kjt).shape == (4, 1)
    with pytest.raises(ValueError, match=r"interaction_branch2_layer_sizes ends with 6.*4"):
        DLRM_Projection(_ebc(), 6, [8, D], [5, 1], [2 * D], [6])


def test_wrapper_returns_loss_in_training_and_logits_in_eval() -> None:
    torch.manual_seed(0)
    wrapper = DLRMWrapper(_ebc(), 6, [8, D], [5, 1])
    dense, kjt = _inputs(6, "wrapper")
    label = (torch.arange(6) % 2).float()
    batch = SimpleNamespace(float_features=dense, idlist_features=kjt, label=label)
    loss, logits = wrapper(batch)
    want = torch.nn.functional.binary_cross_entropy_with_logits(logits.squeeze(-1), label)
    assert_close(loss, want)
    wrapper.eval()
    assert_close(wrapper(batch), logits)


@pytest.mark.parametrize("kind", ["dlrm", "dcn", "projection"])
def test_models_trace_script_and_agree(kind: str) -> None:
    torch.manual_seed(1)
    common = (_ebc(), 6, [8, D], [5, 1])
    if kind == "dlrm":
        model: torch.nn.Module = DLRM(*common)
    elif kind == "dcn":
        model = DLRM_DCN(*common, dcn_num_layers=2, dcn_low_rank_dim=3)
    else:
        model = DLRM_Projection(*common, [2 * D], [D])
    gm = symbolic_trace(model)
    scripted = torch.jit.script(gm)
    dense, kjt = _inputs(5, f"trace-{kind}")
    want = model(dense, kjt)
    assert_close(gm(dense, kjt), want)
    assert_close(scripted(dense, kjt), want)


def test_no_tables_and_mixed_dims_raise_value_and_assertion_errors() -> None:
    with pytest.raises(ValueError, match="at least one embedding table"):
        DLRM(EmbeddingBagCollection([]), 6, [8, D], [5, 1])
    mixed = EmbeddingBagCollection(
        [
            EmbeddingBagConfig(name="a", num_embeddings=3, embedding_dim=4, feature_names=["x"]),
            EmbeddingBagConfig(name="b", num_embeddings=3, embedding_dim=2, feature_names=["y"]),
        ]
    )
    with pytest.raises(AssertionError, match="same embedding_dim"):
        DLRM(mixed, 6, [8, 4], [5, 1])


def test_compile_dense_path_wraps_once() -> None:
    model = DLRM(_ebc(), 6, [8, D], [5, 1])
    model.compile_dense_path()
    first = model.dense_arch
    assert not isinstance(first, DenseArch)
    model.compile_dense_path()
    assert model.dense_arch is first


def test_traced_sparse_arch_names_each_feature_and_concatenates() -> None:
    # TorchRec's documented fx graph of SparseArch: the KJT input, the pooled values read per
    # feature name, then `torch.cat`; the traced module gives the eager (B, F, D)
    ebc = _ebc(3)
    arch = SparseArch(ebc)
    gm = symbolic_trace(arch)
    code = gm.code
    assert "KeyedJaggedTensor" in code
    at = [code.index(f"'{f}'") for f in arch.sparse_feature_names]
    assert at == sorted(at) and code.index("torch.cat") > at[-1]
    for batch in (0, 1, 4):
        _, kjt = _inputs(batch, f"sparse-fx-{batch}")
        out = gm(kjt)
        assert out.shape == (batch, 3, D)
        assert_close(out, arch(kjt))
    scripted = torch.jit.script(gm)
    _, kjt = _inputs(4, "sparse-fx-script")
    assert_close(scripted(kjt), arch(kjt))


def test_traced_dlrm_reads_its_feature_by_name() -> None:
    torch.manual_seed(0)
    model = DLRM(
        embedding_bag_collection=_ebc(3),
        dense_in_features=6,
        dense_arch_layer_sizes=[5, D],
        over_arch_layer_sizes=[3, 1],
    )
    gm = symbolic_trace(model)
    assert all(f"'f{i}'" in gm.code for i in range(3))
    dense, kjt = _inputs(4, "dlrm-fx")
    assert_close(gm(dense, kjt), model(dense, kjt))
