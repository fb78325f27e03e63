"""Serving DLRM: the quantized model, sharded or not, scripts with its KJT input and the saved
artifact runs where shardrec is not imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig, quantize_inference_model
from shardrec_jagged import KeyedJaggedTensor, script_fields
from shardrec_models import DLRM, DLRM_DCN
from shardrec_sharding import shard_quant_model

TABLES = [
    EmbeddingBagConfig(
        name=f"t{i}", num_embeddings=20 + 7 * i, embedding_dim=8, feature_names=[f"f{i}"]
    )
    for i in range(3)
]


def _model(kind: str) -> nn.Module:
    torch.manual_seed(0)
    common = {
        "embedding_bag_collection": EmbeddingBagCollection(TABLES),
        "dense_in_features": 5,
        "dense_arch_layer_sizes": [16, 8],
        "over_arch_layer_sizes": [8, 1],
    }
    if kind == "dlrm":
        return DLRM(**common)  # type: ignore[arg-type]
    return DLRM_DCN(dcn_num_layers=2, dcn_low_rank_dim=4, **common)  # type: ignore[arg-type]


def _inputs(batch: int, seed: int) -> tuple[torch.Tensor, KeyedJaggedTensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (3 * batch,), generator=g)
    values = torch.cat(
        [
            torch.randint(0, 20 + 7 * i, (int(n),), generator=g)
            for i, n in enumerate(lengths.view(3, batch).sum(1))
        ]
    )
    kjt = KeyedJaggedTensor(keys=["f0", "f1", "f2"], values=values, lengths=lengths)
    return torch.randn(batch, 5, generator=g), kjt


@pytest.mark.parametrize("kind", ["dlrm", "dlrm_dcn"])
@pytest.mark.parametrize("sharded", [False, True], ids=["unsharded", "sharded"])
def test_quantized_dlrm_scripts(kind: str, sharded: bool) -> None:
    model = quantize_inference_model(_model(kind), torch.int8)
    if sharded:
        model, _ = shard_quant_model(model, world_size=2, compute_device="cpu")
    scripted = torch.jit.script(model)
    for batch, seed in [(4, 0), (1, 1), (0, 2)]:
        dense, kjt = _inputs(batch, seed)
        assert torch.equal(scripted(dense, kjt), model(dense, kjt))


def test_scripted_dense_width_error_names_the_shape() -> None:
    scripted = torch.jit.script(quantize_inference_model(_model("dlrm"), torch.int8))
    _, kjt = _inputs(2, 3)
    with pytest.raises(torch.jit.Error, match=r"dense_features has shape \(2, 7\).*=5"):
        scripted(torch.randn(2, 7), kjt)


def test_artifact_runs_without_shardrec(tmp_path: Path) -> None:
    model = quantize_inference_model(_model("dlrm_dcn"), torch.quint4x2)
    dense, kjt = _inputs(6, 4)
    path = tmp_path / "dlrm.pt"
    torch.jit.save(torch.jit.script(model), str(path))
    torch.save(
        {"dense": dense, "kjt": script_fields(kjt), "expected": model(dense, kjt)},
        tmp_path / "io.pt",
    )
    code = textwrap.dedent(f"""
        import sys, types, torch
        m = torch.jit.load({str(path)!r})
        io = torch.load({str(tmp_path / "io.pt")!r})
        assert not any(n.startswith("shardrec") for n in sys.modules), "imported shardrec"
        assert torch.equal(m(io["dense"], types.SimpleNamespace(**io["kjt"])), io["expected"])
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"
