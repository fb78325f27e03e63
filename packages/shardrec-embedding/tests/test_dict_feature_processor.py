"""DictPositionWeightedModule (TorchRec's `PositionWeightedModule` of the path
`torchrec.modules.feature_processor`) against a naive per-id loop, traced and scripted, and
its bad inputs."""

import pytest
import torch

from shardrec_embedding.dict_feature_processor import DictPositionWeightedModule
from shardrec_jagged import JaggedTensor, Tracer
from shardrec_testing import assert_close, seeded_generator


def _jt(lengths: list[int], g: torch.Generator) -> JaggedTensor:
    n = sum(lengths)
    return JaggedTensor(
        values=torch.randint(0, 100, (n,), generator=g), lengths=torch.tensor(lengths)
    )


def _module(g: torch.Generator) -> DictPositionWeightedModule:
    m = DictPositionWeightedModule({"a": 4, "b": 2})
    with torch.no_grad():
        for w in m.position_weights.values():
            w.copy_(torch.rand(w.shape, generator=g))
    return m


def _expected(jt: JaggedTensor, weight: torch.Tensor) -> torch.Tensor:
    out: list[torch.Tensor] = []
    for bag in jt.lengths().tolist():
        out.extend(weight[p] for p in range(bag))
    return torch.stack(out) if out else torch.zeros(0)


@pytest.mark.parametrize("seed", range(3))
def test_weights_are_the_position_weight_of_each_id(seed: int) -> None:
    g = seeded_generator(f"dict-pw-{seed}")
    m = _module(g)
    lengths_a = torch.randint(0, 5, (4,), generator=g).tolist()
    lengths_b = torch.randint(0, 3, (4,), generator=g).tolist()
    features = {"a": _jt(lengths_a, g), "b": _jt(lengths_b, g), "c": _jt([1, 2, 0, 1], g)}
    c_in = features["c"]
    out = m(dict(features))
    assert sorted(out) == ["a", "b", "c"]
    assert out["c"] is c_in  # a feature without a position weight passes through
    for name in ("a", "b"):
        assert torch.equal(out[name].values(), features[name].values())
        assert torch.equal(out[name].lengths(), features[name].lengths())
        assert_close(out[name].weights(), _expected(features[name], m.position_weights[name]))
    assert all(
        torch.equal(w, torch.ones_like(w))
        for w in DictPositionWeightedModule({"a": 3}).position_weights.values()
    )


def test_gradient_reaches_the_position_weights() -> None:
    m = DictPositionWeightedModule({"a": 3})
    jt = JaggedTensor(values=torch.tensor([5, 6, 7, 8]), lengths=torch.tensor([3, 0, 1]))
    m({"a": jt})["a"].weights().sum().backward()
    grad = m.position_weights["a"].grad
    assert grad is not None
    assert_close(grad, torch.tensor([2.0, 1.0, 1.0]))  # positions 0, 1, 2, 0


def test_traces_and_scripts_to_the_same_weights() -> None:
    g = seeded_generator("dict-pw-fx")
    m = _module(g)
    gm = torch.fx.GraphModule(m, Tracer().trace(m))
    scripted = torch.jit.script(gm)
    features = {"a": _jt([2, 0, 4], g), "b": _jt([1, 2, 1], g)}
    want = m(dict(features))
    for runner in (gm, scripted):
        got = runner(dict(features))
        for name in ("a", "b"):
            assert_close(got[name].weights(), want[name].weights())


def test_bad_inputs_raise_naming_the_value() -> None:
    with pytest.raises(ValueError, match=r"'a'.*positive int, got 0"):
        DictPositionWeightedModule({"a": 0})
    with pytest.raises(ValueError, match=r"'a'.*positive int, got 2.5"):
        DictPositionWeightedModule({"a": 2.5})  # type: ignore[dict-item]
    m = DictPositionWeightedModule({"a": 2})
    g = seeded_generator("dict-pw-bad")
    with pytest.raises(ValueError, match=r"feature 'a' has a bag of 3 ids.*max_feature_length 2"):
        m({"a": _jt([1, 3], g)})
    with pytest.raises(ValueError, match=r"feature 'a' has a position weight but is not in"):
        m({"b": _jt([1], g)})
