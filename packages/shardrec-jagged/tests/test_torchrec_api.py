"""TorchRec 1.8 API of torchrec.sparse (issue 19): each name against a reference written here
(naive loops over bags and keys), plus the layouts TorchRec fixes (str, empty, pytree, scripting).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.utils._pytree as pytree
from torch.fx._pytree import tree_flatten_spec

from shardrec_jagged import (
    ComputeJTDictToKJT,
    ComputeKJTToJTDict,
    JaggedDtypeError,
    JaggedTensor,
    KeyedJaggedTensor,
    KeyedTensor,
    is_fx_tracing,
    jt_is_equal,
    kjt_is_equal,
    permute_multi_embedding,
    regroup_kts,
    validate_keyed_jagged_tensor,
)
from shardrec_jagged._torch_kernels import to_host_list
from shardrec_jagged.torchrec_private import _all_keys_used_once


def _kjt(seed: int, n_keys: int = 3, batch: int = 4, weighted: bool = True) -> KeyedJaggedTensor:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (n_keys * batch,), generator=g, dtype=torch.int32)
    n = int(lengths.sum())
    return KeyedJaggedTensor(
        keys=[f"f{i}" for i in range(n_keys)],
        values=torch.randint(0, 50, (n,), generator=g).float(),
        weights=torch.rand(n, generator=g) if weighted else None,
        lengths=lengths,
    )


def _bags(values: torch.Tensor, lengths: list[int]) -> list[list[object]]:
    """Reference: the bags as Python lists, walking the lengths."""
    out, start = [], 0
    for n in lengths:
        out.append(values[start : start + n].tolist())
        start += n
    return out


# --- str(): TorchRec's format -------------------------------------------------------------------


def _text(bags: list[list[object]]) -> str:
    return "[" + ", ".join("[" + ", ".join(str(v) for v in b) + "]" for b in bags) + "]"


@pytest.mark.parametrize("weighted", [False, True])
def test_kjt_str_lists_every_keys_bags(weighted: bool) -> None:
    kjt = _kjt(1, weighted=weighted)
    lens = kjt.lengths().tolist()
    vals, wts = _bags(kjt.values(), lens), _bags(kjt.weights(), lens) if weighted else None
    entries = []
    for i, key in enumerate(kjt.keys()):
        part = slice(i * kjt.stride(), (i + 1) * kjt.stride())
        if wts is None:
            entries.append(f'    "{key}": {_text(vals[part])}')
        else:
            entries.append(
                f'    "{key}": {{\n        "values": {_text(vals[part])},\n'
                f'        "weights": {_text(wts[part])}\n    }}'
            )
    assert str(kjt) == "KeyedJaggedTensor({\n" + ",\n".join(entries) + "\n})\n"
    assert str(KeyedJaggedTensor([], torch.empty(0))) == "KeyedJaggedTensor()\n"
    assert "KeyedJaggedTensor(" in repr(kjt)  # repr stays the bounded summary


def test_jt_and_kt_str() -> None:
    jt = JaggedTensor(torch.tensor([1, 2, 3]), lengths=torch.tensor([2, 0, 1]))
    assert str(jt) == "JaggedTensor({\n    [[1, 2], [], [3]]\n})\n"
    jt_w = JaggedTensor(torch.tensor([1, 2]), torch.tensor([0.5, 1.5]), torch.tensor([2]))
    assert str(jt_w) == 'JaggedTensor({\n    "values": [[1, 2]],\n    "weights": [[0.5, 1.5]]\n})\n'
    with pytest.raises(ValueError, match="1-D or 2-D values"):
        str(JaggedTensor(torch.zeros(2, 1, 1), lengths=torch.tensor([2])))
    kt = KeyedTensor(["x", "y"], [1, 2], torch.tensor([[1.0, 2.0, 3.0]]))
    assert str(kt) == 'KeyedTensor({\n    "x": [[1.0]],\n    "y": [[2.0, 3.0]]\n})\n'
    assert str(KeyedTensor([], [], torch.empty(0))) == "KeyedTensor()\n"


# --- conversion modules, regroup functions ----------------------------------------------


def test_compute_modules_round_trip_eager_and_scripted() -> None:
    kjt = _kjt(2)
    to_dict, to_kjt = ComputeKJTToJTDict(), ComputeJTDictToKJT()
    for a, b in ((to_dict, to_kjt), (torch.jit.script(to_dict), torch.jit.script(to_kjt))):
        d = a(kjt)
        assert list(d) == kjt.keys()
        lens = kjt.lengths().tolist()
        for i, key in enumerate(kjt.keys()):
            part = slice(i * kjt.stride(), (i + 1) * kjt.stride())
            assert (
                _bags(d[key].values(), d[key].lengths().tolist()) == _bags(kjt.values(), lens)[part]
            )
        back = b(d)
        assert back.keys() == kjt.keys() and torch.equal(back.values(), kjt.values())
        assert torch.equal(back.lengths(), kjt.lengths())


def _kts(seed: int) -> list[KeyedTensor]:
    g = torch.Generator().manual_seed(seed)
    return [
        KeyedTensor(["a", "b"], [2, 3], torch.randn(4, 5, generator=g, requires_grad=True)),
        KeyedTensor(["c"], [1], torch.randn(4, 1, generator=g, requires_grad=True)),
    ]


@pytest.mark.parametrize("fn", [regroup_kts, permute_multi_embedding, KeyedTensor.regroup])
def test_regroup_functions_match_a_naive_gather(fn: object) -> None:
    kts = _kts(3)
    groups = [["c", "a"], ["b"], ["a", "b", "c", "a"]]  # repeats, every key
    out = fn(kts, groups)  # type: ignore[operator]
    for group, got in zip(groups, out, strict=True):
        cols = []
        for key in group:
            for kt in kts:
                if key in kt.keys():  # noqa: SIM118  (a KeyedTensor is not a dict)
                    i = kt.keys().index(key)
                    start = sum(kt.length_per_key()[:i])
                    cols.append(kt.values()[:, start : start + kt.length_per_key()[i]])
        assert torch.equal(got, torch.cat(cols, dim=1))
    # gradients flow back to each input: key c is in two groups
    sum(o.sum() for o in out).backward()
    assert torch.equal(kts[1].values().grad, torch.full((4, 1), 2.0))  # type: ignore[arg-type]


def test_regroup_scripts_and_traces() -> None:
    class M(torch.nn.Module):
        def forward(self, kts: list[KeyedTensor]) -> dict[str, torch.Tensor]:
            return KeyedTensor.regroup_as_dict(kts, [["c"], ["a", "b"]], ["one", "two"])

    class N(torch.nn.Module):
        def forward(self, kts: list[KeyedTensor]) -> list[torch.Tensor]:
            return regroup_kts(kts, [["b", "c"]])

    kts = _kts(4)
    for m in (M(), N()):
        eager = m(kts)
        for other in (torch.jit.script(m), torch.fx.symbolic_trace(m)):
            got = other(kts)
            items = (
                zip(eager.values(), got.values(), strict=True)
                if isinstance(eager, dict)
                else zip(eager, got, strict=True)
            )
            assert all(torch.equal(x, y) for x, y in items)


# --- layouts TorchRec fixes ---------------------------------------------------------------------


def test_empty_and_empty_like_layouts() -> None:
    jt = JaggedTensor.empty(values_dtype=torch.int64)
    assert jt.offsets().numel() == 0 and jt.offsets().dtype == torch.int32
    vb = KeyedJaggedTensor(
        ["a", "b"],
        torch.arange(6),
        lengths=torch.tensor([2, 1, 3]),
        stride_per_key_per_rank=[[2], [1]],
    )
    like = KeyedJaggedTensor.empty_like(vb)
    assert like.keys() == [] and like.values().numel() == 0
    assert like.variable_stride_per_key() and like.stride_per_key_per_rank() == [[2], [1]]
    scripted = torch.jit.script(KeyedJaggedTensor.empty_like)(vb)
    assert scripted.keys() == [] and scripted.stride_per_key_per_rank() == [[2], [1]]
    on_meta = KeyedJaggedTensor.empty_like(_kjt(5), device=torch.device("meta"))
    assert on_meta.values().is_meta and on_meta.keys() == ["f0", "f1", "f2"]


def test_empty_float_lengths_accepted_non_empty_refused() -> None:
    kjt = KeyedJaggedTensor(["a", "b"], torch.tensor([]), lengths=torch.tensor([[], []]))
    d = kjt.to_dict()
    assert d["a"].lengths().shape == (0,) and d["a"].offsets().shape == (0,)
    with pytest.raises(JaggedDtypeError) as info:
        JaggedTensor(torch.arange(3), lengths=torch.tensor([1.0, 2.0]))
    assert isinstance(info.value, TypeError) and isinstance(info.value, AssertionError)


def test_clear_storage_frees_every_tensor() -> None:
    kjt = _kjt(6)
    kjt.offsets()
    kjt.clear_storage()
    for t in (kjt.values(), kjt.weights(), kjt.lengths(), kjt.offsets()):
        assert t.untyped_storage().nbytes() == 0


def test_meta_device_kjt_gives_placeholder_lengths() -> None:
    meta = torch.device("meta")
    kjt = KeyedJaggedTensor(
        ["a", "b", "c"],
        torch.empty(10, device=meta),
        lengths=torch.empty(6, dtype=torch.int64, device=meta),
    )
    assert kjt.length_per_key() == [4, 3, 3]  # values spread over the keys, the first gets the rest
    assert all(jt.values().is_meta for jt in kjt.to_dict().values())


def test_equality_helpers_on_other_objects() -> None:
    kjt = _kjt(7)
    assert kjt_is_equal(
        kjt, KeyedJaggedTensor(kjt.keys(), kjt.values(), kjt.weights(), offsets=kjt.offsets())
    )
    assert not kjt_is_equal(kjt, "not a kjt") and not jt_is_equal(kjt["f0"], 3)


def test_pytree_fewer_leaves_and_kt_flatten_spec() -> None:
    kjt = _kjt(8)
    leaves, spec = pytree.tree_flatten(kjt)
    four = pytree.TreeSpec(spec.type, spec.context, spec.children_specs[:4])
    back = pytree.tree_unflatten(leaves[:4], four)
    assert kjt_is_equal(back, kjt) and back.inverse_indices_or_none() is None
    with pytest.raises(ValueError, match="at most 5 leaves"):
        pytree.tree_unflatten(
            leaves + leaves, pytree.TreeSpec(spec.type, spec.context, spec.children_specs * 2)
        )
    kt = KeyedTensor(["x", "y"], [1, 2], torch.randn(2, 3))
    _, kt_spec = pytree.tree_flatten(kt)
    swapped = KeyedTensor(["y", "x"], [2, 1], torch.cat([kt["y"], kt["x"]], dim=1))
    (flat,) = tree_flatten_spec(swapped, kt_spec)
    assert torch.equal(flat, kt.values())


def test_from_dense_lengths_traces() -> None:
    values = torch.arange(12.0).view(4, 3)
    lengths = torch.tensor([1, 0, 3, 2])
    traced = torch.fx.symbolic_trace(JaggedTensor.from_dense_lengths)
    got = traced(values=values, lengths=lengths)
    assert _bags(got.values(), lengths.tolist()) == [
        values[b, : int(n)].tolist() for b, n in enumerate(lengths)
    ]


def _kjt_from_lengths_sync() -> KeyedJaggedTensor:
    return KeyedJaggedTensor.from_lengths_sync(
        keys=["a", "b"],
        values=torch.arange(5),
        lengths=torch.tensor([2, 1, 2]),
        stride_per_key_per_rank=[[1], [2]],
    )


def _kjt_from_offsets_sync() -> KeyedJaggedTensor:
    return KeyedJaggedTensor.from_offsets_sync(
        keys=["a", "b"],
        values=torch.arange(5),
        offsets=torch.tensor([0, 2, 3, 5]),
        stride_per_key_per_rank=[[1], [2]],
    )


@pytest.mark.parametrize("make", [_kjt_from_lengths_sync, _kjt_from_offsets_sync])
def test_sync_constructors_script_with_variable_batch(
    make: Callable[[], KeyedJaggedTensor],
) -> None:
    got, want = torch.jit.script(make)(), make()
    assert got.stride_per_key() == want.stride_per_key() == [1, 2]
    assert got.length_per_key() == want.length_per_key() == [2, 3]
    assert torch.equal(got.lengths(), want.lengths())
    assert torch.equal(got.offsets(), want.offsets())


def _kjt_from_jt_dict(jts: dict[str, JaggedTensor]) -> KeyedJaggedTensor:
    return KeyedJaggedTensor.from_jt_dict(jts)


@pytest.mark.parametrize("batches", [[], [2, 2], [1, 3]], ids=["empty", "same", "variable"])
def test_from_jt_dict_scripts_like_eager(batches: list[int]) -> None:
    g = torch.Generator().manual_seed(len(batches))
    jts = {
        f"k{i}": JaggedTensor(
            values=torch.randn(n + 1, generator=g), lengths=torch.tensor([1] * (n - 1) + [2])
        )
        for i, n in enumerate(batches)
    }
    got, want = torch.jit.script(_kjt_from_jt_dict)(jts), _kjt_from_jt_dict(jts)
    assert got.keys() == want.keys()
    assert got.stride_per_key() == want.stride_per_key()
    assert got.values().dtype == want.values().dtype
    assert torch.equal(got.values(), want.values())
    assert torch.equal(got.lengths(), want.lengths())


def test_is_fx_tracing_only_inside_symbolic_trace() -> None:
    seen: list[bool] = []

    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(is_fx_tracing())
            return x + 1

    torch.fx.symbolic_trace(M())
    M()(torch.zeros(1))
    assert seen == [True, False]


def test_validate_keyed_jagged_tensor_checks_contents_and_table_ranges() -> None:
    class Table:
        def __init__(self, features: list[str], rows: int) -> None:
            self.feature_names, self.num_embeddings = features, rows

    kjt = KeyedJaggedTensor(
        ["a", "b"], torch.tensor([0, 4, 9, 2]), lengths=torch.tensor([2, 1, 1, 0])
    )
    assert validate_keyed_jagged_tensor(kjt)
    # a: bags [0, 4], [9]; b: bags [2], []
    assert validate_keyed_jagged_tensor(kjt, [Table(["a"], 10), Table(["b"], 3)])
    with pytest.warns(UserWarning, match=r"feature 'a' has ids in \[0, 9\] but its table has 9"):
        assert not validate_keyed_jagged_tensor(kjt, [Table(["a"], 9)])
    bad = KeyedJaggedTensor(["a"], torch.arange(2), lengths=torch.tensor([3, -1]))
    with pytest.raises(ValueError, match=r"lengths\[1\] = -1 is negative"):
        validate_keyed_jagged_tensor(bad)


def test_all_keys_used_once_against_a_count() -> None:
    kts = _kts(9)  # keys a, b | c
    for groups in ([["c", "a"], ["b"]], [["a"], ["b"]], [["a", "b", "c", "a"]], [["a", "b", "c"]]):
        named = [k for g in groups for k in g]
        want = sorted(named) == ["a", "b", "c"]
        assert _all_keys_used_once(kts, groups) is want


def test_to_host_list() -> None:
    assert to_host_list(torch.tensor([3, 5, 7])) == [3, 5, 7]


def test_a_module_taking_a_kjt_scripts_with_no_registration_call(tmp_path: Path) -> None:
    # A fresh process: torch.jit meets KeyedJaggedTensor first through the annotation.
    code = textwrap.dedent("""
        import torch
        from shardrec_jagged import KeyedJaggedTensor
        class M(torch.nn.Module):
            def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
                return kjt["b"].values() * 2
        kjt = KeyedJaggedTensor(["a", "b"], torch.arange(4), lengths=torch.tensor([1, 3]))
        print(torch.jit.script(M())(kjt).tolist())
    """)
    script = tmp_path / "script_kjt.py"  # TorchScript reads the forward's source from a file
    script.write_text(code)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[2, 4, 6]"
