"""DLRM_Transformer and its interaction against torch's sequence-first encoder run sample by
sample (the reference), and their bad configurations."""

import pytest
import torch
from torch import nn

from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_models.arches import InteractionTransformerArch, ModelConfigError
from shardrec_models.dlrm import DLRM_Transformer
from shardrec_testing import assert_close, seeded_generator


def _reference(
    arch: InteractionTransformerArch, dense: torch.Tensor, sparse: torch.Tensor
) -> torch.Tensor:
    """Each sample alone through a sequence-first encoder holding the same parameters."""
    d = dense.shape[1]
    layer = nn.TransformerEncoderLayer(d_model=d, nhead=arch.nhead)
    ref = nn.TransformerEncoder(layer, arch.ntransformer_layers, enable_nested_tensor=False)
    ref.load_state_dict(arch.interarch_TE.state_dict())
    ref.eval()
    rows = []
    for b in range(dense.shape[0]):
        tokens = torch.cat([dense[b : b + 1], sparse[b]], dim=0).unsqueeze(1)  # (F + 1, 1, D)
        rows.append(ref(tokens).reshape(-1))
    return torch.stack(rows)


@pytest.mark.parametrize(("batch", "features", "dim", "heads"), [(5, 2, 8, 2), (3, 4, 12, 3)])
def test_interaction_is_a_per_sample_encoder(
    batch: int, features: int, dim: int, heads: int
) -> None:
    g = seeded_generator(f"transformer-{batch}-{features}")
    torch.manual_seed(0)
    arch = InteractionTransformerArch(features, dim, nhead=heads, ntransformer_layers=2).eval()
    dense = torch.randn(batch, dim, generator=g)
    sparse = torch.randn(batch, features, dim, generator=g)
    with torch.no_grad():
        got = arch(dense, sparse)
        assert got.shape == (batch, (features + 1) * dim)
        assert_close(got, _reference(arch, dense, sparse))
        # a sample's output does not depend on the rest of its batch
        assert_close(arch(dense[:1], sparse[:1]), got[:1])
    assert torch.equal(InteractionTransformerArch(0, dim, heads)(dense, sparse[:, :0]), dense)


def test_model_feeds_the_encoder_output_to_the_over_arch() -> None:
    torch.manual_seed(0)
    tables = [
        EmbeddingBagConfig(
            name="t1", num_embeddings=9, embedding_dim=4, feature_names=["f1", "f3"]
        ),
        EmbeddingBagConfig(name="t2", num_embeddings=9, embedding_dim=4, feature_names=["f2"]),
    ]
    model = DLRM_Transformer(EmbeddingBagCollection(tables), 5, [6, 4], [3, 1], nhead=2).eval()
    g = seeded_generator("transformer-dlrm")
    lengths = torch.tensor([2, 0, 1, 1, 3, 1])  # 3 features x 2 samples
    kjt = KeyedJaggedTensor(
        ["f1", "f2", "f3"], torch.randint(0, 9, (8,), generator=g), lengths=lengths
    )
    dense = torch.randn(2, 5, generator=g)
    with torch.no_grad():
        pooled = model.sparse_arch(kjt)  # (B, F, D)
        assert isinstance(model.inter_arch, InteractionTransformerArch)
        inter = _reference(model.inter_arch, model.dense_arch(dense), pooled)
        want = model.over_arch(inter)
        assert_close(model(dense, kjt), want)
    keys = model.state_dict().keys()
    assert "inter_arch.interarch_TE.layers.0.self_attn.in_proj_weight" in keys
    assert "inter_arch.interarch_TE.layers.3.linear2.bias" in keys  # 4 layers by default


def test_bad_configurations_raise_naming_the_value() -> None:
    with pytest.raises(ModelConfigError, match="embedding_dim 6 must be divisible by nhead 4"):
        InteractionTransformerArch(2, 6, nhead=4)
    with pytest.raises(ModelConfigError, match="nhead must be an int >= 1, got 0"):
        InteractionTransformerArch(2, 6, nhead=0)
    with pytest.raises(ModelConfigError, match="ntransformer_layers must be an int >= 1"):
        InteractionTransformerArch(2, 6, nhead=2, ntransformer_layers=0)
    with pytest.raises(AssertionError):  # TorchRec's type for a model without sparse features
        DLRM_Transformer(EmbeddingBagCollection([]), 5, [6, 4], [3, 1])
