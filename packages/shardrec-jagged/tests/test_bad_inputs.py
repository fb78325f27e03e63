"""Every bad input of the issue: the exception type, and a message naming the offending value."""

from __future__ import annotations

import pytest
import torch

from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor, UnknownKeyError


def kjt(**kw: object) -> KeyedJaggedTensor:
    args: dict[str, object] = {
        "keys": ["a", "b"],
        "values": torch.arange(4),
        "lengths": torch.tensor([1, 1, 2, 0]),
    }
    args.update(kw)
    return KeyedJaggedTensor(**args)  # type: ignore[arg-type]


# --- lengths and offsets that disagree --------------------------------------------------------


def test_lengths_offsets_disagree_in_size_at_construction() -> None:
    with pytest.raises(ValueError, match=r"lengths has 4 entries, offsets has 4"):
        kjt(offsets=torch.tensor([0, 1, 2, 4]))


def test_lengths_offsets_disagree_in_content_at_first_read() -> None:
    both = kjt(offsets=torch.tensor([0, 1, 3, 4, 4]))  # lengths say bag 1 holds 1 id
    with pytest.raises(ValueError, match=r"disagree at bag 1: lengths\[1\] = 1 .* = 2"):
        both.length_per_key()
    agreeing = kjt(offsets=torch.tensor([0, 1, 2, 4, 4]))
    assert agreeing.length_per_key() == [2, 2]


def test_lengths_offsets_disagree_in_content_on_validate() -> None:
    with pytest.raises(ValueError, match=r"disagree at bag 1: lengths\[1\] = 1 .* = 2"):
        kjt(offsets=torch.tensor([0, 1, 3, 4, 4]), validate=True)
    jt = JaggedTensor(
        torch.arange(3), lengths=torch.tensor([1, 2]), offsets=torch.tensor([0, 2, 3])
    )
    with pytest.raises(ValueError, match=r"lengths\[0\] = 1 but offsets\[1\] - offsets\[0\] = 2"):
        jt.validate()


# --- lengths against values.size(0): a longer buffer is accepted, a shorter one is not ---------


def test_lengths_summing_past_values_fail_at_first_method_that_sees_it() -> None:
    bad = kjt(values=torch.arange(3))  # lengths sum to 4
    with pytest.raises(ValueError, match=r"lengths sum to 4 .* values has only 3 entries"):
        bad.length_per_key()
    with pytest.raises(ValueError, match=r"lengths sum to 4 .* values has only 3 entries"):
        bad.to_dict()
    with pytest.raises(ValueError, match=r"sum to 4 but values has only 3"):
        kjt(values=torch.arange(3), validate=True)


def test_values_buffer_longer_than_lengths_use_is_accepted() -> None:
    # TorchRec accepts it (a preallocated buffer): the tail is never read.
    longer = kjt(values=torch.arange(7))  # lengths [1, 1 | 2, 0] use 4
    reference = kjt(values=torch.arange(4))
    assert longer.length_per_key() == reference.length_per_key() == [2, 2]
    for key in ("a", "b"):
        assert torch.equal(longer[key].values(), reference[key].values())
        assert torch.equal(longer.to_dict()[key].values(), reference.to_dict()[key].values())
    assert torch.equal(longer.permute([1, 0]).values()[:4], reference.permute([1, 0]).values())
    both = KeyedJaggedTensor.concat([longer, kjt(keys=["c", "d"])])
    assert torch.equal(both["c"].values(), torch.arange(4)[:2])
    kjt(values=torch.arange(7), validate=True)  # content check agrees
    JaggedTensor(torch.arange(5), lengths=torch.tensor([1, 2]), validate=True)


def test_offsets_ending_past_values() -> None:
    bad = kjt(lengths=None, offsets=torch.tensor([0, 1, 2, 4, 6]), values=torch.arange(5))
    with pytest.raises(ValueError, match=r"offsets\[-1\] = 6 but values has only 5 entries"):
        bad.length_per_key()
    with pytest.raises(ValueError, match=r"offsets\[-1\] = 6 but values has only 5"):
        bad.validate()


def test_values_without_bags_are_an_unused_buffer() -> None:
    empty = kjt(lengths=torch.empty(0, dtype=torch.int64), values=torch.arange(3))
    assert empty.stride() == 0 and empty.length_per_key() == [0, 0]
    assert empty["a"].values().numel() == 0


def test_given_length_per_key_checked_against_values() -> None:
    with pytest.raises(ValueError, match=r"lengths sum to 5 \(length_per_key=\[2, 3\]\)"):
        kjt(length_per_key=[2, 3])
    with pytest.raises(ValueError, match=r"length_per_key has 1 entries for 2 keys"):
        kjt(length_per_key=[4])


def test_jagged_tensor_lengths_past_values_or_negative() -> None:
    # JaggedTensor reads its lengths only in to_dense / to_padded_dense / str: it checks there.
    short = JaggedTensor(torch.arange(3), lengths=torch.tensor([2, 2]))
    for call in (short.to_dense, short.to_padded_dense, short.__str__):
        with pytest.raises(ValueError, match=r"lengths sum to 4 but values has only 3"):
            call()
    negative = JaggedTensor(torch.arange(3), lengths=torch.tensor([3, -1, 1]))
    for call in (negative.to_dense, negative.to_padded_dense):
        with pytest.raises(ValueError, match=r"lengths\[1\] = -1 is negative"):
            call()


# --- negative lengths --------------------------------------------------------------------------


def test_negative_lengths() -> None:
    with pytest.raises(ValueError, match=r"lengths\[2\] = -1 is negative"):
        kjt(lengths=torch.tensor([1, 2, -1, 2]), validate=True)
    with pytest.raises(ValueError, match=r"lengths\[0\] = -2 is negative"):
        JaggedTensor(torch.arange(1), lengths=torch.tensor([-2, 3]), validate=True)
    # Caught without validate, by length_per_key, also where the key's sum is not negative.
    for lengths, where in (
        ([-1, 0, 3, 2], r"lengths\[0\] = -1 .*key 'a', sample 0"),
        ([1, 1, 3, -1], r"lengths\[3\] = -1 .*key 'b', sample 1"),
    ):
        bad = kjt(lengths=torch.tensor(lengths))
        with pytest.raises(ValueError, match=where):
            bad.length_per_key()


def test_decreasing_offsets() -> None:
    with pytest.raises(ValueError, match=r"offsets decrease at index 2 \(3 -> 1\)"):
        kjt(lengths=None, offsets=torch.tensor([0, 3, 1, 4, 4]), validate=True)
    with pytest.raises(ValueError, match=r"offsets\[0\] = 1; offsets must start at 0"):
        JaggedTensor(torch.arange(3), offsets=torch.tensor([1, 3]), validate=True)
    # Without validate: named as an offsets problem, not as a lengths one.
    not_at_zero = kjt(lengths=None, offsets=torch.tensor([2, 3, 4, 4, 4]))
    with pytest.raises(ValueError, match=r"offsets\[0\] = 2; offsets must start at 0"):
        not_at_zero.length_per_key()
    falling = kjt(lengths=None, offsets=torch.tensor([0, 3, 4, 4, 2]))
    within_b = r"offsets decrease within key 'b' \(from 4 at its first bag to 2"
    with pytest.raises(ValueError, match=within_b):
        falling.length_per_key()
    inside = kjt(lengths=None, offsets=torch.tensor([0, 3, 4, 1, 4]))  # inside key 'b'
    with pytest.raises(ValueError, match=r"offsets decrease at index 3 \(4 -> 1\)"):
        inside.validate()  # a full pass: not done for free


# --- non-integer lengths / offsets ------------------------------------------------------------


@pytest.mark.parametrize("name", ["lengths", "offsets"])
def test_non_integer_lengths_or_offsets(name: str) -> None:
    floats = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0])
    kw = {"lengths": None, name: floats[:4] if name == "lengths" else floats}
    with pytest.raises(TypeError, match=rf"{name} must be an integer tensor .* torch.float32"):
        kjt(**kw)
    with pytest.raises(TypeError, match=rf"{name} must be an integer tensor"):
        JaggedTensor(torch.arange(4), **{name: floats})  # type: ignore[arg-type]


def test_lengths_not_1d() -> None:
    with pytest.raises(ValueError, match=r"lengths must be 1-D, got shape \(2, 2\)"):
        kjt(lengths=torch.tensor([[1, 1], [2, 0]]))


def test_neither_lengths_nor_offsets() -> None:
    with pytest.raises(ValueError, match="pass lengths or offsets"):
        kjt(lengths=None)
    with pytest.raises(ValueError, match="pass lengths or offsets"):
        JaggedTensor(torch.arange(3))


# --- lengths.numel() not a multiple of the key count -------------------------------------------


def test_lengths_not_multiple_of_keys() -> None:
    with pytest.raises(ValueError, match=r"lengths has 3 entries, not a multiple of the 2 keys"):
        kjt(lengths=torch.tensor([1, 1, 2]))
    with pytest.raises(ValueError, match=r"lengths has 4 entries but stride 3 x 2 keys = 6"):
        kjt(stride=3)
    with pytest.raises(ValueError, match=r"no keys cannot have 4 bags"):
        kjt(keys=[])


def test_given_caches_that_disagree_with_shapes() -> None:
    with pytest.raises(ValueError, match=r"stride_per_key \[2, 3\] disagrees with stride 2"):
        kjt(stride_per_key=[2, 3])
    with pytest.raises(ValueError, match=r"lengths_offset_per_key \[0, 2, 5\] must have 3"):
        kjt(lengths_offset_per_key=[0, 2, 5])
    with pytest.raises(ValueError, match=r"offset_per_key \[0, 1, 5\] must have 3 entries"):
        kjt(offset_per_key=[0, 1, 5])


def test_variable_batch_strides_that_do_not_match_lengths() -> None:
    with pytest.raises(ValueError, match=r"gives 3 bags \(per key \[1, 2\]\) but lengths has 4"):
        kjt(stride_per_key_per_rank=[[1], [2]])
    with pytest.raises(ValueError, match=r"stride_per_key_per_rank has 1 rows for 2 keys"):
        kjt(stride_per_key_per_rank=[[4]])
    with pytest.raises(ValueError, match=r"different rank counts: \[\[1, 1\], \[2\]\]"):
        kjt(stride_per_key_per_rank=[[1, 1], [2]])


# --- weights shorter than values (a longer weights buffer is accepted, as TorchRec) -------------


def test_weights_shorter_than_values() -> None:
    with pytest.raises(ValueError, match=r"weights has 3 entries but values has 4"):
        kjt(weights=torch.ones(3))
    with pytest.raises(ValueError, match=r"weights has 3 entries but values has 4"):
        JaggedTensor(torch.arange(4), weights=torch.ones(3), lengths=torch.tensor([4]))


def test_weights_buffer_longer_than_values() -> None:
    weights = torch.arange(10, dtype=torch.float32)
    longer = kjt(weights=weights)
    exact = kjt(weights=weights[:4])
    for key in ("a", "b"):
        assert torch.equal(longer[key].weights(), exact[key].weights())
        assert torch.equal(longer.to_dict()[key].weights(), exact.to_dict()[key].weights())
    assert torch.equal(longer.permute([1, 0]).weights(), exact.permute([1, 0]).weights())


# --- duplicate keys ------------------------------------------------------------------------------


def test_duplicate_keys() -> None:
    with pytest.raises(ValueError, match=r"duplicate key 'a' in keys \['a', 'a'\]"):
        kjt(keys=["a", "a"])
    with pytest.raises(ValueError, match=r"duplicate key 'x'"):
        KeyedTensor(["x", "x"], [1, 1], torch.zeros(2, 2))


def test_keys_must_be_a_list_of_str() -> None:
    with pytest.raises(TypeError, match=r"keys must be a list of str, got str: 'ab'"):
        kjt(keys="ab")
    with pytest.raises(TypeError, match=r"keys must be str, got int 3"):
        kjt(keys=["a", 3])


# --- unknown keys in __getitem__ / permute -----------------------------------------------------


def test_unknown_key_in_getitem() -> None:
    with pytest.raises(UnknownKeyError, match=r"unknown key 'zz'; this KeyedJaggedTensor has"):
        kjt()["zz"]
    with pytest.raises(KeyError):  # still a KeyError, as in TorchRec
        kjt()["zz"]
    kt = KeyedTensor(["x"], [2], torch.zeros(3, 2))
    with pytest.raises(UnknownKeyError, match=r"unknown key 'y'; this KeyedTensor has \['x'\]"):
        kt["y"]
    assert str(UnknownKeyError("plain")) == "plain"


def test_unknown_index_in_permute() -> None:
    with pytest.raises(IndexError, match=r"permute index 2 is out of range for 2 keys"):
        kjt().permute([0, 2])
    with pytest.raises(IndexError, match=r"permute index -1 is out of range"):
        kjt().permute([-1])
    with pytest.raises(TypeError, match=r"permute indices must be int, got str 'a'"):
        kjt().permute(["a"])  # type: ignore[list-item]


def test_bad_split_segments() -> None:
    with pytest.raises(ValueError, match=r"split segments \[1\] sum to 1; they must sum to 2"):
        kjt().split([1])
    with pytest.raises(ValueError, match=r"split segments must be >= 0, got -1"):
        kjt().split([3, -1])


# --- concat of different batch sizes / of weighted with unweighted ------------------------------


def test_concat_different_batch_sizes() -> None:
    other = KeyedJaggedTensor(["c"], torch.arange(3), lengths=torch.tensor([1, 1, 1]))
    with pytest.raises(ValueError, match=r"different batch sizes: 2 and 3"):
        KeyedJaggedTensor.concat([kjt(), other])


def test_concat_weighted_with_unweighted() -> None:
    weighted = KeyedJaggedTensor(
        ["c"], torch.arange(2), weights=torch.ones(2), lengths=torch.tensor([1, 1])
    )
    with pytest.raises(ValueError, match=r"weighted with unweighted.*kjt_list\[1\]"):
        KeyedJaggedTensor.concat([kjt(), weighted])


def test_concat_other_mistakes() -> None:
    with pytest.raises(ValueError, match="empty list"):
        KeyedJaggedTensor.concat([])
    with pytest.raises(
        ValueError, match=r"duplicate key 'a' in concat: kjt_list\[0\] and kjt_list\[1\]"
    ):
        KeyedJaggedTensor.concat([kjt(), kjt()])
    # A key repeated by permute inside one input is carried through.
    assert KeyedJaggedTensor.concat([kjt().permute([0, 0])]).keys() == ["a", "a"]
    vbe = kjt(keys=["c", "d"], stride_per_key_per_rank=[[2], [2]])
    with pytest.raises(ValueError, match=r"variable-batch with fixed-batch"):
        KeyedJaggedTensor.concat([kjt(), vbe])


# --- KeyedTensor ---------------------------------------------------------------------------------


def test_keyed_tensor_bad_widths() -> None:
    with pytest.raises(
        ValueError, match=r"length_per_key \[2, 2\] sums to 4 but values has size 5"
    ):
        KeyedTensor(["a", "b"], [2, 2], torch.zeros(3, 5))
    with pytest.raises(ValueError, match=r"length_per_key has 1 entries for 2 keys"):
        KeyedTensor(["a", "b"], [5], torch.zeros(3, 5))
    with pytest.raises(ValueError, match=r"length_per_key for key 'b' is -1"):
        KeyedTensor(["a", "b"], [6, -1], torch.zeros(3, 5))
    with pytest.raises(ValueError, match=r"key_dim 2 is out of range"):
        KeyedTensor(["a"], [5], torch.zeros(3, 5), key_dim=2)


def test_regroup_mistakes() -> None:
    a = KeyedTensor(["a", "b"], [1, 2], torch.zeros(2, 3))
    b = KeyedTensor(["b"], [1], torch.zeros(2, 1))
    with pytest.raises(UnknownKeyError, match=r"unknown key 'q' in group \['a', 'q'\]"):
        KeyedTensor.regroup([a], [["a", "q"]])
    with pytest.raises(
        ValueError, match=r"key 'b' is in keyed_tensors\[0\] and keyed_tensors\[1\]"
    ):
        KeyedTensor.regroup([a, b], [["a"]])
    with pytest.raises(ValueError, match=r"2 groups but 1 names"):
        KeyedTensor.regroup_as_dict([a], [["a"], ["b"]], ["x"])
    with pytest.raises(ValueError, match="at least one KeyedTensor"):
        KeyedTensor.regroup([], [["a"]])


def test_jagged_tensor_other_mistakes() -> None:
    jt = JaggedTensor(torch.arange(3), lengths=torch.tensor([3]))
    with pytest.raises(ValueError, match="has no weights"):
        jt.weights()
    with pytest.raises(ValueError, match="desired_length must be >= 0, got -1"):
        jt.to_padded_dense(desired_length=-1)
    with pytest.raises(ValueError, match=r"lengths has shape \(3,\) but values has 2 rows"):
        JaggedTensor.from_dense_lengths(torch.zeros(2, 4), torch.tensor([1, 2, 3]))
    with pytest.raises(TypeError, match=r"values must be a torch\.Tensor, got list"):
        JaggedTensor([1, 2], lengths=torch.tensor([2]))  # type: ignore[arg-type]


def test_lengths_and_offsets_as_python_lists_equal_the_tensor_form() -> None:
    # TorchRec's concepts page passes plain lists; they mean the int64 tensor of the same ints.
    values = torch.tensor([101.0, 102.0, 201.0, 202.0, 203.0, 301.0])
    by_list = JaggedTensor(values=values, lengths=[2, 3, 1])
    by_tensor = JaggedTensor(values=values, lengths=torch.tensor([2, 3, 1]))
    assert [t.tolist() for t in by_list.to_dense()] == [t.tolist() for t in by_tensor.to_dense()]
    assert by_list.lengths().dtype == torch.int64
    by_offsets = JaggedTensor(values=values, offsets=[0, 2, 5, 6])
    assert by_offsets.lengths().tolist() == [2, 3, 1]
    kjt = KeyedJaggedTensor(keys=["u", "i"], values=values, lengths=[2, 3, 1, 0])
    assert kjt["u"].lengths().tolist() == [2, 3]
    assert kjt["i"].to_dense()[0].tolist() == [301.0]


@pytest.mark.parametrize("bad", [[1, 2.5], [True, 1], "12"])
def test_lengths_list_of_non_ints_names_the_value(bad: object) -> None:
    with pytest.raises(TypeError, match="lengths must hold ints"):
        JaggedTensor(values=torch.tensor([1.0, 2.0, 3.0]), lengths=bad)  # type: ignore[arg-type]


# --- session 12 (s12-badinput) ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.uint8])
def test_narrow_integer_lengths_work_as_int32(dtype: torch.dtype) -> None:
    # TorchRec accepts them; no cumsum kernel takes them, and offsets in their own dtype would
    # overflow (uint8 lengths [200, 100] end at 300): they are widened to int32.
    values = torch.arange(310)
    lengths = torch.tensor([100, 5, 100, 5], dtype=dtype)
    got = KeyedJaggedTensor(keys=["a", "b"], values=values, lengths=lengths)
    want = KeyedJaggedTensor(keys=["a", "b"], values=values, lengths=lengths.long())
    assert got.lengths().dtype == torch.int32
    assert got.offsets().tolist() == want.offsets().tolist() == [0, 100, 105, 205, 210]
    assert got.length_per_key() == [105, 105]
    for key in ("a", "b"):
        assert [t.tolist() for t in got[key].to_dense()] == [
            t.tolist() for t in want[key].to_dense()
        ]
    offsets = torch.tensor([0, 100, 105], dtype=dtype)
    jt = JaggedTensor(values=values, offsets=offsets)
    assert jt.offsets().dtype == torch.int32
    assert jt.lengths().tolist() == [100, 5]


def test_uint8_lengths_past_255_in_total_do_not_wrap() -> None:
    kjt_ = KeyedJaggedTensor(
        keys=["a"], values=torch.arange(300), lengths=torch.tensor([200, 100], dtype=torch.uint8)
    )
    assert kjt_.offsets().tolist() == [0, 200, 300]
    assert [len(t) for t in kjt_["a"].to_dense()] == [200, 100]


def test_keyed_tensors_of_different_batch_sizes_are_named() -> None:
    # torch.cat would name only "tensor number 1" of one of its calls.
    with pytest.raises(ValueError, match=r"key 'b' has shape \(3, 2\) but the first has \(2, 1\)"):
        KeyedTensor.from_tensor_list(["a", "b"], [torch.ones(2, 1), torch.ones(3, 2)])
    kts = [
        KeyedTensor(keys=["a"], length_per_key=[1], values=torch.ones(2, 1)),
        KeyedTensor(keys=["b"], length_per_key=[1], values=torch.ones(3, 1)),
    ]
    with pytest.raises(ValueError, match=r"keyed_tensors\[1\] has shape \(3, 1\).*\(2, 1\)"):
        KeyedTensor.regroup(kts, [["a", "b"]])
    # A group that reads one input only is still fine.
    assert KeyedTensor.regroup(kts, [["b"]])[0].shape == (3, 1)


def test_from_dense_weights_must_match_their_bag() -> None:
    # Sizes [2, 1] against [1, 2]: same total, so the concatenation paired bag 0's second
    # value with bag 1's weight silently.
    with pytest.raises(
        ValueError, match=r"weights\[0\] has shape \(1,\) but values\[0\] has \(2,\)"
    ):
        JaggedTensor.from_dense(
            [torch.tensor([1, 2]), torch.tensor([3])], weights=[torch.ones(1), torch.ones(2)]
        )
    jt = JaggedTensor.from_dense([torch.tensor([1, 2])], weights=[torch.tensor([0.5, 2.0])])
    assert jt.weights().tolist() == [0.5, 2.0]


def test_decrease_inside_a_key_is_refused_by_to_dict() -> None:
    # Session 12: to_dict read every offset anyway, and handed key 'a' a negative length (its
    # first bag cut short) without a word.
    inside = kjt(lengths=None, offsets=torch.tensor([0, 2, 1, 3, 4]))  # inside key 'a'
    assert inside.length_per_key() == [1, 3]  # the first read sees per-key bounds only
    with pytest.raises(ValueError, match=r"offsets decrease at index 2 \(2 -> 1\)"):
        inside.to_dict()
    with pytest.raises(ValueError, match=r"offsets decrease at index 2 \(2 -> 1\)"):
        inside["a"]
    fine = kjt(lengths=None, offsets=torch.tensor([0, 1, 1, 3, 4]))
    assert [t.tolist() for t in fine["a"].to_dense()] == [[0], []]
