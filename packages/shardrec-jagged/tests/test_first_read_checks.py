"""docs/jagged.md, "Validation": every promise of the first host read, on every path.

A KeyedJaggedTensor checks where it first copies its per-key layout to the host
(`length_per_key()`, so `to_dict`, `__getitem__`, `split`, `permute`): lengths summing past
`values.size(0)`, a negative length, offsets not starting at 0, offsets decreasing between keys,
offsets ending past values, and given lengths and offsets that disagree. A JaggedTensor checks
the same where it reads its lengths (`to_dense`, `to_padded_dense`, `str`). Each promise is
checked with one key and with two, eagerly and in TorchScript (the scripted twins), and named
as what it is (issue 26: a one-key KJT with a negative length used to read garbage).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from shardrec_jagged import JaggedTensor, KeyedJaggedTensor

T = torch.tensor


@torch.jit.script
def _script_to_dict(
    keys: list[str],
    values: torch.Tensor,
    lengths: torch.Tensor | None,
    offsets: torch.Tensor | None,
) -> list[torch.Tensor]:
    d = KeyedJaggedTensor(keys=keys, values=values, lengths=lengths, offsets=offsets).to_dict()
    return [d[k].values() for k in keys]


@torch.jit.script
def _script_getitem(
    keys: list[str],
    values: torch.Tensor,
    lengths: torch.Tensor | None,
    offsets: torch.Tensor | None,
) -> torch.Tensor:
    kjt = KeyedJaggedTensor(keys=keys, values=values, lengths=lengths, offsets=offsets)
    return kjt[keys[-1]].values()


@torch.jit.script
def _script_split(
    keys: list[str],
    values: torch.Tensor,
    lengths: torch.Tensor | None,
    offsets: torch.Tensor | None,
) -> list[int]:
    kjt = KeyedJaggedTensor(keys=keys, values=values, lengths=lengths, offsets=offsets)
    return kjt.split([len(keys)])[0].length_per_key()


@torch.jit.script
def _script_permute(
    keys: list[str],
    values: torch.Tensor,
    lengths: torch.Tensor | None,
    offsets: torch.Tensor | None,
) -> torch.Tensor:
    kjt = KeyedJaggedTensor(keys=keys, values=values, lengths=lengths, offsets=offsets)
    return kjt.permute(list(range(len(keys)))).values()


@torch.jit.script
def _script_passed_in(kjt: KeyedJaggedTensor) -> list[int]:
    """A KJT built in Python and handed to scripted code (its twin reads the same fields)."""
    return kjt.length_per_key()


@torch.jit.script
def _script_jt_to_dense(
    values: torch.Tensor, lengths: torch.Tensor | None, offsets: torch.Tensor | None
) -> list[torch.Tensor]:
    return JaggedTensor(values=values, lengths=lengths, offsets=offsets).to_dense()


@torch.jit.script
def _script_jt_passed_in(jt: JaggedTensor) -> list[torch.Tensor]:
    return jt.to_dense()


def _is_value_error(err: BaseException) -> None:
    """Eager: a ValueError; scripted: TorchScript's error carrying the twin's ValueError."""
    assert isinstance(err, ValueError) or "builtins.ValueError: " in str(err), repr(err)


def _eager(method: str) -> Callable[..., Any]:
    def run(keys: list[str], values: torch.Tensor, lengths: Any, offsets: Any) -> Any:
        kjt = KeyedJaggedTensor(keys=keys, values=values, lengths=lengths, offsets=offsets)
        if method == "to_dict":
            return kjt.to_dict()
        if method == "getitem":
            return kjt[keys[-1]]
        if method == "split":
            return kjt.split([len(keys)])
        if method == "permute":
            return kjt.permute(list(range(len(keys))))
        return kjt.length_per_key()

    return run


def _passed_in(keys: list[str], values: torch.Tensor, lengths: Any, offsets: Any) -> Any:
    return _script_passed_in(
        KeyedJaggedTensor(keys=keys, values=values, lengths=lengths, offsets=offsets)
    )


KJT_PATHS: dict[str, Callable[..., Any]] = {
    **{f"eager-{m}": _eager(m) for m in ("to_dict", "getitem", "split", "permute", "lpk")},
    "script-to_dict": _script_to_dict,
    "script-getitem": _script_getitem,
    "script-split": _script_split,
    "script-permute": _script_permute,
    "script-passed-in": _passed_in,
}

# (promise, keys, lengths, offsets, the error's words); values are always [10, 11, 12].
KJT_PROMISES = [
    (
        "negative length, one key",
        ["a"],
        T([3, -1]),
        None,
        r"lengths\[1\] = -1 is negative \(key 'a', sample 1\)",
    ),
    (
        "negative length, two keys",
        ["a", "b"],
        T([1, 2, -1, 0]),
        None,
        r"lengths\[2\] = -1 is negative \(key 'b', sample 0\)",
    ),
    ("lengths past values, one key", ["a"], T([2, 2]), None, r"lengths sum to 4 .*only 3 entries"),
    (
        "lengths past values, two keys",
        ["a", "b"],
        T([1, 1, 1, 1]),
        None,
        r"lengths sum to 4 .*only 3 entries",
    ),
    (
        "offsets not from 0, one key",
        ["a"],
        None,
        T([1, 2, 3]),
        r"offsets\[0\] = 1; offsets must start at 0",
    ),
    (
        "offsets not from 0, two keys",
        ["a", "b"],
        None,
        T([1, 1, 2, 2, 3]),
        r"offsets\[0\] = 1; offsets must start at 0",
    ),
    (
        "offsets decreasing between keys",
        ["a", "b"],
        None,
        T([0, 2, 3, 1, 1]),
        r"offsets decrease within key 'b'",
    ),
    (
        "offsets past values, one key",
        ["a"],
        None,
        T([0, 2, 4]),
        r"offsets\[-1\] = 4 but values has only 3",
    ),
    (
        "offsets past values, two keys",
        ["a", "b"],
        None,
        T([0, 1, 2, 3, 4]),
        r"offsets\[-1\] = 4 but values has only 3",
    ),
    (
        "lengths and offsets disagree, one key",
        ["a"],
        T([1, 1]),
        T([0, 2, 2]),
        r"disagree at bag 0: lengths\[0\] = 1",
    ),
    (
        "lengths and offsets disagree, two keys",
        ["a", "b"],
        T([1, 1, 0, 1]),
        T([0, 1, 2, 3, 3]),
        r"disagree at bag 2: lengths\[2\] = 0",
    ),
]


@pytest.mark.parametrize("path", list(KJT_PATHS), ids=list(KJT_PATHS))
@pytest.mark.parametrize("promise", KJT_PROMISES, ids=[p[0] for p in KJT_PROMISES])
def test_kjt_first_read_raises_what_docs_promise(path: str, promise: tuple[Any, ...]) -> None:
    _, keys, lengths, offsets, words = promise
    with pytest.raises((ValueError, torch.jit.Error), match=words) as err:
        KJT_PATHS[path](keys, T([10, 11, 12]), lengths, offsets)
    _is_value_error(err.value)


def test_the_issue_26_example() -> None:
    kjt = KeyedJaggedTensor(keys=["a"], values=T([1, 2]), lengths=T([3, -1]))
    with pytest.raises(ValueError, match=r"lengths\[1\] = -1 is negative"):
        kjt.to_dict()


@pytest.mark.parametrize("path", list(KJT_PATHS), ids=list(KJT_PATHS))
def test_valid_and_longer_buffers_still_read(path: str) -> None:
    """The checks refuse nothing valid: a buffer longer than the bags use is accepted."""
    values = T([10, 11, 12, 13, 99])  # 99: an unused tail
    for lengths, offsets in ((T([1, 2, 0, 1]), None), (None, T([0, 1, 3, 3, 4]))):
        for both in (False, True):
            if both:
                lengths, offsets = T([1, 2, 0, 1]), T([0, 1, 3, 3, 4])
            KJT_PATHS[path](["a", "b"], values, lengths, offsets)
    got = _script_to_dict(["a", "b"], values, T([1, 2, 0, 1]), None)
    assert [g.tolist() for g in got] == [[10, 11, 12], [13]]


def test_variable_batch_negative_length_names_its_key() -> None:
    kjt = KeyedJaggedTensor(
        keys=["a", "b"], values=T([1, 2, 3]), lengths=T([2, 1, -1]),
        stride_per_key_per_rank=[[1, 1], [1, 0]],
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"lengths\[2\] = -1 is negative \(key 'b', sample 0\)"):
        kjt.to_dict()


JT_PATHS: dict[str, Callable[[JaggedTensor], Any]] = {
    "to_dense": lambda jt: jt.to_dense(),
    "to_padded_dense": lambda jt: jt.to_padded_dense(),
    "str": str,
    "script-passed-in": _script_jt_passed_in,
}

JT_PROMISES = [
    ("negative length", T([3, -1]), None, r"lengths\[1\] = -1 is negative"),
    ("lengths past values", T([2, 2]), None, r"lengths sum to 4 but values has only 3"),
    ("offsets not from 0", None, T([1, 2, 3]), r"offsets\[0\] = 1; offsets must start at 0"),
    ("offsets decreasing", None, T([0, 3, 2]), r"offsets decrease at index 2 \(3 -> 2\)"),
    ("offsets past values", None, T([0, 2, 4]), r"offsets\[-1\] = 4 but values has only 3"),
    ("lengths and offsets disagree", T([1, 1]), T([0, 2, 2]), r"disagree at bag 0"),
]


@pytest.mark.parametrize("path", list(JT_PATHS), ids=list(JT_PATHS))
@pytest.mark.parametrize("promise", JT_PROMISES, ids=[p[0] for p in JT_PROMISES])
def test_jagged_tensor_reads_raise_what_docs_promise(path: str, promise: tuple[Any, ...]) -> None:
    _, lengths, offsets, words = promise
    jt = JaggedTensor(values=T([1.0, 2.0, 3.0]), lengths=lengths, offsets=offsets)
    with pytest.raises((ValueError, torch.jit.Error), match=words) as err:
        JT_PATHS[path](jt)
    _is_value_error(err.value)


@pytest.mark.parametrize("promise", JT_PROMISES, ids=[p[0] for p in JT_PROMISES])
def test_scripted_jagged_tensor_to_dense_raises_what_docs_promise(
    promise: tuple[Any, ...],
) -> None:
    _, lengths, offsets, words = promise
    with pytest.raises(torch.jit.Error, match=words) as err:
        _script_jt_to_dense(T([1.0, 2.0, 3.0]), lengths, offsets)
    _is_value_error(err.value)


def test_valid_jagged_tensors_still_read() -> None:
    for lengths, offsets in ((T([1, 2]), None), (None, T([0, 1, 3])), (T([1, 2]), T([0, 1, 3]))):
        jt = JaggedTensor(values=T([1.0, 2.0, 3.0, 9.0]), lengths=lengths, offsets=offsets)
        assert [d.tolist() for d in jt.to_dense()] == [[1.0], [2.0, 3.0]]
        dense = _script_jt_to_dense(T([1.0, 2.0, 3.0, 9.0]), lengths, offsets)
        assert [d.tolist() for d in dense] == [[1.0], [2.0, 3.0]]
        assert jt.to_padded_dense().tolist() == [[1.0, 0.0], [2.0, 3.0]]
