"""maybe_td_to_kjt (TorchRec's `torchrec.sparse.tensor_dict`): a TensorDict of jagged nested
tensors becomes a KJT; anything else passes through. tensordict is optional: these tests
stand in a minimal `tensordict` module (a dict subclass as `TensorDict`), and run against the
real package where it is installed."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest
import torch

from shardrec_jagged import KeyedJaggedTensor
from shardrec_jagged.tensor_dict import maybe_td_to_kjt


class _FakeTensorDict(dict):  # type: ignore[type-arg]  # only its type and mapping matter
    pass


@pytest.fixture
def fake_tensordict(monkeypatch: pytest.MonkeyPatch) -> type:
    module = types.ModuleType("tensordict")
    module.TensorDict = _FakeTensorDict  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tensordict", module)
    return _FakeTensorDict


def _nt(values: list[int], lengths: list[int] | None = None, offsets: list[int] | None = None):  # type: ignore[no-untyped-def]
    return torch.nested.nested_tensor_from_jagged(
        torch.tensor(values),
        lengths=None if lengths is None else torch.tensor(lengths),
        offsets=None if offsets is None else torch.tensor(offsets),
    )


def _entries() -> dict[str, torch.Tensor]:
    return {
        "f2": _nt([2, 3], lengths=[1, 1]),
        "f1": _nt([0, 1], offsets=[0, 2, 2]),
        "f3": _nt([2, 3, 4], lengths=[1, 2]),
    }


def test_tensor_dict_becomes_a_kjt_in_the_order_asked(fake_tensordict: type) -> None:
    td = fake_tensordict(_entries())
    kjt = maybe_td_to_kjt(td, ["f1", "f2", "f3"])
    assert isinstance(kjt, KeyedJaggedTensor) and kjt.keys() == ["f1", "f2", "f3"]
    assert kjt.values().tolist() == [0, 1, 2, 3, 2, 3, 4]
    assert kjt.lengths().tolist() == [2, 0, 1, 1, 1, 2] and kjt.stride() == 2
    default = maybe_td_to_kjt(td)  # the TensorDict's own key order
    assert default.keys() == ["f2", "f1", "f3"]
    assert default.to_dict()["f1"].lengths().tolist() == [2, 0]
    some = maybe_td_to_kjt(td, ["f3"])
    assert some.keys() == ["f3"] and some.values().tolist() == [2, 3, 4]


def test_other_inputs_pass_through(fake_tensordict: type) -> None:
    kjt = KeyedJaggedTensor(keys=["a"], values=torch.tensor([1, 2]), lengths=torch.tensor([2]))
    assert maybe_td_to_kjt(kjt) is kjt
    plain = {"a": _nt([1], lengths=[1])}
    assert maybe_td_to_kjt(plain) is plain  # type: ignore[arg-type]  # not a TensorDict


def test_without_tensordict_nothing_is_imported() -> None:
    code = (
        "import sys, torch; from shardrec_jagged.tensor_dict import maybe_td_to_kjt;"
        "from shardrec_jagged import KeyedJaggedTensor as K;"
        "k = K(keys=['a'], values=torch.tensor([1]), lengths=torch.tensor([1]));"
        "assert maybe_td_to_kjt(k) is k; print('tensordict' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_bad_entries_name_the_key(fake_tensordict: type) -> None:
    td = fake_tensordict({"a": torch.ones(2, 3), "b": _nt([1], lengths=[1])})
    with pytest.raises(
        TypeError, match=r"entry 'a' is a torch.strided tensor; each entry must be a jagged"
    ):
        maybe_td_to_kjt(td)
    with pytest.raises(
        KeyError, match=r"key 'zz' is not in the TensorDict, which holds \['a', 'b'\]"
    ):
        maybe_td_to_kjt(td, ["b", "zz"])


def test_real_tensordict() -> None:
    tensordict = pytest.importorskip("tensordict")
    td = tensordict.TensorDict(_entries(), batch_size=[2])
    kjt = maybe_td_to_kjt(td, ["f1", "f2", "f3"])
    assert kjt.values().tolist() == [0, 1, 2, 3, 2, 3, 4]
    assert kjt.lengths().tolist() == [2, 0, 1, 1, 1, 2]
