"""TorchScript twins of the value types: scripted code taking, reading and returning JTs, KJTs
and KTs gives what the Python classes give; artifacts load where shardrec is not imported."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from shardrec_jagged import (
    JaggedTensor,
    KeyedJaggedTensor,
    KeyedTensor,
    TorchScriptable,
    kjt_is_equal,
    register_torchscript_types,
    script_fields,
    symbolic_trace,
)
from shardrec_testing import assert_scripted_reloads_without_shardrec

register_torchscript_types()


def _random_kjt(seed: int, n_keys: int, batch: int, weighted: bool) -> KeyedJaggedTensor:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (n_keys * batch,), generator=g)
    lengths[::3] = 0  # empty bags
    n = int(lengths.sum())
    return KeyedJaggedTensor(
        keys=[f"f{i}" for i in range(n_keys)],
        values=torch.randint(0, 100, (n,), generator=g),
        weights=torch.rand(n, generator=g) if weighted else None,
        lengths=lengths,
    )


CASES = [
    pytest.param(0, 3, 4, False, id="3keys"),
    pytest.param(1, 3, 4, True, id="weighted"),
    pytest.param(2, 1, 5, False, id="one_key"),
    pytest.param(3, 4, 0, False, id="batch0"),
    pytest.param(4, 2, 1, True, id="batch1"),
]


@torch.jit.script
def _accessors(
    kjt: KeyedJaggedTensor,
) -> tuple[list[str], torch.Tensor, torch.Tensor, torch.Tensor, list[int], list[int], int]:
    return (
        kjt.keys(),
        kjt.values(),
        kjt.lengths(),
        kjt.offsets(),
        kjt.length_per_key(),
        kjt.offset_per_key(),
        kjt.stride(),
    )


@pytest.mark.parametrize(("seed", "n_keys", "batch", "weighted"), CASES)
def test_accessors_match_eager(seed: int, n_keys: int, batch: int, weighted: bool) -> None:
    kjt = _random_kjt(seed, n_keys, batch, weighted)
    keys, values, lengths, offsets, lpk, opk, stride = _accessors(kjt)
    assert keys == kjt.keys()
    assert torch.equal(values, kjt.values())
    assert torch.equal(lengths, kjt.lengths())
    assert torch.equal(offsets, kjt.offsets())
    assert lpk == kjt.length_per_key()
    assert opk == kjt.offset_per_key()
    assert stride == kjt.stride()


def test_accessors_from_offsets_only() -> None:
    kjt = _random_kjt(5, 3, 4, True)
    by_offsets = KeyedJaggedTensor(
        keys=kjt.keys(), values=kjt.values(), weights=kjt.weights(), offsets=kjt.offsets()
    )
    _, _, lengths, _, lpk, _, _ = _accessors(by_offsets)
    assert torch.equal(lengths, kjt.lengths())
    assert lpk == kjt.length_per_key()


@torch.jit.script
def _per_key(kjt: KeyedJaggedTensor, key: str) -> tuple[torch.Tensor, torch.Tensor]:
    jt = kjt[key]
    d = kjt.to_dict()
    assert torch.equal(d[key].values(), jt.values())
    return jt.values(), jt.lengths()


@pytest.mark.parametrize(("seed", "n_keys", "batch", "weighted"), CASES)
def test_getitem_and_to_dict_match_eager(
    seed: int, n_keys: int, batch: int, weighted: bool
) -> None:
    kjt = _random_kjt(seed, n_keys, batch, weighted)
    keys = kjt.keys()  # a KJT is not a dict: iterating it does not give its keys
    for key in keys:
        values, lengths = _per_key(kjt, key)
        assert torch.equal(values, kjt[key].values())
        assert torch.equal(lengths, kjt[key].lengths())


@torch.jit.script
def _permute(kjt: KeyedJaggedTensor, order: list[int]) -> KeyedJaggedTensor:
    return kjt.permute(order)


@torch.jit.script
def _split(kjt: KeyedJaggedTensor, segments: list[int]) -> list[KeyedJaggedTensor]:
    return kjt.split(segments)


@pytest.mark.parametrize(("seed", "n_keys", "batch", "weighted"), CASES)
def test_permute_and_split_return_complete_python_kjts(
    seed: int, n_keys: int, batch: int, weighted: bool
) -> None:
    kjt = _random_kjt(seed, n_keys, batch, weighted)
    order = [n_keys - 1 - i for i in range(n_keys)] + [0]  # reversed, key 0 repeated
    got = _permute(kjt, order)
    # TorchScript hands back an instance of our Python class with every attribute set
    assert type(got) is KeyedJaggedTensor
    assert kjt_is_equal(got, kjt.permute(order))
    assert got.to_dict().keys() == kjt.permute(order).to_dict().keys()
    segments = [1, n_keys - 1] if n_keys > 1 else [0, 1]
    for part, want in zip(_split(kjt, segments), kjt.split(segments), strict=True):
        assert type(part) is KeyedJaggedTensor
        assert kjt_is_equal(part, want)


def test_variable_batch_per_key() -> None:
    kjt = KeyedJaggedTensor(
        keys=["a", "b"],
        values=torch.arange(7),
        lengths=torch.tensor([1, 2, 0, 3, 1]),  # a: 2 bags, b: 3 bags
        stride_per_key_per_rank=[[2], [3]],
    )

    @torch.jit.script
    def per_key(kjt: KeyedJaggedTensor) -> tuple[list[int], list[int], torch.Tensor]:
        return kjt.stride_per_key(), kjt.length_per_key(), kjt["b"].lengths()

    spk, lpk, b_lengths = per_key(kjt)
    assert spk == kjt.stride_per_key() == [2, 3]
    assert lpk == kjt.length_per_key()
    assert torch.equal(b_lengths, kjt["b"].lengths())


def test_keyed_tensor_built_and_read_in_script() -> None:
    @torch.jit.script
    def build(x: torch.Tensor) -> KeyedTensor:
        kt = KeyedTensor(["u", "v"], [2, 3], x)
        assert torch.equal(kt["v"], x[:, 2:])
        return kt

    x = torch.randn(4, 5)
    kt = build(x)
    assert type(kt) is KeyedTensor
    assert kt.keys() == ["u", "v"]
    assert torch.equal(kt["u"], x[:, :2])
    assert torch.equal(kt.to_dict()["v"], x[:, 2:])


def test_jagged_tensor_in_script() -> None:
    @torch.jit.script
    def dense(jt: JaggedTensor) -> list[torch.Tensor]:
        return JaggedTensor(jt.values() * 2, None, None, jt.offsets()).to_dense()

    jt = JaggedTensor(values=torch.arange(5), lengths=torch.tensor([2, 0, 3]))
    got = dense(jt)
    want = JaggedTensor(values=torch.arange(5) * 2, lengths=torch.tensor([2, 0, 3])).to_dense()
    assert len(got) == 3
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_bad_input_raises_named_errors() -> None:
    kjt = _random_kjt(6, 2, 3, False)
    with pytest.raises(torch.jit.Error, match="unknown key 'nope'"):
        _per_key(kjt, "nope")
    with pytest.raises(torch.jit.Error, match="permute index 5 is out of range for 2 keys"):
        _permute(kjt, [5])
    with pytest.raises(torch.jit.Error, match=r"split segments \[1, 2\] sum to 3"):
        _split(kjt, [1, 2])

    @torch.jit.script
    def bad_stride(values: torch.Tensor, lengths: torch.Tensor) -> KeyedJaggedTensor:
        return KeyedJaggedTensor(["a", "b"], values, None, lengths, None, 2)

    with pytest.raises(torch.jit.Error, match="lengths hold 3 bags but 2 keys x stride 2 need 4"):
        bad_stride(torch.arange(3), torch.ones(3, dtype=torch.long))

    @torch.jit.script
    def weights_of(kjt: KeyedJaggedTensor) -> torch.Tensor:
        return kjt.weights()

    with pytest.raises(torch.jit.Error, match="has no weights"):
        weights_of(kjt)


def test_script_fields_rejects_other_types() -> None:
    with pytest.raises(TypeError, match="got Tensor"):
        script_fields(torch.zeros(1))  # type: ignore[arg-type]


class _Model(torch.nn.Module):
    def forward(self, kjt: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for key, jt in kjt.permute([1, 0]).to_dict().items():
            out[key] = jt.values() * 2 + jt.lengths().sum()
        return out


def test_artifact_loads_and_runs_without_shardrec(tmp_path: Path) -> None:
    kjt = _random_kjt(7, 2, 4, True)
    scripted = torch.jit.script(_Model())
    expected = scripted(kjt)
    assert expected.keys() == _Model()(kjt).keys()
    assert all(torch.equal(expected[k], v) for k, v in _Model()(kjt).items())
    assert_scripted_reloads_without_shardrec(scripted, script_fields(kjt), expected, tmp_path)


class _Leaf(TorchScriptable, torch.nn.Module):
    """Eager branch in Python the TorchScript compiler rejects; scripted branch in the subset."""

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        if not torch.jit.is_scripting():
            return torch.stack([jt.values().sum() for jt in kjt.to_dict().values()])
        sums: list[torch.Tensor] = []
        keys = kjt.keys()
        for key in keys:
            sums.append(kjt[key].values().sum())
        return torch.stack(sums)


class _Wrapper(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.leaf = _Leaf()

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        return self.leaf(kjt) * 2


def test_symbolic_trace_keeps_collections_whole_and_scripts() -> None:
    traced = symbolic_trace(_Wrapper())
    calls = [n.target for n in traced.graph.nodes if n.op == "call_module"]
    assert calls == ["leaf"]
    kjt = _random_kjt(8, 3, 4, False)
    scripted = torch.jit.script(traced)
    assert torch.equal(scripted(kjt), _Wrapper()(kjt))
    extra = symbolic_trace(_Wrapper(), leaf_modules=["leaf"])
    assert [n.target for n in extra.graph.nodes if n.op == "call_module"] == ["leaf"]
