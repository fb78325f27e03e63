"""JaggedTensor against lists of bags: conversions, padding, constructors, device moves."""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st
from jagged_reference import jagged_settings, jt_lists, jt_wlists

from shardrec_jagged import JaggedTensor

bags_st = st.lists(st.lists(st.integers(-50, 50), max_size=5), max_size=6)


def build(bags: list[list[int]], via: str, weighted: bool) -> JaggedTensor:
    values = torch.tensor([v for b in bags for v in b], dtype=torch.int64)
    lengths = torch.tensor([len(b) for b in bags], dtype=torch.int32)
    offsets = torch.tensor([sum(len(b) for b in bags[:i]) for i in range(len(bags) + 1)])
    weights = values.float() / 2 if weighted else None
    return JaggedTensor(
        values,
        weights=weights,
        lengths=lengths if via != "offsets" else None,
        offsets=offsets if via != "lengths" else None,
        validate=True,
    )


@jagged_settings
@given(bags=bags_st, via=st.sampled_from(["lengths", "offsets", "both"]), weighted=st.booleans())
def test_lengths_offsets_and_to_dense(bags: list[list[int]], via: str, weighted: bool) -> None:
    jt = build(bags, via, weighted)
    assert jt.lengths().tolist() == [len(b) for b in bags]
    assert jt.offsets().tolist()[-1] == sum(len(b) for b in bags)
    assert jt_lists(jt) == bags
    assert [t.tolist() for t in jt.to_dense()] == bags
    dense_w = jt.to_dense_weights()
    if weighted:
        assert dense_w is not None
        assert [t.tolist() for t in dense_w] == [[v / 2 for v in b] for b in bags]
        assert jt_wlists(jt) == [[v / 2 for v in b] for b in bags]
    else:
        assert dense_w is None and jt.weights_or_none() is None


@jagged_settings
@given(
    bags=bags_st,
    desired=st.one_of(st.none(), st.integers(0, 6)),
    pad=st.sampled_from([0.0, -1.0, 7.5]),
)
def test_to_padded_dense(bags: list[list[int]], desired: int | None, pad: float) -> None:
    jt = build(bags, "lengths", weighted=True)
    width = max((len(b) for b in bags), default=0) if desired is None else desired
    expected = [[float(v) for v in b[:width]] + [pad] * (width - len(b[:width])) for b in bags]
    out = JaggedTensor(jt.values().float(), lengths=jt.lengths()).to_padded_dense(desired, pad)
    assert out.shape == (len(bags), width)
    assert out.tolist() == expected
    w = jt.to_padded_dense_weights(desired, pad)
    assert w is not None
    assert w.tolist() == [
        [v / 2 for v in b[:width]] + [pad] * (width - len(b[:width])) for b in bags
    ]


def test_to_padded_dense_keeps_trailing_dims() -> None:
    values = torch.arange(6.0).view(3, 2)  # 3 ids, each a 2-vector
    jt = JaggedTensor(values, lengths=torch.tensor([2, 0, 1]))
    out = jt.to_padded_dense(2)
    assert out.shape == (3, 2, 2)
    assert out[0].tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert out[1].tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert out[2].tolist() == [[4.0, 5.0], [0.0, 0.0]]
    assert JaggedTensor(values, lengths=torch.tensor([3])).to_padded_dense_weights() is None


@jagged_settings
@given(bags=bags_st, weighted=st.booleans())
def test_from_dense_and_from_dense_lengths(bags: list[list[int]], weighted: bool) -> None:
    tensors = [torch.tensor(b, dtype=torch.int64) for b in bags]
    weights = [t.float() for t in tensors] if weighted else None
    jt = JaggedTensor.from_dense(tensors, weights)
    assert jt_lists(jt) == bags
    assert jt.lengths().dtype == torch.int32
    if weighted:
        assert jt_wlists(jt) == [[float(v) for v in b] for b in bags]
    width = max((len(b) for b in bags), default=0)
    padded = torch.tensor([b + [0] * (width - len(b)) for b in bags], dtype=torch.int64)
    padded = padded.view(len(bags), width)
    lengths = torch.tensor([len(b) for b in bags], dtype=torch.int64)
    jt2 = JaggedTensor.from_dense_lengths(padded, lengths, padded.float() if weighted else None)
    assert jt_lists(jt2) == bags
    if weighted:
        assert jt_wlists(jt2) == [[float(v) for v in b] for b in bags]


def test_empty_empty_like_to_copy() -> None:
    e = JaggedTensor.empty(is_weighted=True, values_dtype=torch.int64)
    assert e.values().numel() == 0 and e.lengths().numel() == 0
    assert e.offsets().tolist() == []  # TorchRec: no entry for zero bags
    assert e.weights().numel() == 0
    jt = build([[1, 2], [], [3]], "both", weighted=True)
    like = JaggedTensor.empty_like(jt)
    assert like.values().dtype == torch.int64 and like.weights().dtype == torch.float32
    assert like.lengths().dtype == torch.int32 and like.lengths().numel() == 0
    moved = jt.to(torch.device("cpu"))
    assert jt_lists(moved) == [[1, 2], [], [3]]
    target = build([[0, 0], [], [0]], "both", weighted=True)
    target.copy_(jt)
    assert jt_lists(target) == [[1, 2], [], [3]]
    assert jt.size_in_bytes() == 3 * 8 + 3 * 4 + 3 * 4 + 4 * 8
    assert JaggedTensor.from_dense([]).lengths().numel() == 0
    assert jt.device() == torch.device("cpu")


def test_repr() -> None:
    jt = build([[1, 2], [], [3]], "lengths", weighted=True)
    assert repr(jt) == "JaggedTensor(values=[[1, 2], [], [3]], weights=[[0.5, 1.0], [], [1.5]])"
