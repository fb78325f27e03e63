"""pytree registration, torch.fx symbolic tracing, torch.compile(fullgraph=True) without breaks.

Compile tests use the ``eager`` backend: ``fullgraph=True`` makes Dynamo fail on any graph break,
which is the property under test, without paying for Inductor code generation.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import torch
import torch.fx
import torch.utils._pytree as pytree

from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor


def sample_kjt() -> KeyedJaggedTensor:
    return KeyedJaggedTensor(
        ["a", "b"],
        torch.arange(6),
        weights=torch.linspace(0, 1, 6),
        lengths=torch.tensor([1, 2, 0, 3]),
    )


def test_pytree_round_trips() -> None:
    kjt = sample_kjt()
    leaves, spec = pytree.tree_flatten(kjt)
    assert sum(isinstance(x, torch.Tensor) for x in leaves) == 3  # values, weights, lengths
    back = pytree.tree_unflatten(leaves, spec)
    assert isinstance(back, KeyedJaggedTensor)
    assert back.keys() == ["a", "b"] and back.stride() == 2
    assert torch.equal(back.values(), kjt.values())
    doubled = pytree.tree_map(
        lambda t: t * 2 if t is not None and t.is_floating_point() else t, kjt
    )
    assert torch.equal(doubled.weights(), kjt.weights() * 2)

    vbe = KeyedJaggedTensor(
        ["a", "b"],
        torch.arange(3),
        lengths=torch.tensor([1, 2, 0]),
        stride_per_key_per_rank=[[1], [2]],
        inverse_indices=(["a", "b"], torch.tensor([[0, 0], [0, 1]])),
    )
    back_vbe = pytree.tree_unflatten(*pytree.tree_flatten(vbe))
    assert back_vbe.stride_per_key_per_rank() == [[1], [2]]
    assert torch.equal(back_vbe.inverse_indices()[1], vbe.inverse_indices()[1])

    jt = JaggedTensor(torch.arange(3.0), lengths=torch.tensor([1, 2]))
    back_jt = pytree.tree_unflatten(*pytree.tree_flatten(jt))
    assert torch.equal(back_jt.values(), jt.values())
    assert torch.equal(back_jt.lengths(), jt.lengths())

    kt = KeyedTensor(["x", "y"], [1, 2], torch.randn(2, 3), key_dim=1)
    back_kt = pytree.tree_unflatten(*pytree.tree_flatten(kt))
    assert back_kt.keys() == ["x", "y"] and back_kt.length_per_key() == [1, 2]
    assert torch.equal(back_kt["y"], kt["y"])
    paths = [str(p) for p, _ in pytree.tree_flatten_with_path(kjt)[0]]
    assert "_values" in paths[0] and "_lengths" in paths[2]


class _Model(torch.nn.Module):
    def forward(self, kjt: KeyedJaggedTensor, kt: KeyedTensor) -> torch.Tensor:
        a = kjt["a"].values().float().sum()
        b = kjt.permute([1, 0]).values().float() * 2
        grouped = KeyedTensor.regroup([kt], [["y"], ["x", "y"]])
        named = KeyedTensor.regroup_as_dict([kt], [["x"]], ["only_x"])
        both = KeyedJaggedTensor.concat([kjt, KeyedJaggedTensor.from_jt_dict({"z": kjt["a"]})])
        rebuilt = KeyedJaggedTensor(keys=["c"], values=kjt.values(), lengths=kjt.lengths())
        return (
            a
            + b.sum()
            + grouped[1].sum()
            + named["only_x"].sum()
            + rebuilt.values().float().sum()
            + both.values().float().sum()
        )


def test_fx_symbolic_trace_of_a_module_taking_a_kjt() -> None:
    model = _Model()
    gm = torch.fx.symbolic_trace(model)
    code = gm.code
    assert "permute" in code and "_regroup" in code and "KeyedJaggedTensor" in code
    assert "_kjt_concat" in code and "_from_jt_dict" in code and "_regroup_as_dict" in code
    kjt = sample_kjt()
    kt = KeyedTensor(["x", "y"], [1, 2], torch.randn(2, 3))
    # The traced module takes a KJT whose lengths sum differently: no constants baked in.
    other = KeyedJaggedTensor(["a", "b"], torch.arange(4), lengths=torch.tensor([2, 0, 1, 1]))
    for k in (kjt, other):
        assert torch.allclose(gm(k, kt), model(k, kt))


def test_compile_fullgraph_common_methods() -> None:
    kjt = sample_kjt()

    def per_key(k: KeyedJaggedTensor) -> tuple[torch.Tensor, ...]:
        d = k.to_dict()
        p = k.permute([1, 0])
        _, right = k.split([1, 1])
        return (
            k.offsets(),
            d["b"].values() + 1,
            k["a"].weights(),
            p.values(),
            p.lengths(),
            right.values(),
        )

    compiled = torch.compile(per_key, fullgraph=True, backend="eager")
    got, expected = compiled(kjt), per_key(sample_kjt())
    for g, e in zip(got, expected, strict=True):
        assert torch.equal(g, e)


def test_compile_fullgraph_construct_and_regroup() -> None:
    def build(values: torch.Tensor, lengths: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        k = KeyedJaggedTensor(keys=["a", "b"], values=values, lengths=lengths)
        kt = KeyedTensor(["x", "y"], [1, 2], dense)
        (g,) = KeyedTensor.regroup([kt], [["y", "x"]])
        return k.offsets().sum() + g.sum()

    values, lengths, dense = torch.arange(6), torch.tensor([1, 2, 0, 3]), torch.randn(2, 3)
    compiled = torch.compile(build, fullgraph=True, backend="eager")
    assert torch.allclose(compiled(values, lengths, dense), build(values, lengths, dense))


_FRESH_TRACE = """
import torch, torch.fx
from shardrec_jagged import KeyedJaggedTensor

class M(torch.nn.Module):
    def forward(self, kjt):
        jt = KeyedJaggedTensor.from_jt_dict({"z": kjt["a"]})
        return KeyedJaggedTensor.concat([kjt, jt]).values()

code = torch.fx.symbolic_trace(M()).code
assert "kjt_concat" in code and "from_jt_dict" in code, code
print("traced")
"""


def test_fx_trace_of_concat_in_a_fresh_process() -> None:
    # Regression: concat/from_jt_dict were imported on first call, so a trace in a process
    # that had never called them ran their bodies on Proxies (TraceError) instead of
    # recording one wrapped call. A fresh interpreter is the only way to see import order.
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_TRACE], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("traced")


class _TakesKJT(torch.nn.Module):
    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        return kjt.values() * 2 + kjt.lengths().sum()


def test_exported_program_taking_a_kjt_saves_and_reloads(tmp_path: pathlib.Path) -> None:
    # torch.export.save serializes the KJT's pytree context (keys, stride, ...) as text.
    kjt = KeyedJaggedTensor(
        keys=["a", "b"],
        values=torch.tensor([1.0, 2.0, 3.0]),
        lengths=torch.tensor([1, 0, 1, 1]),
    )
    program = torch.export.export(_TakesKJT(), (kjt,))
    torch.export.save(program, tmp_path / "m.pt2")
    reloaded = torch.export.load(tmp_path / "m.pt2")
    other = KeyedJaggedTensor(
        keys=["a", "b"],
        values=torch.tensor([4.0, 5.0, 6.0]),
        lengths=torch.tensor([0, 2, 1, 0]),
    )
    assert torch.equal(reloaded.module()(other), _TakesKJT()(other))
