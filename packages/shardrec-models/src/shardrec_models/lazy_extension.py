"""Lazy modules (TorchRec's `torchrec.modules.lazy_extension`).

- `LazyModuleExtensionMixin`: torch's `LazyModuleMixin` (whose first forward calls
  `initialize_parameters(*args, **kwargs)`; torch 2.13 already passes keyword arguments, the
  reason TorchRec's extension exists) plus an `apply()` that refuses to run before the module is
  initialized, instead of applying `fn` to uninitialized parameters.
- `lazy_apply(module, fn)`: run `module.apply(fn)` once, right after the first forward, when
  every lazy parameter has its shape (e.g. to initialize their values).
"""

from collections.abc import Callable
from typing import Any

from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin

__all__ = ["LazyModuleExtensionMixin", "lazy_apply"]


def _after_first_forward(module: nn.Module, inputs: Any, output: Any) -> None:
    for fn in module.__dict__.pop("_functions_to_lazy_apply", []):
        module.apply(fn)
    module.__dict__.pop("_lazy_apply_hook").remove()


def lazy_apply(module: nn.Module, fn: Callable[[nn.Module], None]) -> nn.Module:
    """Attach `fn`; it is applied (as by `module.apply`) once, after the first forward.
    Several functions run in the order attached. Returns `module`."""
    if "_lazy_apply_hook" not in module.__dict__:
        module.__dict__["_functions_to_lazy_apply"] = []
        module.__dict__["_lazy_apply_hook"] = module.register_forward_hook(_after_first_forward)
    module.__dict__["_functions_to_lazy_apply"].append(fn)
    return module


class LazyModuleExtensionMixin(LazyModuleMixin):
    """`LazyModuleMixin` whose `apply()` raises `RuntimeError` before the first forward."""

    def apply(self, fn: Callable[[nn.Module], None]) -> nn.Module:
        if hasattr(self, "_initialize_hook"):
            raise RuntimeError(
                f"{type(self).__name__} has not been initialized: run one forward first, or "
                "attach fn with lazy_apply(module, fn) to apply it after the first forward"
            )
        result: nn.Module = super().apply(fn)  # type: ignore[misc]  # nn.Module.apply via the MRO
        return result
