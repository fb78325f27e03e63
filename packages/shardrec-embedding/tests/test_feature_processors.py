"""Position weights and the feature-processed EBC against a Python reference."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    FeatureProcessedEmbeddingBagCollection,
    PositionWeightedModule,
    PositionWeightedModuleCollection,
)
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor
from shardrec_testing import assert_close


def _tables() -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(name="t1", num_embeddings=10, embedding_dim=4, feature_names=["f1"]),
        EmbeddingBagConfig(name="t2", num_embeddings=8, embedding_dim=4, feature_names=["f2"]),
    ]


def test_position_weights_follow_positions() -> None:
    pwm = PositionWeightedModule(max_feature_length=4)
    with torch.no_grad():
        pwm.position_weight.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    jt = JaggedTensor(values=torch.tensor([5, 6, 7, 8, 9, 1]), lengths=torch.tensor([3, 0, 2, 1]))
    out = pwm(jt)
    assert out.weights().tolist() == [1.0, 2.0, 3.0, 1.0, 2.0, 1.0]
    assert torch.equal(out.values(), jt.values())


def test_bag_longer_than_max_length_is_refused() -> None:
    pwm = PositionWeightedModule(max_feature_length=2)
    with pytest.raises(ValueError, match="bag of 3 ids, longer than its max_feature_length 2"):
        pwm(JaggedTensor(values=torch.tensor([1, 2, 3]), lengths=torch.tensor([3])))
    with pytest.raises(ValueError, match="positive int"):
        PositionWeightedModule(max_feature_length=0)


def _reference(
    ebc: EmbeddingBagCollection, pos: dict[str, torch.Tensor], kjt: KeyedJaggedTensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    weights = {n: m.weight.detach().clone().requires_grad_() for n, m in ebc.embedding_bags.items()}
    pos_ref = {k: v.detach().clone().requires_grad_() for k, v in pos.items()}
    jts = kjt.to_dict()
    blocks = []
    for t in ebc.embedding_bag_configs():
        for f in t.feature_names:
            ids, lengths = jts[f].values().tolist(), jts[f].lengths().tolist()
            rows, start = [], 0
            for n in lengths:
                acc = torch.zeros(t.embedding_dim)
                for p in range(n):
                    acc = acc + pos_ref[f][p] * weights[t.name][ids[start + p]]
                rows.append(acc)
                start += n
            blocks.append(torch.stack(rows))
    return torch.cat(blocks, 1), weights, pos_ref


@pytest.mark.parametrize("collection", [False, True])
def test_feature_processed_ebc_matches_reference_and_learns_positions(collection: bool) -> None:
    gen = torch.Generator().manual_seed(3)
    ebc = EmbeddingBagCollection(_tables(), is_weighted=True)
    processors: Any
    if collection:
        processors = PositionWeightedModuleCollection({"f1": 3, "f2": 4})
        pos = dict(processors.position_weights.items())
    else:
        processors = {"f1": PositionWeightedModule(3), "f2": PositionWeightedModule(4)}
        pos = {k: m.position_weight for k, m in processors.items()}
    with torch.no_grad():
        for p in pos.values():
            p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
    fp = FeatureProcessedEmbeddingBagCollection(ebc, processors)
    kjt = KeyedJaggedTensor(
        keys=["f2", "f1"],
        values=torch.tensor([1, 2, 3, 7, 0, 9, 9, 4]),
        lengths=torch.tensor([2, 0, 2, 3, 1, 0]),
    )
    out = fp(kjt)
    ref, ref_w, ref_pos = _reference(ebc, pos, kjt)
    assert out.keys() == ["f1", "f2"]
    assert_close(out.values(), ref.detach())
    g = torch.randn(ref.shape, generator=gen)
    (out.values() * g).sum().backward()
    (ref * g).sum().backward()
    for k, p in pos.items():
        assert p.grad is not None and ref_pos[k].grad is not None
        assert_close(p.grad, ref_pos[k].grad)
    for n, m in ebc.embedding_bags.items():
        assert m.weight.grad is not None and ref_w[n].grad is not None
        assert_close(m.weight.grad, ref_w[n].grad)


def test_feature_processed_ebc_bad_setup() -> None:
    with pytest.raises(ValueError, match="is_weighted=True"):
        FeatureProcessedEmbeddingBagCollection(
            EmbeddingBagCollection(_tables()), {"f1": PositionWeightedModule(2)}
        )
    with pytest.raises(ValueError, match=r"cover \['f1'\].*read \['f1', 'f2'\]"):
        FeatureProcessedEmbeddingBagCollection(
            EmbeddingBagCollection(_tables(), is_weighted=True), {"f1": PositionWeightedModule(2)}
        )
    fp = FeatureProcessedEmbeddingBagCollection(
        EmbeddingBagCollection(_tables(), is_weighted=True),
        {"f1": PositionWeightedModule(2), "f2": PositionWeightedModule(2)},
    )
    kjt = KeyedJaggedTensor(keys=["f1"], values=torch.tensor([1]), lengths=torch.tensor([1]))
    with pytest.raises(ValueError, match=r"lacks feature\(s\) \['f2'\]"):
        fp(kjt)


def test_collection_passes_through_features_it_has_no_length_for() -> None:
    """As TorchRec's: a maximum for a feature the KJT lacks is simply unused."""
    coll = PositionWeightedModuleCollection({"f3": 2})
    kjt = KeyedJaggedTensor(keys=["f1"], values=torch.tensor([1, 2]), lengths=torch.tensor([2]))
    out = coll(kjt)
    assert out.weights().tolist() == [1.0, 1.0] and out.keys() == ["f1"]


def test_collection_leaves_unlisted_features_at_weight_one() -> None:
    coll = PositionWeightedModuleCollection({"f2": 3})
    with torch.no_grad():
        coll.position_weights["f2"].copy_(torch.tensor([5.0, 6.0, 7.0]))
    kjt = KeyedJaggedTensor(
        keys=["f1", "f2"], values=torch.tensor([1, 2, 3, 4, 5]), lengths=torch.tensor([2, 0, 1, 2])
    )
    out = coll(kjt)
    assert out.weights().tolist() == [1.0, 1.0, 5.0, 5.0, 6.0]
    assert out.keys() == ["f1", "f2"] and torch.equal(out.lengths(), kjt.lengths())
    with pytest.raises(ValueError, match="'f2' has a bag of 4 ids"):
        coll(
            KeyedJaggedTensor(
                keys=["f2"], values=torch.tensor([1, 2, 3, 4]), lengths=torch.tensor([4])
            )
        )


def test_user_feature_processor_with_torchrec_s_signature() -> None:
    """A processor written for TorchRec (`forward(self, jt)`) plugs into the FP-EBC."""
    from shardrec_embedding import FeatureProcessor

    class Halve(FeatureProcessor):
        def forward(self, features: JaggedTensor) -> JaggedTensor:
            ones = torch.full((features.values().numel(),), 0.5)
            return JaggedTensor(values=features.values(), lengths=features.lengths(), weights=ones)

    ebc = EmbeddingBagCollection(_tables(), is_weighted=True)
    fp = FeatureProcessedEmbeddingBagCollection(ebc, {"f1": Halve(), "f2": Halve()})
    kjt = KeyedJaggedTensor(
        keys=["f1", "f2"], values=torch.tensor([1, 2, 3]), lengths=torch.tensor([2, 0, 1, 0])
    )
    plain = EmbeddingBagCollection(_tables())
    plain.load_state_dict(ebc.state_dict())
    assert_close(fp(kjt).values(), plain(kjt).values() * 0.5)
