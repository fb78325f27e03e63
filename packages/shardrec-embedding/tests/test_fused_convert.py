"""`fuse_embedding_optimizer` and the fused optimizer's call form, against the float module
trained by the same dense torch optimizer."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
    FusedEmbeddingBagCollection,
)
from shardrec_embedding.fused import fuse_embedding_optimizer
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import FusedOptimizerModule


def _ebc(is_weighted: bool = False) -> EmbeddingBagCollection:
    tables = [
        EmbeddingBagConfig(
            name=f"t{i}", num_embeddings=10, embedding_dim=4, feature_names=[f"f{i}"]
        )
        for i in range(3)
    ]
    return EmbeddingBagCollection(tables, is_weighted=is_weighted)


class _Model(nn.Module):
    def __init__(self, ebc: EmbeddingBagCollection) -> None:
        super().__init__()
        self.ebc = ebc
        self.head = nn.Linear(12, 1)

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.ebc(kjt).values())
        return out


def _kjt(seed: int, weighted: bool = False) -> KeyedJaggedTensor:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 3, (9,), generator=g)
    n = int(lengths.sum())
    return KeyedJaggedTensor.from_lengths_sync(
        ["f0", "f1", "f2"],
        torch.randint(0, 10, (n,), generator=g),
        lengths,
        weights=torch.rand(n, generator=g) if weighted else None,
    )


@pytest.mark.parametrize("weighted", [False, True])
def test_fused_model_trains_like_the_float_model_with_dense_sgd(weighted: bool) -> None:
    torch.manual_seed(0)
    reference = _Model(_ebc(weighted))
    fused = copy.deepcopy(reference)
    names = (
        {n for n, _ in fused.named_modules()},
        {n: p.shape for n, p in fused.named_parameters()},
    )
    out = fuse_embedding_optimizer(fused, torch.optim.SGD, {"lr": 0.1}, device="cpu")
    assert out is fused and isinstance(fused.ebc, FusedEmbeddingBagCollection)
    assert fused.ebc.is_weighted() == weighted
    # same module and parameter names and shapes as the float model
    assert {n for n, _ in fused.named_modules()} == names[0]
    assert {n: p.shape for n, p in fused.named_parameters()} == names[1]
    sparse = torch.optim.SGD(reference.ebc.parameters(), lr=0.1)
    dense_ref = torch.optim.SGD(reference.head.parameters(), lr=0.1)
    dense = torch.optim.SGD(fused.head.parameters(), lr=0.1)
    for step in range(3):
        kjt = _kjt(step, weighted)
        for model, opts in ((reference, (sparse, dense_ref)), (fused, (dense,))):
            for o in opts:
                o.zero_grad()
            model(kjt).square().sum().backward()
            for o in opts:
                o.step()
        for key, value in reference.state_dict().items():
            torch.testing.assert_close(fused.state_dict()[key], value, msg=key)


def test_a_collection_itself_is_returned_fused() -> None:
    torch.manual_seed(1)
    ebc = _ebc()
    fused = fuse_embedding_optimizer(ebc, torch.optim.Adagrad, {"lr": 0.05}, device=None)
    assert isinstance(fused, FusedEmbeddingBagCollection)
    kjt = _kjt(4)
    assert torch.equal(fused(kjt).values(), ebc(kjt).values())


def test_fused_optimizer_call_form_is_the_property() -> None:
    fused = fuse_embedding_optimizer(_ebc(), torch.optim.Adam, {"lr": 0.01}, device=None)
    assert isinstance(fused, FusedEmbeddingBagCollection)
    assert isinstance(fused, FusedOptimizerModule)
    opt = fused.fused_optimizer
    assert opt() is opt
    fused(_kjt(2)).values().sum().backward()
    state = copy.deepcopy(opt.state_dict())
    opt().load_state_dict(state)
    for key, value in opt.state_dict()["state"].items():
        for name, tensor in value.items():
            assert torch.equal(tensor, state["state"][key][name]), (key, name)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="location"):
        fuse_embedding_optimizer(_ebc(), torch.optim.SGD, {"lr": 0.1}, None, location="uvm")
    ec = EmbeddingCollection(
        [EmbeddingConfig(name="t", num_embeddings=4, embedding_dim=4, feature_names=["f"])]
    )
    with pytest.raises(ValueError, match=r"seq is an EmbeddingCollection"):
        fuse_embedding_optimizer(nn.ModuleDict({"seq": ec}), torch.optim.SGD, {"lr": 0.1}, None)
