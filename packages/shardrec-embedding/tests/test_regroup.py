"""KTRegroupAsDict and PermuteMultiEmbedding against a per-name concatenation reference.

No `from __future__ import annotations`: a module here is fx-traced then scripted, which needs
real annotations."""

import pytest
import torch
import torch.fx

from shardrec_embedding import DataType, KTRegroupAsDict, PermuteMultiEmbedding, module_init
from shardrec_jagged import KeyedTensor
from shardrec_testing import seeded_generator


def _kts(seed: str, batch: int = 3) -> list[KeyedTensor]:
    g = seeded_generator(seed)
    specs = [(["a", "b", "c"], [2, 1, 3]), (["d", "e"], [4, 2])]
    return [
        KeyedTensor(keys=k, length_per_key=n, values=torch.randn(batch, sum(n), generator=g))
        for k, n in specs
    ]


def _reference(kts: list[KeyedTensor], groups: list[list[str]], keys: list[str]) -> dict:
    blocks: dict[str, torch.Tensor] = {}
    for kt in kts:
        start = 0
        for key, width in zip(kt.keys(), kt.length_per_key(), strict=True):
            blocks[key] = kt.values()[:, start : start + width]
            start += width
    return {k: torch.cat([blocks[n] for n in g], dim=1) for k, g in zip(keys, groups, strict=True)}


GROUPS = [["e", "a", "c"], ["b", "a", "d"], ["c"]]
KEYS = ["user", "item", "extra"]


def test_regroup_matches_reference_with_repeats_and_skips() -> None:
    module = KTRegroupAsDict(GROUPS, KEYS)
    for seed in ("first", "second"):  # the second call reuses the cached slices
        kts = _kts(seed)
        got, want = module(kts), _reference(kts, GROUPS, KEYS)
        assert list(got) == KEYS
        for k in KEYS:
            assert torch.equal(got[k], want[k])


def test_gradients_reach_every_input_slice() -> None:
    kts = _kts("grad")
    for kt in kts:
        kt.values().requires_grad_(True)
    out = KTRegroupAsDict(GROUPS, KEYS)(kts)
    sum(v.sum() * (i + 1) for i, v in enumerate(out.values())).backward()
    # d(loss)/d(block) = the sum of the weights (1, 2, 3) of the outputs that use the block
    expected = {"a": 1 + 2, "b": 2, "c": 1 + 3, "d": 2, "e": 1}
    for kt in kts:
        start = 0
        for key, width in zip(kt.keys(), kt.length_per_key(), strict=True):
            block = kt.values().grad[:, start : start + width]
            assert torch.all(block == expected[key])
            start += width


def test_cast_traced_and_scripted_forms() -> None:
    kts = _kts("forms")
    module = KTRegroupAsDict(GROUPS, KEYS, emb_dtype=DataType.BF16)
    eager = module(kts)
    assert all(v.dtype == torch.bfloat16 for v in eager.values())
    traced = torch.fx.symbolic_trace(module)
    for form in (traced, torch.jit.script(traced), torch.jit.script(module)):
        got = form(kts)
        for k in KEYS:
            assert torch.equal(got[k], eager[k])


class _Parent(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.regroup = KTRegroupAsDict([["a", "d"]], ["x"])

    def forward(self, kts: list[KeyedTensor]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = self.regroup(kts)
        return out


def test_tracing_before_the_first_call_captures_module_init() -> None:
    traced = torch.fx.symbolic_trace(_Parent())
    assert module_init in {n.target for n in traced.graph.nodes if n.op == "call_function"}
    # Scripting this graph works in a fresh process (TorchRec's conformance test does it);
    # here earlier tests have scripted other KTRegroupAsDict instances, and TorchScript then
    # types the ignored `module_init`'s argument as the first one's class.


def test_permute_before_init_is_the_identity() -> None:
    values = [torch.randn(2, 3), torch.randn(2, 1)]
    out = PermuteMultiEmbedding([["a"], ["b"]])(values)
    assert all(o is v for o, v in zip(out, values, strict=True))


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="2 groups but 1 keys"):
        KTRegroupAsDict([["a"], ["b"]], ["x"])
    with pytest.raises(ValueError, match=r"\['zz'\], found in no KeyedTensor"):
        KTRegroupAsDict([["a", "zz"]], ["x"])(_kts("bad"))
    twice = [*_kts("twice"), KeyedTensor(["a"], [1], torch.randn(3, 1))]
    with pytest.raises(ValueError, match="'a' is in KeyedTensors 0 and 2"):
        KTRegroupAsDict([["a"]], ["x"])(twice)
    with pytest.raises(ValueError, match="at least one KeyedTensor"):
        KTRegroupAsDict([["a"]], ["x"])([])
