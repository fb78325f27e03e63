"""SwishLayerNorm, DeepFM and FactorizationMachine against their formulas, computed by hand."""

from __future__ import annotations

import torch

from shardrec_models import MLP, DeepFM, FactorizationMachine, SwishLayerNorm
from shardrec_testing import assert_close, seeded_generator


def test_swish_layernorm_formula_and_state_names() -> None:
    module = SwishLayerNorm([3, 4])
    with torch.no_grad():
        module.norm[0].weight.copy_(torch.linspace(0.5, 1.5, 12).view(3, 4))
        module.norm[0].bias.fill_(0.1)
    x = torch.randn(2, 3, 4, generator=seeded_generator("swish"))
    mean = x.mean(dim=(1, 2), keepdim=True)
    var = x.var(dim=(1, 2), unbiased=False, keepdim=True)
    normed = (x - mean) / torch.sqrt(var + 1e-5) * module.norm[0].weight + 0.1
    assert_close(module(x), x * torch.sigmoid(normed))
    assert set(module.state_dict()) == {"norm.0.weight", "norm.0.bias"}


def test_mlp_swish_layernorm_gives_each_layer_its_own_norm() -> None:
    mlp = MLP(3, [5, 2], activation="swish_layernorm")
    norms = [layer._activation_fn for layer in mlp._mlp]
    assert [n.norm[0].normalized_shape for n in norms] == [(5,), (2,)]  # type: ignore[union-attr]
    x = torch.randn(4, 3, generator=seeded_generator("mlp-swish"))
    h = x
    for layer in mlp._mlp:
        z = layer._linear(h)
        h = z * torch.sigmoid(layer._activation_fn.norm[0](z))  # type: ignore[union-attr]
    assert_close(mlp(x), h)


def _embeddings() -> list[torch.Tensor]:
    g = seeded_generator("fm")
    return [torch.randn(3, 2, 4, generator=g), torch.randn(3, 1, 5, generator=g)]


def test_factorization_machine_is_the_pairwise_sum() -> None:
    embs = _embeddings()
    got = FactorizationMachine()(embs)
    assert got.shape == (3, 1)
    for b in range(3):
        x = torch.cat([e[b].flatten() for e in embs])
        pairs = sum(x[i] * x[j] for i in range(len(x)) for j in range(i + 1, len(x)))
        assert_close(got[b, 0], pairs)


def test_deepfm_applies_the_dense_module_to_the_flattened_input() -> None:
    dense = torch.nn.Linear(13, 2)
    embs = _embeddings()
    assert_close(DeepFM(dense)(embs), dense(torch.cat([e.flatten(1) for e in embs], dim=1)))


def test_deepfm_and_fm_trace_as_roots_and_script() -> None:
    # traced on their own, the embeddings list is one graph input: the flatten is a wrapped leaf
    embs = _embeddings()
    for module in (FactorizationMachine(), DeepFM(torch.nn.Linear(13, 2))):
        gm = torch.fx.GraphModule(module, torch.fx.Tracer().trace(module))
        scripted = torch.jit.script(gm)
        assert_close(gm(embs), module(embs))
        assert_close(scripted(embs), module(embs))
