"""The speed-motivated fast paths give what the plain code paths give.

Each fast path (check_keys' join/set test, per-key sums in the lengths' dtype or from offsets,
concat's one-set duplicate check, index tensors via ``frombuffer``) is compared against a naive
Python reference on seeded or hypothesis inputs, plus the edge cases where the fast path must
hand over to the slow one. The permute-index cases pin the behaviour that a fast path there
(tried: a type set plus min/max, no faster than the loop for 26 keys) would have to keep.
"""

from __future__ import annotations

import enum

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from jagged_reference import jagged_settings

from shardrec_jagged import KeyedJaggedTensor, _kernels, _torch_kernels
from shardrec_jagged._validation import check_keys

INT_DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def ref_length_per_key(lengths: list[int], num_keys: int, stride: int) -> list[int]:
    return [sum(lengths[k * stride : (k + 1) * stride]) for k in range(num_keys)]


@jagged_settings
@given(
    num_keys=st.integers(1, 5),
    stride=st.integers(0, 6),
    dtype=st.sampled_from(INT_DTYPES),
    data=st.data(),
)
def test_length_per_key_kernels_match_reference(
    num_keys: int, stride: int, dtype: torch.dtype, data: st.DataObject
) -> None:
    lengths = data.draw(
        st.lists(st.integers(0, 9), min_size=num_keys * stride, max_size=num_keys * stride)
    )
    t = torch.tensor(lengths, dtype=dtype)
    expected = ref_length_per_key(lengths, num_keys, stride)
    assert _torch_kernels.length_per_key(t, num_keys, stride) == expected
    offsets = _kernels.lengths_to_offsets(t.to(torch.int64))
    assert _torch_kernels.length_per_key_from_offsets(offsets, num_keys, stride) == expected


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16])
def test_length_per_key_of_narrow_dtypes_does_not_overflow(dtype: torch.dtype) -> None:
    # 100 ids in each of 4 bags: 400 per key overflows int8/uint8 (and 1000 x 40 int16).
    per_bag, stride = (100, 4) if dtype != torch.int16 else (1000, 40)
    lengths = torch.full((2 * stride,), per_bag, dtype=dtype)
    assert _torch_kernels.length_per_key(lengths, 2, stride) == [per_bag * stride] * 2
    kjt = KeyedJaggedTensor(
        ["a", "b"], torch.zeros(2 * per_bag * stride, dtype=torch.int64), lengths=lengths
    )
    assert kjt.length_per_key() == [per_bag * stride] * 2


def test_length_per_key_prefers_offsets_and_agrees_with_lengths() -> None:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(0, 5, (3 * 7,), generator=g, dtype=torch.int32)
    offsets = _kernels.lengths_to_offsets(lengths)
    values = torch.arange(int(lengths.sum()))
    expected = ref_length_per_key(lengths.tolist(), 3, 7)
    for kw in (
        {"lengths": lengths},
        {"offsets": offsets},
        {"lengths": lengths, "offsets": offsets},
    ):
        kjt = KeyedJaggedTensor(["a", "b", "c"], values, **kw)  # type: ignore[arg-type]
        assert kjt.length_per_key() == expected


def test_length_per_key_from_offsets_of_an_empty_batch() -> None:
    kjt = KeyedJaggedTensor(["a", "b"], torch.zeros(0), offsets=torch.zeros(0, dtype=torch.int32))
    assert kjt.stride() == 0
    assert kjt.length_per_key() == [0, 0]
    kjt1 = KeyedJaggedTensor(["a", "b"], torch.zeros(0), offsets=torch.zeros(1, dtype=torch.int32))
    assert kjt1.length_per_key() == [0, 0]


@jagged_settings
@given(
    num_keys=st.integers(1, 5),
    stride=st.integers(1, 6),
    dtype=st.sampled_from(INT_DTYPES),
    step=st.sampled_from([1, 2]),
    data=st.data(),
)
def test_length_per_key_and_min_matches_reference(
    num_keys: int, stride: int, dtype: torch.dtype, step: int, data: st.DataObject
) -> None:
    # int32/int64 on CPU take the numpy view, the rest torch; step 2 reads a strided view.
    low = 0 if dtype == torch.uint8 else -3
    n = num_keys * stride
    lengths = data.draw(st.lists(st.integers(low, 9), min_size=n, max_size=n))
    full = torch.tensor([x for x in lengths for _ in range(step)], dtype=dtype)
    t = full[::step]
    assert t.tolist() == lengths
    sums, smallest = _kernels.length_per_key_and_min(t, num_keys, stride)
    assert sums == ref_length_per_key(lengths, num_keys, stride)
    assert smallest == min(lengths)
    assert all(type(x) is int for x in [*sums, smallest])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16])
def test_length_per_key_hot_path_checks_negatives_and_the_total(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(3)
    lengths = torch.randint(0, 6, (4 * 9,), generator=g).to(dtype)
    n = int(lengths.sum())
    keys = ["a", "b", "c", "d"]
    kjt = KeyedJaggedTensor(keys, torch.arange(n + 2), lengths=lengths)  # a longer buffer: fine
    assert kjt.length_per_key() == ref_length_per_key(lengths.tolist(), 4, 9)
    short = KeyedJaggedTensor(keys, torch.arange(n - 1), lengths=lengths)
    with pytest.raises(ValueError, match=rf"lengths sum to {n} .* values has only {n - 1}"):
        short.length_per_key()
    bad = lengths.clone()
    bad[20], bad[21] = -1, int(bad[21]) + 1  # key 'c''s sum is unchanged
    with pytest.raises(ValueError, match=r"lengths\[20\] = -1 is negative \(key 'c', sample 2\)"):
        KeyedJaggedTensor(keys, torch.arange(n), lengths=bad).length_per_key()


def test_length_per_key_from_offsets_still_checks_the_total() -> None:
    kjt = KeyedJaggedTensor(["a", "b"], torch.arange(3), offsets=torch.tensor([0, 1, 2, 3, 5]))
    with pytest.raises(ValueError, match=r"offsets\[-1\] = 5 but values has only 3 entries"):
        kjt.length_per_key()


class Name(str):
    """A str subclass: accepted as a key, like any str."""


@pytest.mark.parametrize(
    "keys",
    [["a", "b"], ("a", "b"), [Name("a"), "b"], [], ["only"]],
    ids=["list", "tuple", "str-subclass", "empty", "one"],
)
def test_check_keys_accepts_str_sequences(keys: list[str]) -> None:
    out = check_keys(keys)
    assert out == list(keys) and type(out) is list
    assert out is not keys  # a copy: the caller's list may change later


@pytest.mark.parametrize(
    ("keys", "error", "message"),
    [
        (["a", ["b"]], TypeError, r"keys must be str, got list \['b'\]"),
        (["a", 3, "a"], TypeError, r"keys must be str, got int 3"),
        (["a", b"b"], TypeError, r"keys must be str, got bytes b'b'"),
        (["x", "y", "x"], ValueError, r"duplicate key 'x' in keys \['x', 'y', 'x'\]"),
        ("ab", TypeError, r"keys must be a list of str, got str: 'ab'"),
        (7, TypeError, r"keys must be a list of str, got int: 7"),
    ],
)
def test_check_keys_rejects(keys: object, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        check_keys(keys)  # type: ignore[arg-type]


def _kjt(keys: list[str]) -> KeyedJaggedTensor:
    n = len(keys)
    return KeyedJaggedTensor(keys, torch.arange(2 * n), lengths=torch.full((2 * n,), 1))


def test_concat_keeps_a_key_repeated_inside_one_input() -> None:
    rep = _kjt(["a", "b"]).permute([0, 0, 1])
    out = KeyedJaggedTensor.concat([rep, _kjt(["c"])])
    assert out.keys() == ["a", "a", "b", "c"]
    assert out.values().tolist() == [*rep.values().tolist(), 0, 1]
    with pytest.raises(ValueError, match=r"duplicate key 'b' in concat: kjt_list\[0\] and "):
        KeyedJaggedTensor.concat([rep, _kjt(["b"])])


def test_concat_names_the_second_holder_of_a_duplicate() -> None:
    with pytest.raises(ValueError, match=r"duplicate key 'c' .* kjt_list\[1\] and kjt_list\[2\]"):
        KeyedJaggedTensor.concat([_kjt(["a"]), _kjt(["b", "c"]), _kjt(["c"])])


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("indices", [[3, 0, 2, 2], [0], [], list(range(40))[::-1]])
def test_index_tensor_matches_torch_tensor(indices: list[int], dtype: torch.dtype) -> None:
    for device in (torch.device("cpu"), torch.device("meta")):
        got = _torch_kernels.index_tensor(indices, device, dtype)
        want = torch.tensor(indices, dtype=dtype, device=device)
        assert got.dtype == dtype and got.device == device and got.shape == want.shape
        if device.type == "cpu":
            assert got.tolist() == indices


def test_index_tensor_owns_its_values() -> None:
    indices = [1, 2, 3]
    t = _torch_kernels.index_tensor(indices, torch.device("cpu"))
    indices[0] = 99  # the tensor copied the list (into its own buffer)
    assert t.tolist() == [1, 2, 3]


class Slot(enum.IntEnum):
    A = 0
    B = 1


@pytest.mark.parametrize(
    ("indices", "expected"),
    [([1, 0, 1], ["b", "a", "b"]), ([], []), ([Slot.B, Slot.A], ["b", "a"])],
    ids=["repeat", "empty", "int-subclass"],
)
def test_permute_indices_accepted(indices: list[int], expected: list[str]) -> None:
    kjt = _kjt(["a", "b"])
    assert kjt.permute(indices).keys() == expected


@pytest.mark.parametrize(
    ("indices", "error", "message"),
    [
        ([0, True], TypeError, r"permute indices must be int, got bool True"),
        ([0, 1.0], TypeError, r"permute indices must be int, got float 1.0"),
        ([0, 2], IndexError, r"permute index 2 is out of range for 2 keys"),
        ([-1, 0], IndexError, r"permute index -1 is out of range for 2 keys"),
    ],
)
def test_permute_indices_rejected(indices: list[int], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        _kjt(["a", "b"]).permute(indices)
