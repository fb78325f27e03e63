"""Quantizing a collection built on `meta`, and `meta_to_cpu_placement` (TorchRec's
`torchrec.quant.utils`): the CPU twin has the same tables and options, and with the same
state it looks up what a collection quantized on CPU looks up."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.ao.quantization import PlaceholderObserver

from shardrec_embedding import EmbeddingBagCollection, EmbeddingCollection
from shardrec_embedding.configs import EmbeddingBagConfig, EmbeddingConfig
from shardrec_embedding.quant import (
    QuantConfig,
    QuantEmbeddingBagCollection,
    QuantEmbeddingCollection,
    meta_to_cpu_placement,
)
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import seeded_generator

_TABLES = [("t1", 10, ["f1"]), ("t2", 7, ["f2"])]


def _qconfig(weight: torch.dtype, output: torch.dtype) -> QuantConfig:
    return QuantConfig(
        activation=PlaceholderObserver.with_args(dtype=output),
        weight=PlaceholderObserver.with_args(dtype=weight),
    )


def _kjt() -> KeyedJaggedTensor:
    g = seeded_generator("meta-placement")
    lengths = torch.tensor([2, 0, 1, 1, 3, 0])
    values = torch.cat(
        [torch.randint(0, 7, (3,), generator=g), torch.randint(0, 7, (4,), generator=g)]
    )
    return KeyedJaggedTensor(keys=["f1", "f2"], values=values, lengths=lengths)


def _quant_bags(
    device: str, weight: torch.dtype, output: torch.dtype
) -> QuantEmbeddingBagCollection:
    tables = [
        EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=8, feature_names=f)
        for n, r, f in _TABLES
    ]
    ebc = EmbeddingBagCollection(tables=tables, device=torch.device(device))
    ebc.qconfig = _qconfig(weight, output)  # type: ignore[assignment]  # TorchRec's attribute
    return QuantEmbeddingBagCollection.from_float(ebc)


class _Model(nn.Module):
    def __init__(self, sparse: nn.Module) -> None:
        super().__init__()
        self.arch = nn.ModuleDict({"sparse": sparse})
        self.dense = nn.Linear(2, 2)


@pytest.mark.parametrize(
    ("weight", "output"), [(torch.qint8, torch.float), (torch.half, torch.half)]
)
def test_meta_bags_move_to_cpu_and_look_up_as_a_cpu_quantization(
    weight: torch.dtype, output: torch.dtype
) -> None:
    meta = _quant_bags("meta", weight, output)
    assert meta.device.type == "meta"
    model = _Model(meta)
    dense = model.dense
    meta_to_cpu_placement(model)
    cpu = model.arch["sparse"]
    assert isinstance(cpu, QuantEmbeddingBagCollection) and cpu is not meta
    assert cpu.device.type == "cpu" and model.dense is dense  # other modules untouched
    assert cpu.embedding_bag_configs() == meta.embedding_bag_configs()
    assert cpu.output_dtype() == output and cpu.is_weighted() == meta.is_weighted()
    reference = _quant_bags("cpu", weight, output)
    cpu.load_state_dict(reference.state_dict())
    got, want = cpu(_kjt()), reference(_kjt())
    assert got.keys() == want.keys() and got.values().dtype == output
    assert torch.equal(got.values(), want.values())


def test_meta_sequence_collection_moves_to_cpu() -> None:
    tables = [
        EmbeddingConfig(name=n, num_embeddings=r, embedding_dim=4, feature_names=f)
        for n, r, f in _TABLES
    ]
    ec = EmbeddingCollection(tables=tables, device=torch.device("meta"))
    ec.qconfig = _qconfig(torch.qint8, torch.float)  # type: ignore[assignment]  # TorchRec's attribute
    meta = QuantEmbeddingCollection.from_float(ec)
    model = _Model(meta)
    meta_to_cpu_placement(model)
    cpu = model.arch["sparse"]
    assert isinstance(cpu, QuantEmbeddingCollection) and cpu.device.type == "cpu"
    assert cpu.embedding_configs() == meta.embedding_configs()
    out = cpu(_kjt())
    ids = _kjt().to_dict()
    assert sorted(out) == ["f1", "f2"]
    assert all(out[f].values().shape == (ids[f].values().numel(), 4) for f in ("f1", "f2"))


def test_cpu_modules_and_the_root_are_left_alone() -> None:
    cpu = _quant_bags("cpu", torch.qint8, torch.float)
    model = _Model(cpu)
    meta_to_cpu_placement(model)
    assert model.arch["sparse"] is cpu
    root = _quant_bags("meta", torch.qint8, torch.float)
    meta_to_cpu_placement(root)  # no parent to hold a replacement: unchanged
    assert root.device.type == "meta"
