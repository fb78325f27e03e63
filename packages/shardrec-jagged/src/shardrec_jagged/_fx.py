"""torch.fx support: constructing a value type from fx Proxies records one graph node.

The three value types use ``ProxyableMeta``: during ``torch.fx.symbolic_trace`` a constructor
call that receives a Proxy becomes a ``call_function`` node instead of running ``__init__`` on
Proxies. Outside symbolic tracing (eager and ``torch.compile``) it is a plain constructor call.
"""

from __future__ import annotations

from typing import Any

from torch.fx._symbolic_trace import ProxyableClassMeta, is_fx_symbolic_tracing


class ProxyableMeta(ProxyableClassMeta):
    """``ProxyableClassMeta`` with a plain fast path, and the hook that lets TorchScript compile
    code naming the class.

    torch's own ``__call__`` asks ``is_fx_tracing()``, which logs a warning on first use and
    is also true under ``torch.export``; we only need the Proxy handling in symbolic tracing.
    """

    @property
    def _jit_override_qualname(cls) -> str:
        """The qualified name of the class's TorchScript twin (docs/design/torchscript.md).

        Only ``torch.jit`` reads this attribute (to map a Python class to its script class), so
        reading it is the moment a script compilation first meets one of our classes: the twins
        are compiled then, once, instead of at import or by an explicit call.
        """
        from shardrec_jagged import torchscript  # lazy: torchscript imports the classes

        return torchscript.script_qualname(cls)

    # Returns Any like the base class: mypy then keeps each class's own __init__ signature.
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if is_fx_symbolic_tracing():
            return super().__call__(*args, **kwargs)
        # type.__call__ is the C-level "allocate + __init__" (~0.3 us faster than doing the two
        # steps in Python here); it skips ProxyableClassMeta.__call__ and its tracing checks.
        return type.__call__(cls, *args, **kwargs)
