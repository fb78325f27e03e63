"""`symbolic_trace` / `Tracer`: torch.fx tracing that keeps shardrec's collections whole
(TorchRec's `torchrec.fx`).

Modules with the `TorchScriptable` mixin (the embedding collections, quantized or sharded)
become `call_module` leaves instead of being traced through: their forward checks inputs in
Python and runs one code path eagerly and another under TorchScript, which tracing through
would flatten into the eager one. The traced `GraphModule` keeps the forward's annotations,
so `torch.jit.script(symbolic_trace(model))` compiles when the forward takes a KJT.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from torch import nn

from shardrec_jagged._fx import SymbolicProxyableMeta
from shardrec_jagged.torchscript import TorchScriptable

__all__ = ["SymbolicProxyableMeta", "Tracer", "is_fx_tracing", "symbolic_trace"]


def is_fx_tracing() -> bool:
    """True while ``torch.fx`` traces symbolically (TorchRec's ``torchrec.fx.tracer`` helper, for
    forwards that branch on it)."""
    return bool(torch.fx._symbolic_trace.is_fx_symbolic_tracing())


class Tracer(torch.fx.Tracer):
    """`torch.fx.Tracer` whose leaves also include shardrec's collections and, optionally,
    the modules at the qualified paths `leaf_modules`."""

    def __init__(self, leaf_modules: Sequence[str] | None = None) -> None:
        super().__init__()
        self._leaf_modules = set(leaf_modules or ())

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if isinstance(m, TorchScriptable) or module_qualified_name in self._leaf_modules:
            return True
        return bool(super().is_leaf_module(m, module_qualified_name))


def symbolic_trace(
    root: nn.Module | Callable[..., Any],
    concrete_args: dict[str, Any] | None = None,
    leaf_modules: Sequence[str] | None = None,
) -> torch.fx.GraphModule:
    """Trace `root` with `Tracer`; returns a `GraphModule` named like `root`'s class."""
    tracer = Tracer(leaf_modules)
    graph = tracer.trace(root, concrete_args)
    _resolve_string_annotations(graph, root.forward if isinstance(root, nn.Module) else root)
    name = root.__class__.__name__ if isinstance(root, nn.Module) else root.__name__
    return torch.fx.GraphModule(tracer.root, graph, name)


def _resolve_string_annotations(graph: torch.fx.Graph, fn: Callable[..., Any]) -> None:
    """Under `from __future__ import annotations` fx records the forward's annotations as
    strings, which TorchScript cannot resolve in the generated code: use the real types."""
    try:
        hints = typing.get_type_hints(fn)
    except (NameError, TypeError):
        return  # an annotation that does not evaluate: leave fx's record as it is
    for node in graph.nodes:
        if node.op == "placeholder" and isinstance(node.type, str):
            node.type = hints.get(str(node.target).lstrip("*"), node.type)
        elif node.op == "output" and isinstance(node.type, str) and "return" in hints:
            node.type = hints["return"]
