"""KeyedOptimizer family: keyed state_dict, round trips, strict loading, combination."""

from __future__ import annotations

import copy
from collections.abc import Iterable

import pytest
import torch

from shardrec_optim import (
    CombinedOptimizer,
    KeyedOptimizer,
    KeyedOptimizerWrapper,
    OptimizerWrapper,
)


def _model(seed: int = 0) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))


def _adam(m: torch.nn.Module) -> KeyedOptimizerWrapper:
    return KeyedOptimizerWrapper(dict(m.named_parameters()), lambda p: torch.optim.Adam(p, lr=0.01))


def _train(m: torch.nn.Module, opt: torch.optim.Optimizer, steps: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 4, generator=gen)
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()


def _trained() -> tuple[torch.nn.Sequential, KeyedOptimizerWrapper]:
    """A model and its keyed Adam after one step: the state every state-dict test starts from."""
    m = _model()
    opt = _adam(m)
    _train(m, opt, 1, seed=0)
    return m, opt


def _assert_equal_tensors(got: Iterable[torch.Tensor], want: Iterable[torch.Tensor]) -> None:
    for a, b in zip(got, want, strict=True):
        assert torch.equal(a, b)


def test_keyed_state_dict_uses_parameter_names() -> None:
    _, opt = _trained()
    sd = opt.state_dict()
    assert set(sd["state"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}  # type: ignore[call-overload]  # nested dict
    assert "param_groups" not in sd


def test_keyed_matches_plain_torch_optimizer() -> None:
    m1, m2 = _model(), _model()
    _train(m1, _adam(m1), 3, seed=1)
    _train(m2, torch.optim.Adam(m2.parameters(), lr=0.01), 3, seed=1)
    _assert_equal_tensors(m1.parameters(), m2.parameters())


def test_save_load_mid_training_continues_identically() -> None:
    m = _model()
    opt = _adam(m)
    _train(m, opt, 3, seed=2)
    sd = copy.deepcopy(opt.state_dict())
    m_copy = copy.deepcopy(m)
    _train(m, opt, 3, seed=3)

    opt2 = _adam(m_copy)  # fresh, lazily-initialized state: loading fills it
    opt2.load_state_dict(sd)
    _train(m_copy, opt2, 3, seed=3)
    _assert_equal_tensors(m.parameters(), m_copy.parameters())


def test_load_copies_in_place_into_existing_state() -> None:
    _, opt = _trained()
    p = opt.params["0.weight"]
    storage = opt.state[p]["exp_avg"]
    sd = copy.deepcopy(opt.state_dict())
    sd["state"]["0.weight"]["exp_avg"].fill_(3.0)  # type: ignore[index]  # nested dict
    opt.load_state_dict(sd)
    assert opt.state[p]["exp_avg"] is storage and bool((storage == 3.0).all())


def test_load_rejects_unknown_missing_and_misshapen_state() -> None:
    _, opt = _trained()
    sd = opt.state_dict()
    bad = copy.deepcopy(sd)
    bad["state"]["9.weight"] = {}  # type: ignore[index]  # nested dict
    with pytest.raises(ValueError, match=r"9.weight"):
        opt.load_state_dict(bad)
    bad = copy.deepcopy(sd)
    del bad["state"]["2.bias"]  # type: ignore[attr-defined]  # nested dict
    with pytest.raises(ValueError, match=r"'2.bias'"):
        opt.load_state_dict(bad)
    bad = copy.deepcopy(sd)
    bad["state"]["0.weight"]["exp_avg"] = torch.zeros(2, 2)  # type: ignore[index]  # nested dict
    with pytest.raises(ValueError, match=r"0.weight/exp_avg.*\(2, 2\).*\(3, 4\)"):
        opt.load_state_dict(bad)
    with pytest.raises(ValueError, match=r"'state'"):
        opt.load_state_dict({"params": []})


def test_param_groups_round_trip_when_saved() -> None:
    m = _model()
    opt = _adam(m)
    opt.save_param_groups(True)
    _train(m, opt, 1, seed=0)
    sd = copy.deepcopy(opt.state_dict())
    assert sd["param_groups"][0]["params"] == sorted(opt.params)  # type: ignore[index]  # nested dict
    opt.param_groups[0]["lr"] = 5.0
    opt.load_state_dict(sd)
    assert opt.param_groups[0]["lr"] == 0.01


def test_combined_prefixes_and_round_trips() -> None:
    a, b = _model(0), _model(1)
    oa, ob = (
        _adam(a),
        KeyedOptimizerWrapper(
            dict(b.named_parameters()), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)
        ),
    )
    comb = CombinedOptimizer([("a", oa), ("b", ob)])
    assert sorted(comb.params) == sorted(
        [f"a.{k}" for k in oa.params] + [f"b.{k}" for k in ob.params]
    )
    both = torch.nn.ModuleList([a, b])
    gen = torch.Generator().manual_seed(0)
    for _ in range(2):
        comb.zero_grad()
        x = torch.randn(5, 4, generator=gen)
        (a(x).sum() + b(x).sum()).backward()
        comb.step()
    sd = copy.deepcopy(comb.state_dict())
    assert "b.0.weight" in sd["state"] and "a.2.bias" in sd["state"]  # type: ignore[operator]  # nested dict
    assert len(comb.param_groups) == 2 and len(comb.state) == 8
    snapshot = copy.deepcopy(both)
    comb.zero_grad()
    x = torch.randn(5, 4, generator=gen)
    (a(x).sum() + b(x).sum()).backward()
    comb.step()  # move away, then restore and redo the same step
    after = [p.clone() for p in both.parameters()]
    with torch.no_grad():
        for p, q in zip(both.parameters(), snapshot.parameters(), strict=True):
            p.copy_(q)
    comb.load_state_dict(sd)
    comb.zero_grad()
    (a(x).sum() + b(x).sum()).backward()
    comb.step()
    _assert_equal_tensors(both.parameters(), after)


def test_combined_rejects_duplicate_keys_and_non_keyed() -> None:
    m = _model()
    o1, o2 = _adam(m), _adam(m)
    with pytest.raises(ValueError, match=r"'0.weight'"):
        CombinedOptimizer([o1, o2])
    with pytest.raises(TypeError, match=r"Adam"):
        CombinedOptimizer([torch.optim.Adam(m.parameters())])  # type: ignore[list-item]  # bad input under test
    comb = CombinedOptimizer([("x", o1)])
    with pytest.raises(ValueError, match=r"y.0.weight"):
        comb.load_state_dict({"state": {"y.0.weight": {}}})


def test_keyed_optimizer_rejects_stray_state_and_add_param_group() -> None:
    p, q = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError, match=r"params"):
        KeyedOptimizer({"p": p}, {q: {}}, [{"params": [p]}])
    opt = KeyedOptimizer({"p": p}, {}, [{"params": [p]}])
    with pytest.raises(TypeError, match=r"add_param_group"):
        opt.add_param_group({"params": [q]})


def test_wrapper_delegates_and_lr_scheduler_works() -> None:
    m = _model()
    inner = _adam(m)
    wrapped = OptimizerWrapper(inner)
    sched = torch.optim.lr_scheduler.StepLR(wrapped, step_size=1, gamma=0.5)
    _train(m, wrapped, 2, seed=0)
    sched.step()
    assert inner.param_groups[0]["lr"] == pytest.approx(0.005)
    assert wrapped.state_dict()["state"].keys() == inner.state_dict()["state"].keys()  # type: ignore[attr-defined]  # nested dict


def test_init_state_gives_sparse_zero_grads_to_named_params() -> None:
    dense = torch.nn.Parameter(torch.ones(2, 3))
    emb = torch.nn.Parameter(torch.ones(4, 2))
    opt = KeyedOptimizerWrapper(
        {"dense": dense, "emb": emb}, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.5)
    )
    opt.init_state({"emb"})
    assert emb.grad is not None and emb.grad.is_sparse
    assert dense.grad is not None and not dense.grad.is_sparse
    assert torch.equal(emb.detach(), torch.ones(4, 2))  # zero gradients move nothing
    assert set(opt.state_dict()["state"]) == {"dense", "emb"}  # type: ignore[call-overload]  # nested dict


class _Stateful:
    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"t": self.t}

    def load_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        self.t.copy_(sd["t"])


def test_stateful_objects_save_their_state_dict_and_load_in_place() -> None:
    p = torch.nn.Parameter(torch.zeros(2))
    obj = _Stateful(torch.tensor([1.0, 2.0]))
    opt = KeyedOptimizer({"p": p}, {p: {"obj": obj, "n": 3}}, [{"params": [p]}])
    sd = opt.state_dict()
    assert torch.equal(sd["state"]["p"]["obj"]["t"], torch.tensor([1.0, 2.0]))  # type: ignore[index]  # nested dict
    opt.load_state_dict({"state": {"p": {"obj": {"t": torch.tensor([5.0, 6.0])}, "n": 4}}})
    assert torch.equal(obj.t, torch.tensor([5.0, 6.0]))
    assert opt.state[p]["n"] == 4


def test_stray_state_message_names_the_keys() -> None:
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError, match=r"All state keys must be params.*'other'"):
        KeyedOptimizer({"p": p}, {p: {}, "other": 1.0}, [{"params": [p]}])  # type: ignore[dict-item]  # bad input under test
