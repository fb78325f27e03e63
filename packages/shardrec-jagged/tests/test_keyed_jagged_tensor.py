"""KeyedJaggedTensor against the list reference: every method, random shapes and named edges."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from jagged_reference import (
    RefKJT,
    jagged_settings,
    jt_lists,
    jt_wlists,
    kjt_lists,
    kjt_wlists,
    ref_kjts,
)

from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, jt_is_equal, kjt_is_equal

VIAS = ["lengths", "offsets", "both"]


def assert_matches(kjt: KeyedJaggedTensor, ref: RefKJT) -> None:
    assert kjt.keys() == ref.keys
    assert kjt_lists(kjt) == ref.bags
    assert kjt.lengths().tolist() == ref.flat_lengths()
    assert kjt.offsets().tolist() == ref.flat_offsets()
    assert kjt.length_per_key() == ref.length_per_key()
    opk = [0]
    for n in ref.length_per_key():
        opk.append(opk[-1] + n)
    assert kjt.offset_per_key() == opk
    if ref.weighted:
        assert kjt_wlists(kjt) == ref.wbags
    else:
        assert kjt.weights_or_none() is None


@jagged_settings
@given(ref=ref_kjts(), via=st.sampled_from(VIAS))
def test_accessors_match_reference(ref: RefKJT, via: str) -> None:
    kjt = ref.build(via)
    assert_matches(kjt, ref)
    assert kjt.stride_per_key() == [len(k) for k in ref.bags]
    assert kjt.variable_stride_per_key() == (ref.spkpr is not None)
    if ref.spkpr is None:
        assert kjt.stride() == ref.stride()
        assert kjt.stride_per_key_per_rank() == []
    else:
        assert kjt.stride() == max([len(k) for k in ref.bags], default=0)
        assert kjt.stride_per_key_per_rank() == ref.spkpr
    assert kjt.lengths().dtype == ref.lengths_dtype
    assert kjt.offsets().dtype == ref.lengths_dtype
    lopk = [0]
    for k in ref.bags:
        lopk.append(lopk[-1] + len(k))
    assert kjt.lengths_offset_per_key() == lopk
    assert kjt.index_per_key() == {k: i for i, k in enumerate(ref.keys)}


@jagged_settings
@given(ref=ref_kjts())
def test_lengths_and_offsets_paths_give_identical_objects(ref: RefKJT) -> None:
    built = [ref.build(via) for via in VIAS]
    first = built[0]
    for other in built[1:]:
        assert other.keys() == first.keys()
        assert torch.equal(other.values(), first.values())
        assert torch.equal(other.lengths(), first.lengths())
        assert torch.equal(other.offsets(), first.offsets())
        assert other.stride() == first.stride()
        assert other.stride_per_key() == first.stride_per_key()
        assert other.length_per_key() == first.length_per_key()
        assert other.offset_per_key() == first.offset_per_key()


@jagged_settings
@given(ref=ref_kjts(), via=st.sampled_from(VIAS))
def test_to_dict_and_getitem(ref: RefKJT, via: str) -> None:
    kjt = ref.build(via)
    d = kjt.to_dict()
    assert list(d) == ref.keys
    for i, key in enumerate(ref.keys):
        for jt in (d[key], kjt[key]):
            assert jt_lists(jt) == ref.bags[i]
            assert jt.lengths().tolist() == [len(b) for b in ref.bags[i]]
            if ref.weighted:
                assert ref.wbags is not None
                assert jt_wlists(jt) == ref.wbags[i]
            else:
                assert jt.weights_or_none() is None
    assert kjt.to_dict() is d  # cached


@jagged_settings
@given(ref=ref_kjts())
def test_to_dict_without_offsets(ref: RefKJT) -> None:
    d = ref.build().to_dict(compute_offsets=False)
    for i, key in enumerate(ref.keys):
        assert jt_lists(d[key]) == ref.bags[i]


@jagged_settings
@given(
    ref=ref_kjts(min_keys=1),
    data=st.data(),
)
def test_permute_with_repeats_and_drops(ref: RefKJT, data: st.DataObject) -> None:
    n = len(ref.keys)
    order = data.draw(st.lists(st.integers(0, n - 1), max_size=2 * n))
    kjt = ref.build(data.draw(st.sampled_from(VIAS)))
    out = kjt.permute(order)
    expected = ref.permute(order)
    assert out.keys() == expected.keys
    assert kjt_lists(out) == expected.bags
    assert out.length_per_key() == expected.length_per_key()
    assert out.stride() == kjt.stride()
    assert out.stride_per_key() == [len(k) for k in expected.bags]
    if ref.weighted:
        assert kjt_wlists(out) == expected.wbags
    # Each key of the result reads back its bags, repeated keys included.
    for j, i in enumerate(order):
        assert out.split([j, 1, len(order) - j - 1])[1].keys() == [ref.keys[i]]


def test_permute_reversed_named_case() -> None:
    ref = RefKJT(keys=["a", "b", "c"], bags=[[[1], []], [[2, 3], [4]], [[], [5]]])
    out = ref.build().permute([2, 1, 0])
    assert out.keys() == ["c", "b", "a"]
    assert out.values().tolist() == [5, 2, 3, 4, 1]
    assert out.lengths().tolist() == [0, 1, 2, 1, 1, 0]


@jagged_settings
@given(ref=ref_kjts(), data=st.data())
def test_split_with_zero_segments(ref: RefKJT, data: st.DataObject) -> None:
    n = len(ref.keys)
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=4)))
    bounds = [0, *cuts, n]
    segments = [bounds[i + 1] - bounds[i] for i in range(len(bounds) - 1)]
    kjt = ref.build(data.draw(st.sampled_from(VIAS)))
    parts = kjt.split(segments)
    assert len(parts) == len(segments)
    for part, start, end in zip(parts, bounds[:-1], bounds[1:], strict=True):
        expected = ref.select(start, end)
        assert part.keys() == expected.keys
        assert kjt_lists(part) == expected.bags
        assert part.length_per_key() == expected.length_per_key()
        assert part.stride() == kjt.stride()
        if ref.weighted:
            assert kjt_wlists(part) == expected.wbags
        for key in expected.keys:
            assert jt_lists(part[key]) == jt_lists(kjt[key])


@jagged_settings
@given(a=ref_kjts(variable=False, weighted=False), data=st.data())
def test_concat(a: RefKJT, data: st.DataObject) -> None:
    b_keys = data.draw(st.integers(0, 3))
    stride = a.stride() if a.keys else data.draw(st.integers(0, 3))
    bags = [
        [data.draw(st.lists(st.integers(0, 9), max_size=3)) for _ in range(stride)]
        for _ in range(b_keys)
    ]
    b = RefKJT(keys=[f"g{i}" for i in range(b_keys)], bags=bags)
    ka, kb = a.build(), b.build()
    if data.draw(st.booleans()):
        ka.sync()
    out = KeyedJaggedTensor.concat([ka, kb])
    assert out.keys() == a.keys + b.keys
    assert kjt_lists(out) == a.bags + b.bags
    assert out.length_per_key() == a.length_per_key() + b.length_per_key()
    assert out.to_dict().keys() == set(a.keys + b.keys)


@jagged_settings
@given(a=ref_kjts(variable=True, weighted=True, min_keys=1))
def test_concat_variable_batch_and_weighted(a: RefKJT) -> None:
    renamed = RefKJT(
        keys=[k + "_2" for k in a.keys],
        bags=a.bags,
        wbags=a.wbags,
        spkpr=a.spkpr,
    )
    out = KeyedJaggedTensor.concat([a.build(), renamed.build("offsets")])
    assert kjt_lists(out) == a.bags + a.bags
    assert kjt_wlists(out) == (a.wbags or []) + (a.wbags or [])
    assert a.spkpr is not None
    assert out.stride_per_key_per_rank() == a.spkpr + a.spkpr


@jagged_settings
@given(ref=ref_kjts())
def test_from_jt_dict_round_trip(ref: RefKJT) -> None:
    kjt = ref.build()
    again = KeyedJaggedTensor.from_jt_dict(kjt.to_dict())
    assert again.keys() == ref.keys
    assert kjt_lists(again) == ref.bags
    assert again.length_per_key_or_none() == ref.length_per_key()  # synced
    if ref.weighted and ref.keys:  # an empty dict cannot tell weightedness
        assert kjt_wlists(again) == ref.wbags
    strides = {len(k) for k in ref.bags}
    assert again.variable_stride_per_key() == (len(strides) > 1)


def test_from_jt_dict_variable_batch_named_case() -> None:
    jts = {
        "a": JaggedTensor(torch.tensor([1, 2]), lengths=torch.tensor([2])),
        "b": JaggedTensor(torch.tensor([3, 4, 5]), lengths=torch.tensor([1, 0, 2])),
    }
    kjt = KeyedJaggedTensor.from_jt_dict(jts)
    assert kjt.stride_per_key() == [1, 3]
    assert kjt.stride_per_key_per_rank() == [[1], [3]]
    assert kjt.stride() == 3
    assert kjt["b"].lengths().tolist() == [1, 0, 2]


@jagged_settings
@given(ref=ref_kjts())
def test_sync_unsync_and_sync_constructors(ref: RefKJT) -> None:
    t = ref.tensors()
    assert t["values"] is not None and t["lengths"] is not None and t["offsets"] is not None
    kwargs: dict[str, object] = {}
    if ref.spkpr is not None:
        kwargs["stride_per_key_per_rank"] = ref.spkpr
    elif not ref.keys:
        kwargs["stride"] = 0
    a = KeyedJaggedTensor.from_lengths_sync(
        ref.keys,
        t["values"],
        t["lengths"],
        weights=t["weights"],
        **kwargs,  # type: ignore[arg-type]
    )
    b = KeyedJaggedTensor.from_offsets_sync(
        ref.keys,
        t["values"],
        t["offsets"],
        weights=t["weights"],
        **kwargs,  # type: ignore[arg-type]
    )
    for kjt in (a, b):
        assert kjt.length_per_key_or_none() == ref.length_per_key()
        assert kjt.offset_per_key_or_none() is not None
        kjt.unsync()
        assert kjt.length_per_key_or_none() is None
        assert kjt.offset_per_key_or_none() is None
        assert kjt.length_per_key() == ref.length_per_key()


@jagged_settings
@given(ref=ref_kjts())
def test_to_device_and_dtype(ref: RefKJT) -> None:
    kjt = ref.build()
    moved = kjt.to(torch.device("cpu"), dtype=torch.float64)
    assert kjt_lists(moved) == ref.bags
    if ref.weighted:
        assert moved.weights().dtype == torch.float64
    assert moved.values().dtype == torch.int64
    assert moved.stride_per_key() == kjt.stride_per_key()


def test_zero_sample_batch_to_dict_returns_empty_per_key_tensors() -> None:
    kjt = KeyedJaggedTensor(
        keys=["a", "b"],
        values=torch.empty(0, dtype=torch.int64),
        lengths=torch.empty(0).to(torch.int32),
    )
    assert kjt.stride() == 0
    assert kjt.length_per_key() == [0, 0]
    d = kjt.to_dict()
    assert list(d) == ["a", "b"]
    for jt in d.values():
        assert jt.values().numel() == 0
        assert jt.lengths().numel() == 0
        assert jt.offsets().tolist() == []  # TorchRec: no entry for zero bags
    assert kjt["a"].values().numel() == 0
    assert kjt.permute([1, 0]).keys() == ["b", "a"]
    assert [p.keys() for p in kjt.split([1, 1])] == [["a"], ["b"]]


def test_keys_with_no_ids_and_empty_key_list() -> None:
    kjt = KeyedJaggedTensor(
        keys=["a", "b"], values=torch.tensor([7]), lengths=torch.tensor([0, 0, 1, 0])
    )
    assert kjt.length_per_key() == [0, 1]
    assert kjt["a"].values().tolist() == []
    assert jt_lists(kjt["b"]) == [[7], []]
    none = KeyedJaggedTensor(keys=[], values=torch.empty(0), lengths=torch.empty(0).int())
    assert none.to_dict() == {}
    assert none.length_per_key() == []
    assert none.offset_per_key() == [0]
    assert none.permute([]).keys() == []
    assert none.split([0, 0])[0].keys() == []
    assert "keys=[]" in repr(none)


def test_empty_and_empty_like() -> None:
    e = KeyedJaggedTensor.empty(is_weighted=True, values_dtype=torch.int64)
    assert e.keys() == [] and e.stride() == 0 and e.weights().numel() == 0
    assert e.lengths().dtype == torch.int32
    ref = RefKJT(keys=["a"], bags=[[[1], [2, 3]]], wbags=[[[0.5], [1.0, 2.0]]])
    kjt = ref.build()
    like = KeyedJaggedTensor.empty_like(kjt)
    assert like.keys() == [] and like.stride() == 2
    assert like.weights().dtype == torch.float32
    same = KeyedJaggedTensor.empty_like(kjt, device=torch.device("cpu"))
    assert same.keys() == ["a"]
    assert same.values().shape == kjt.values().shape


def test_variable_batch_with_inverse_indices() -> None:
    inv = torch.tensor([[0, 0, 1], [0, 1, 1]])
    kjt = KeyedJaggedTensor(
        keys=["a", "b"],
        values=torch.tensor([1, 2, 3, 4]),
        lengths=torch.tensor([1, 1, 2, 0]),
        stride_per_key_per_rank=[[2], [2]],
        inverse_indices=(["a", "b"], inv),
    )
    assert kjt.stride() == 3  # the inverse indices' batch
    assert kjt.inverse_indices()[0] == ["a", "b"]
    assert kjt.inverse_indices_or_none() is not None
    assert kjt.length_per_key() == [2, 2]
    assert jt_lists(kjt["b"]) == [[3, 4], []]
    assert (
        kjt.permute([1, 0]).inverse_indices_or_none() is None
    )  # as TorchRec: rows no longer match
    spkpr_tensor = KeyedJaggedTensor(
        keys=["a", "b"],
        values=torch.tensor([1, 2, 3, 4]),
        lengths=torch.tensor([1, 1, 2, 0]),
        stride_per_key_per_rank=torch.tensor([[1, 1], [1, 1]]),
    )
    assert spkpr_tensor.stride_per_key() == [2, 2]


def test_validate_passes_on_valid_input_and_returns_self() -> None:
    kjt = KeyedJaggedTensor(
        ["a"], torch.tensor([1, 2]), lengths=torch.tensor([2, 0]), validate=True
    )
    assert kjt.validate() is kjt


def test_repr_is_bounded_and_names_keys() -> None:
    kjt = KeyedJaggedTensor(
        ["user", "item"],
        torch.arange(40),
        weights=torch.ones(40),
        lengths=torch.tensor([10] * 4),
    )
    text = repr(kjt)
    assert "'user'" in text and "'item'" in text and "weights=" in text
    assert "... (10 ids)" in text
    assert len(text) < 1000


def test_pin_memory_and_record_stream_touch_every_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    # CPU-only torch cannot pin memory or record streams; stand in for both and check that
    # every tensor goes through them and the host metadata survives.
    pinned: list[torch.Tensor] = []
    recorded: list[torch.Tensor] = []

    def fake_pin(self: torch.Tensor) -> torch.Tensor:
        out = self.clone()
        pinned.append(out)
        return out

    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, s: recorded.append(self))
    inv = torch.tensor([[0, 1], [1, 0]])
    kjt = KeyedJaggedTensor(
        ["a", "b"],
        torch.arange(4),
        weights=torch.ones(4),
        lengths=torch.tensor([1, 1, 2]),
        stride_per_key_per_rank=[[2], [1]],
        inverse_indices=(["a", "b"], inv),
    ).sync()
    kjt.offsets()
    out = kjt.pin_memory()
    assert len(pinned) == 5  # values, weights, lengths, offsets, inverse indices
    assert out.length_per_key_or_none() == [2, 2]
    assert out.stride_per_key_per_rank() == [[2], [1]]
    assert kjt_lists(out) == kjt_lists(kjt)
    stream = torch.Stream()
    kjt.record_stream(stream)
    assert len(recorded) == 4
    JaggedTensor(torch.arange(2), lengths=torch.tensor([2])).record_stream(stream)
    assert len(recorded) == 6  # + the JaggedTensor's values and lengths


@jagged_settings
@given(ref=ref_kjts())
def test_equality_helpers_and_copy(ref: RefKJT) -> None:
    a, b = ref.build("lengths"), ref.build("offsets").sync()
    assert kjt_is_equal(a, b)
    for key in ref.keys:
        assert jt_is_equal(a[key], b.to_dict()[key])
    if ref.keys and ref.flat_values():
        other = ref.build()
        other.values().add_(1)
        assert not kjt_is_equal(a, other)
        target = ref.build()
        target.values().zero_()
        target.copy_(a)
        assert kjt_is_equal(target, a)
    if len(ref.keys) >= 2:  # reversed unique keys differ from the original order
        assert not kjt_is_equal(a, a.permute(list(range(len(ref.keys)))[::-1]))


def test_non_contiguous_lengths() -> None:
    lengths = torch.tensor([[1, 9], [0, 9], [2, 9], [1, 9]])[:, 0]  # a strided view
    assert not lengths.is_contiguous()
    kjt = KeyedJaggedTensor(["a", "b"], torch.arange(4), lengths=lengths)
    assert kjt.length_per_key() == [1, 3]
    assert jt_lists(kjt.to_dict()["b"]) == [[1, 2], [3]]
    assert kjt_lists(kjt.permute([1, 0])) == [[[1, 2], [3]], [[0], []]]
