"""torch.fx support: constructing a value type from fx Proxies records one graph node.

The value types (and shardrec-collectives' ``LazyAwaitable``) use a ``ProxyableMeta``: during
``torch.fx.symbolic_trace`` a constructor call that receives a Proxy becomes a
``call_function`` node instead of running ``__init__`` on Proxies. Outside symbolic tracing
(eager and ``torch.compile``) it is a plain constructor call.
"""

from __future__ import annotations

from typing import Any

from torch.fx._symbolic_trace import ProxyableClassMeta, is_fx_symbolic_tracing
from torch.fx.node import map_aggregate
from torch.fx.proxy import Proxy


class SymbolicProxyableMeta(ProxyableClassMeta):
    """torch's ``ProxyableClassMeta`` (an ``isinstance`` match for code that checks it) with its
    ``__call__`` done here.

    torch's ``__call__`` asks ``torch.fx._symbolic_trace.is_fx_tracing()``, which logs
    "is_fx_tracing will return true for both fx.symbolic_trace and torch.export ..." on first
    use in every process (once per rank) and is also true under ``torch.export``; only symbolic
    tracing needs the Proxy handling, and ``is_fx_symbolic_tracing()`` asks exactly that,
    silently.
    """

    # Returns Any like the base class: mypy then keeps each class's own __init__ signature.
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if is_fx_symbolic_tracing():
            proxies: list[Proxy] = []

            def find(a: object) -> object:
                if isinstance(a, Proxy):
                    proxies.append(a)
                return a

            map_aggregate(args, find)  # type: ignore[arg-type]  # any nesting of arguments
            map_aggregate(kwargs, find)  # type: ignore[arg-type]
            if proxies:
                return proxies[0].tracer.create_proxy("call_function", cls, args, kwargs)
        # type.__call__ is the C-level "allocate + __init__" (~0.3 us faster than doing the two
        # steps in Python here).
        return type.__call__(cls, *args, **kwargs)


class ProxyableMeta(SymbolicProxyableMeta):
    """``SymbolicProxyableMeta`` plus the hook that lets TorchScript compile code naming the
    class (the three value types)."""

    @property
    def _jit_override_qualname(cls) -> str:
        """The qualified name of the class's TorchScript twin (docs/design/torchscript.md).

        Only ``torch.jit`` reads this attribute (to map a Python class to its script class), so
        reading it is the moment a script compilation first meets one of our classes: the twins
        are compiled then, once, instead of at import or by an explicit call.
        """
        from shardrec_jagged import torchscript  # lazy: torchscript imports the classes

        return torchscript.script_qualname(cls)
