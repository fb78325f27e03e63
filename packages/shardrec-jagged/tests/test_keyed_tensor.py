"""KeyedTensor against per-key dense tensors: lookup, to_dict, regroup (values and gradients)."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st
from jagged_reference import jagged_settings

from shardrec_jagged import KeyedTensor


@st.composite
def keyed_tensors(draw: st.DrawFn) -> tuple[list[KeyedTensor], dict[str, torch.Tensor]]:
    """1-3 KeyedTensors over distinct keys, plus the reference key -> (B, width) tensor."""
    batch = draw(st.integers(0, 3))
    n_tensors = draw(st.integers(1, 3))
    kts: list[KeyedTensor] = []
    ref: dict[str, torch.Tensor] = {}
    g = torch.Generator().manual_seed(draw(st.integers(0, 1000)))
    for t in range(n_tensors):
        widths = draw(st.lists(st.integers(0, 3), max_size=3))
        keys = [f"t{t}k{i}" for i in range(len(widths))]
        tensors = [torch.randn(batch, w, generator=g) for w in widths]
        ref.update(zip(keys, tensors, strict=True))
        if tensors:
            kts.append(KeyedTensor.from_tensor_list(keys, tensors))
        else:
            kts.append(KeyedTensor([], [], torch.zeros(batch, 0)))
    return kts, ref


@jagged_settings
@given(case=keyed_tensors())
def test_getitem_to_dict_offsets(case: tuple[list[KeyedTensor], dict[str, torch.Tensor]]) -> None:
    kts, ref = case
    for kt in kts:
        d = kt.to_dict()
        assert list(d) == kt.keys()
        offset = 0
        for i, key in enumerate(kt.keys()):
            assert torch.equal(kt[key], ref[key])
            assert torch.equal(d[key], ref[key])
            assert kt.offset_per_key()[i] == offset
            offset += ref[key].size(1)
        assert kt.offset_per_key()[-1] == offset
        names = kt.keys()
        assert kt.length_per_key() == [ref[k].size(1) for k in names]


@jagged_settings
@given(case=keyed_tensors(), data=st.data())
def test_regroup_matches_cat_of_reference(
    case: tuple[list[KeyedTensor], dict[str, torch.Tensor]], data: st.DataObject
) -> None:
    kts, ref = case
    all_keys = list(ref)
    if not all_keys:
        return
    groups = data.draw(
        st.lists(st.lists(st.sampled_from(all_keys), min_size=1, max_size=4), max_size=3)
    )
    out = KeyedTensor.regroup(kts, groups)
    assert len(out) == len(groups)
    for got, group in zip(out, groups, strict=True):
        assert torch.equal(got, torch.cat([ref[k] for k in group], dim=1))
    names = [f"g{i}" for i in range(len(groups))]
    as_dict = KeyedTensor.regroup_as_dict(kts, groups, names)
    assert list(as_dict) == names
    for name, got in zip(names, out, strict=True):
        assert torch.equal(as_dict[name], got)


def test_regroup_gradients_flow_to_every_use() -> None:
    a = torch.randn(2, 3, requires_grad=True)
    b = torch.randn(2, 2, requires_grad=True)
    kt1 = KeyedTensor(["x", "y"], [1, 2], a)
    kt2 = KeyedTensor(["z"], [2], b)
    g1, g2 = KeyedTensor.regroup([kt1, kt2], [["z", "x"], ["y", "x"]])
    (g1.sum() * 2 + g2.sum()).backward()
    assert a.grad is not None and b.grad is not None
    assert a.grad.tolist() == [[3.0, 1.0, 1.0]] * 2  # "x" used in both groups
    assert b.grad.tolist() == [[2.0, 2.0]] * 2


def test_key_dim_zero_and_empty_group() -> None:
    values = torch.arange(12.0).view(4, 3)
    kt = KeyedTensor(["a", "b"], [1, 3], values, key_dim=0)
    assert torch.equal(kt["b"], values[1:])
    assert kt.key_dim() == 0
    out = KeyedTensor.regroup([kt], [["b", "a"], []])
    assert torch.equal(out[0], torch.cat([values[1:], values[:1]]))
    assert out[1].shape == (0, 3)


def test_to_repr_size() -> None:
    kt = KeyedTensor.from_tensor_list(["a", "b"], [torch.ones(2, 1), torch.zeros(2, 2)])
    moved = kt.to(torch.device("cpu"))
    assert moved.keys() == ["a", "b"] and torch.equal(moved.values(), kt.values())
    assert kt.size_in_bytes() == 2 * 3 * 4
    assert kt.device() == torch.device("cpu")
    assert repr(kt).splitlines()[1] == "  'a': [[1.0], [1.0]]"
    assert repr(KeyedTensor([], [], torch.zeros(2, 0))) == "KeyedTensor(keys=[])"
