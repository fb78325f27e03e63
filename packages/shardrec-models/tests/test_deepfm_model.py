"""SimpleDeepFMNN against the composition of its documented parts, computed by hand."""

from types import SimpleNamespace

import pytest
import torch

from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor, symbolic_trace
from shardrec_models import SimpleDeepFMNN, SimpleDeepFMNNWrapper
from shardrec_testing import assert_close, seeded_generator

D = 3


def _ebc() -> EmbeddingBagCollection:
    return EmbeddingBagCollection(
        [
            EmbeddingBagConfig(
                name="t1", num_embeddings=9, embedding_dim=D, feature_names=["f1", "f3"]
            ),
            EmbeddingBagConfig(name="t2", num_embeddings=9, embedding_dim=D, feature_names=["f2"]),
        ]
    )


def _inputs() -> tuple[torch.Tensor, KeyedJaggedTensor]:
    g = seeded_generator("deepfm")
    lengths = torch.tensor([2, 0, 1, 1, 3, 1, 0, 2, 1, 1, 1, 0])  # 3 features x 4 samples
    values = torch.randint(0, 9, (int(lengths.sum()),), generator=g)
    return torch.randn(4, 5, generator=g), KeyedJaggedTensor(
        ["f1", "f2", "f3"], values, lengths=lengths
    )


def test_forward_is_the_documented_composition() -> None:
    torch.manual_seed(0)
    model = SimpleDeepFMNN(5, _ebc(), hidden_layer_size=7, deep_fm_dimension=6)
    dense, kjt = _inputs()
    pooled = model.sparse_arch.embedding_bag_collection(kjt).to_dict()
    d = model.dense_arch.model(dense)
    x = torch.cat([d] + [pooled[k] for k in ("f1", "f3", "f2")], dim=1)
    deep = torch.relu(model.inter_arch.deep_fm.dense_module[0](x))
    fm = 0.5 * (x.sum(1, keepdim=True) ** 2 - (x * x).sum(1, keepdim=True))
    over = model.over_arch.model[0]
    want = torch.sigmoid(over(torch.cat([d, deep, fm], dim=1)))
    assert_close(model(dense, kjt), want)
    gm = symbolic_trace(model)
    assert_close(torch.jit.script(gm)(dense, kjt), want)


def test_wrapper_and_bad_tables() -> None:
    torch.manual_seed(0)
    model = SimpleDeepFMNNWrapper(5, _ebc(), 7, 6)
    dense, kjt = _inputs()
    label = torch.tensor([0.0, 1.0, 1.0, 0.0])
    loss, pred = model(SimpleNamespace(float_features=dense, idlist_features=kjt, label=label))
    assert_close(
        loss, torch.nn.functional.binary_cross_entropy_with_logits(pred.squeeze(-1), label)
    )
    with pytest.raises(AssertionError, match="at least one embedding table"):
        SimpleDeepFMNN(5, EmbeddingBagCollection([]), 7, 6)
