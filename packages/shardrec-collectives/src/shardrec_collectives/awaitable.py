"""Awaitables: a value that is still arriving (usually over a collective).

`Awaitable[T].wait()` returns the `T` once, runs the callbacks on it in order, and caches it. A
collective returns an `Awaitable` right after starting its communication, so that the caller can
start more work (the next batch's input distribution, the dense forward) before waiting.

`LazyAwaitable[T]` waits by itself the first time its result is used: passed to a torch function,
asked for an attribute, or used with an operator. It is what a sharded module's `forward` returns,
so that code written for the unsharded module keeps working unchanged. Its class is proxyable by
`torch.fx`: built from a traced value, it becomes a node of the graph (TorchRec's behaviour), so a
model whose forward uses one traces with `torch.fx.symbolic_trace`. `LazyGetItemMixin` makes
indexing lazy too: `lazy["f1"]` is another `LazyAwaitable`, and the parent waits only when a value
is used.

Awaitables never nest: a `wait()` that would produce another awaitable raises `TypeError`
(TorchRec's `.wait().wait()` is what this rule removes). Chain with `then` instead. The one
exception is TorchRec's two-stage `KJTAllToAll` module (`dist_data.py`), whose awaitable class
sets `nests = True` so that code written for TorchRec's `.wait().wait()` runs unchanged.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import ClassVar, Generic, TypeVar

import torch
import torch.fx
from torch.utils._pytree import tree_map

from shardrec_jagged.fx import SymbolicProxyableMeta

__all__ = [
    "Awaitable",
    "GetItemLazyAwaitable",
    "LazyAwaitable",
    "LazyGetItemMixin",
    "LazyNoWait",
    "NoWait",
]

T = TypeVar("T")
U = TypeVar("U")
K = TypeVar("K")
V = TypeVar("V")


class Awaitable(Generic[T]):
    """A `T` that becomes available on `wait()`.

    Either pass `wait_fn` (called once, on the first `wait()`), or subclass and override
    `_wait_impl`. `callbacks` (functions `T -> T`) run in order on the result of the first wait.
    """

    # Whether `wait()` may produce another awaitable (only TorchRec's two-stage form sets it).
    nests: ClassVar[bool] = False

    def __init__(self, wait_fn: Callable[[], T] | None = None) -> None:
        self._wait_fn = wait_fn
        self._callbacks: list[Callable[[T], T]] = []
        # TorchRec's attribute: the cached result, None until the first wait.
        self._result: T | None = None
        self._done = False

    @property
    def callbacks(self) -> list[Callable[[T], T]]:
        """Functions applied in order to the result of the first `wait()` (appendable)."""
        return self._callbacks

    def add_callback(self, fn: Callable[[T], T]) -> Awaitable[T]:
        """Append `fn` to `callbacks`; returns `self` for chaining."""
        self._callbacks.append(fn)
        return self

    def then(self, fn: Callable[[T], U]) -> Awaitable[U]:
        """A new awaitable of `fn(self.wait())`: waiting it waits this one first."""
        return Awaitable(lambda: fn(self.wait()))

    def _wait_impl(self) -> T:
        if self._wait_fn is None:
            raise TypeError(
                f"{type(self).__name__} has no wait function: pass wait_fn or override _wait_impl"
            )
        return self._wait_fn()

    @property
    def done(self) -> bool:
        """Whether `wait()` has already produced the result."""
        return self._done

    def wait(self) -> T:
        """The result (computed on the first call, cached afterwards)."""
        if not self._done:
            result = self._wait_impl()
            for fn in self._callbacks:
                result = fn(result)
            if isinstance(result, Awaitable) and not self.nests:
                raise TypeError(
                    f"{type(self).__name__}.wait() produced another awaitable "
                    f"({type(result).__name__}); awaitables never nest, chain with then()"
                )
            self._result = result
            self._done = True
            self._wait_fn = None  # drop references to buffers and work handles
        return self._result  # type: ignore[return-value]  # set to a T just above


class NoWait(Awaitable[T]):
    """An awaitable whose value is already here (for code paths without communication)."""

    def __init__(self, obj: T) -> None:
        if isinstance(obj, Awaitable):
            raise TypeError(f"NoWait of an awaitable ({type(obj).__name__}); pass the value")
        super().__init__()
        self._obj = obj

    def _wait_impl(self) -> T:
        return self._obj


def _wait_if_lazy(obj: object) -> object:
    return obj.wait() if isinstance(obj, LazyAwaitable) else obj


class LazyAwaitable(Awaitable[T], metaclass=SymbolicProxyableMeta):
    """An awaitable that waits by itself on first use of its result.

    Under torch.fx tracing, constructing one from a Proxy records the construction as a graph
    node (a torch `ProxyableClassMeta`, as TorchRec's, that never logs torch's `is_fx_tracing`
    warning), so the traced graph builds and waits on it at run time.

    `source` is an `Awaitable[T]` to wait for or a function producing the `T`; a subclass may
    instead override `_wait_impl`. Using the object as a tensor argument (`torch.cat([lazy])`),
    reading an attribute (`lazy.values()`), indexing (`lazy["f1"]`) or an operator (`lazy + 1`)
    calls `wait()` and forwards to the result.
    """

    def __init__(self, source: Awaitable[T] | Callable[[], T] | None = None) -> None:
        if isinstance(source, Awaitable):
            inner = source
            super().__init__(inner.wait)
        else:
            super().__init__(source)

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., object],
        types: Sequence[type],
        args: Sequence[object] = (),
        kwargs: Mapping[str, object] | None = None,
    ) -> object:
        new_args = tree_map(_wait_if_lazy, tuple(args))
        new_kwargs = tree_map(_wait_if_lazy, dict(kwargs or {}))
        return func(*new_args, **new_kwargs)

    def __getattr__(self, name: str) -> object:
        # Only called for names not found normally. Private names are not forwarded, so that
        # copy/pickle probes and half-initialized objects do not trigger a wait.
        if name in ("_done", "_result", "_callbacks", "_wait_fn"):
            raise RuntimeError(
                f"{type(self).__name__} has not been initialized properly ({name} is unset): "
                "its __init__ must call super().__init__()"
            )
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.wait(), name)

    def __getitem__(self, key: object) -> object:
        return self.wait()[key]  # type: ignore[index]  # T is indexable when this is used

    def __len__(self) -> int:
        return len(self.wait())  # type: ignore[arg-type]  # T is sized when this is used

    def __iter__(self) -> Iterator[object]:
        items: Iterator[object] = iter(self.wait())  # type: ignore[call-overload]  # T is iterable when this is used
        return items


class LazyNoWait(LazyAwaitable[T]):
    """A `LazyAwaitable` whose value is already here (TorchRec's name)."""

    def __init__(self, obj: T) -> None:
        if isinstance(obj, Awaitable):
            raise TypeError(f"LazyNoWait of an awaitable ({type(obj).__name__}); pass the value")
        super().__init__(lambda: obj)


class LazyGetItemMixin(Generic[K, V]):
    """Makes `awaitable[key]` lazy: it returns a `GetItemLazyAwaitable` instead of waiting.

    Put it before `LazyAwaitable` among the bases (`class A(LazyGetItemMixin[str, Tensor],
    LazyAwaitable[dict[str, Tensor]])`) so that its `__getitem__` wins. Each item waits the parent
    (once, cached) when the item itself is first used.
    """

    def __getitem__(self, key: K) -> GetItemLazyAwaitable[V]:
        parent: object = self
        if not isinstance(parent, LazyAwaitable):
            raise TypeError(
                f"LazyGetItemMixin is mixed into {type(self).__name__}, which is not a "
                "LazyAwaitable: list LazyAwaitable among its bases"
            )
        return GetItemLazyAwaitable(parent, key)


class GetItemLazyAwaitable(LazyAwaitable[V]):
    """`parent.wait()[key]`, computed when first used (what `LazyGetItemMixin` indexing returns)."""

    def __init__(self, parent: LazyAwaitable[object], key: object) -> None:
        super().__init__()
        self._parent = parent
        self._key = key

    def _wait_impl(self) -> V:
        value: V = self._parent.wait()[self._key]  # type: ignore[index]  # the parent is keyed
        return value


def _install_operators() -> None:
    # Arithmetic and comparison operators forward to the waited result (both operands waited),
    # the same set torch.fx proxies support. Installed with setattr to avoid forty near-identical
    # method definitions; __eq__/__ne__ stay identity-based so awaitables remain hashable.
    def binary(op: Callable[[object, object], object]) -> Callable[[object, object], object]:
        return lambda a, b: op(_wait_if_lazy(a), _wait_if_lazy(b))

    def reflected(op: Callable[[object, object], object]) -> Callable[[object, object], object]:
        return lambda a, b: op(_wait_if_lazy(b), _wait_if_lazy(a))

    def unary(op: Callable[[object], object]) -> Callable[[object], object]:
        return lambda a: op(_wait_if_lazy(a))

    for name in torch.fx.graph.magic_methods:
        op = getattr(operator, name, None)
        if name in ("eq", "ne", "getitem") or op is None:
            continue
        dunder = name.rstrip("_")  # operator.and_ -> __and__
        if name in ("neg", "pos", "invert"):
            setattr(LazyAwaitable, f"__{dunder}__", unary(op))
        else:
            setattr(LazyAwaitable, f"__{dunder}__", binary(op))
    for name in torch.fx.graph.reflectable_magic_methods:
        op = getattr(operator, name, None)
        if name != "getitem" and op is not None:
            setattr(LazyAwaitable, f"__r{name.rstrip('_')}__", reflected(op))


_install_operators()
