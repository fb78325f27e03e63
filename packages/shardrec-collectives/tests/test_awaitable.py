"""Awaitable, NoWait and LazyAwaitable (no communication involved)."""

from __future__ import annotations

import pytest
import torch
import torch.fx

from shardrec_collectives import Awaitable, LazyAwaitable, LazyNoWait, NoWait
from shardrec_collectives.awaitable import GetItemLazyAwaitable, LazyGetItemMixin


class Counter:
    def __init__(self, value: torch.Tensor) -> None:
        self.calls = 0
        self.value = value

    def __call__(self) -> torch.Tensor:
        self.calls += 1
        return self.value


def test_wait_runs_once_and_caches() -> None:
    fn = Counter(torch.tensor([1.0, 2.0]))
    a = Awaitable(fn)
    assert not a.done
    assert a.wait() is a.wait()
    assert fn.calls == 1 and a.done


def test_callbacks_run_in_order_on_first_wait() -> None:
    a = Awaitable(lambda: 2)
    a.callbacks.append(lambda x: x + 1)
    a.add_callback(lambda x: x * 10)
    assert a.wait() == 30
    assert a.wait() == 30


def test_then_chains_without_nesting() -> None:
    fn = Counter(torch.tensor(3.0))
    chained = Awaitable(fn).then(lambda t: t * 2)
    assert fn.calls == 0
    assert float(chained.wait()) == 6.0 and fn.calls == 1


def test_awaitable_of_awaitable_is_rejected() -> None:
    with pytest.raises(TypeError, match="NoWait of an awaitable"):
        NoWait(NoWait(1))
    nested: Awaitable[object] = Awaitable(lambda: NoWait(1))
    with pytest.raises(TypeError, match="produced another awaitable \\(NoWait\\)"):
        nested.wait()


def test_subclass_overrides_wait_impl_and_base_needs_a_function() -> None:
    class Five(Awaitable[int]):
        def _wait_impl(self) -> int:
            return 5

    assert Five().wait() == 5
    with pytest.raises(TypeError, match="Awaitable has no wait function"):
        Awaitable[int]().wait()


def test_no_wait_returns_value() -> None:
    t = torch.ones(2)
    assert NoWait(t).wait() is t


def test_lazy_awaitable_waits_on_torch_function() -> None:
    fn = Counter(torch.tensor([1.0, 2.0]))
    lazy = LazyAwaitable(fn)
    assert fn.calls == 0
    out = torch.cat([lazy, torch.tensor([3.0])])  # type: ignore[list-item]  # lazy stands in for a tensor
    assert out.tolist() == [1.0, 2.0, 3.0] and fn.calls == 1
    assert torch.sum(lazy).item() == 3.0  # type: ignore[call-overload]  # same
    assert fn.calls == 1


def test_lazy_awaitable_forwards_attributes_operators_and_indexing() -> None:
    lazy = LazyAwaitable(Awaitable(lambda: torch.tensor([1.0, 2.0])))
    assert lazy.shape == torch.Size([2])
    assert (lazy + 1).tolist() == [2.0, 3.0]  # type: ignore[operator]  # installed dynamically
    assert (1 - lazy).tolist() == [0.0, -1.0]  # type: ignore[operator]  # installed dynamically
    assert (lazy * lazy).tolist() == [1.0, 4.0]  # type: ignore[operator]  # installed dynamically
    assert (-lazy).tolist() == [-1.0, -2.0]  # type: ignore[operator]  # installed dynamically
    assert float(lazy[1]) == 2.0  # type: ignore[arg-type]  # the element is a tensor
    assert len(lazy) == 2
    assert [float(x) for x in lazy] == [1.0, 2.0]  # type: ignore[arg-type]  # same


def test_lazy_awaitable_does_not_wait_for_private_probes() -> None:
    fn = Counter(torch.zeros(1))
    lazy = LazyAwaitable(fn)
    assert not hasattr(lazy, "_not_there")
    assert fn.calls == 0
    assert isinstance(lazy, Awaitable)
    lazy.add_callback(lambda t: t + 1)
    assert lazy.wait().tolist() == [1.0]


def test_lazy_awaitable_of_dict_like_result() -> None:
    lazy = LazyAwaitable(lambda: {"a": torch.tensor([1.0])})
    assert lazy["a"].tolist() == [1.0]  # type: ignore[attr-defined]  # a tensor at runtime
    assert list(lazy.keys()) == ["a"]  # type: ignore[operator]  # forwarded attribute


def test_lazy_no_wait_forwards_to_its_value() -> None:
    t = torch.arange(3.0)
    lazy = LazyNoWait(t)
    both = torch.cat([lazy, lazy])  # type: ignore[list-item]  # waited by __torch_function__
    assert torch.equal(both, torch.cat([t, t]))
    added: object = lazy + 1  # type: ignore[operator]  # forwarded to the waited tensor
    assert isinstance(added, torch.Tensor) and torch.equal(added, t + 1)
    assert lazy.shape == t.shape
    assert lazy.wait() is t
    with pytest.raises(TypeError, match="LazyNoWait of an awaitable"):
        LazyNoWait(NoWait(t))


def test_lazy_awaitable_built_from_a_proxy_is_a_graph_node() -> None:
    class Inner(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> LazyAwaitable[torch.Tensor]:
            return _PlusOne(x * 2)

    class Outer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Inner()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sub(self.inner(x), x)

    model = Outer()
    gm = torch.fx.symbolic_trace(model)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert _PlusOne in targets  # built at run time, not waited on while tracing
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(gm(x), x * 2 + 1 - x)
    assert torch.equal(gm(x), model(x))


def test_result_is_none_until_the_first_wait() -> None:
    lazy = LazyAwaitable(lambda: torch.tensor([3.0]))
    assert lazy._result is None and not lazy.done
    waited = lazy.wait()
    assert lazy._result is waited and lazy.done


class _Forgot(LazyAwaitable[torch.Tensor]):
    def __init__(self) -> None:  # does not call super().__init__(): a user error
        self.value = torch.ones(2)

    def _wait_impl(self) -> torch.Tensor:
        return self.value


def test_subclass_without_super_init_raises_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match=r"not been initialized properly.*super"):
        torch.ones(2) + _Forgot()  # type: ignore[operator]  # the error under test


class _Keyed(LazyGetItemMixin[str, torch.Tensor], LazyAwaitable[dict[str, torch.Tensor]]):
    def __init__(self, fn: Counter) -> None:
        super().__init__()
        self.fn = fn

    def _wait_impl(self) -> dict[str, torch.Tensor]:
        value = self.fn()
        return {"a": value, "b": 2 * value}


def test_lazy_get_item_mixin_defers_the_parent_wait() -> None:
    fn = Counter(torch.tensor([1.0, 4.0]))
    parent = _Keyed(fn)
    a, b = parent["a"], parent["b"]
    assert isinstance(a, GetItemLazyAwaitable) and isinstance(b, LazyAwaitable)
    assert fn.calls == 0 and not parent.done and not a.done
    total = torch.add(a, b)  # type: ignore[call-overload]  # waited by __torch_function__
    assert torch.equal(total, 3 * fn.value)
    assert fn.calls == 1  # the parent waited once for both items
    with pytest.raises(KeyError):
        parent["missing"].wait()


def test_lazy_get_item_mixin_needs_a_lazy_awaitable() -> None:
    class NotLazy(LazyGetItemMixin[str, int]):
        pass

    with pytest.raises(TypeError, match="not a LazyAwaitable"):
        NotLazy()["x"]


class _PlusOne(LazyAwaitable[torch.Tensor]):
    def __init__(self, x: torch.Tensor) -> None:
        super().__init__()
        self.x = x

    def _wait_impl(self) -> torch.Tensor:
        return self.x + 1


class _UsesLazy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first, second = _PlusOne(x), _PlusOne(2 * x)
        return 3 * first - second + torch.mul(first, x)  # type: ignore[operator, no-any-return]


def test_fx_symbolic_trace_of_a_model_using_lazy_awaitables() -> None:
    model = _UsesLazy()
    gm = torch.fx.symbolic_trace(model)
    assert any(n.target is _PlusOne for n in gm.graph.nodes)  # the awaitable is a graph node
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    expected = 3 * (x + 1) - (2 * x + 1) + (x + 1) * x  # the formula, no awaitables
    assert torch.allclose(gm(x), expected)
    assert torch.allclose(model(x), expected)


def test_lazy_awaitables_warn_nothing_eager_or_traced(caplog: pytest.LogCaptureFixture) -> None:
    """Building one (eagerly and from a Proxy) logs no torch `is_fx_tracing` warning: torch's
    `ProxyableClassMeta.__call__` logged it once per process, i.e. once per rank of every run.
    torch caches the warning per process; its cache is cleared so an earlier test cannot hide
    it."""
    import logging
    import warnings

    import torch.fx._symbolic_trace as fx_trace

    fx_trace.is_fx_tracing_warning.cache_clear()
    logger = logging.getLogger(fx_trace.__name__)
    logger.addHandler(caplog.handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            x = torch.ones(2)
            assert torch.equal(_PlusOne(x).wait(), x + 1)
            gm = torch.fx.symbolic_trace(_UsesLazy())
            assert torch.allclose(gm(x), _UsesLazy()(x))
    finally:
        logger.removeHandler(caplog.handler)
    assert [str(w.message) for w in caught] == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
