"""`register_torchscript_types()`: let `torch.jit.script` compile code that takes or builds
`JaggedTensor`, `KeyedJaggedTensor` and `KeyedTensor` (docs/design/torchscript.md).

shardrec's modules that take a KJT call it themselves when they are scripted (from
`__prepare_scriptable__`); call it before scripting a module of your own that takes a KJT and
holds none of shardrec's modules. It compiles the TorchScript twins once (~0.15 s) and is a
no-op afterwards.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.jit._state as _jit_state

from shardrec_jagged import _script_types
from shardrec_jagged.jagged_tensor import JaggedTensor
from shardrec_jagged.keyed_jagged_tensor import KeyedJaggedTensor
from shardrec_jagged.keyed_tensor import KeyedTensor

__all__ = ["TorchScriptable", "register_torchscript_types", "script_fields"]

_registered: list[bool] = [False]
_qualnames: dict[type, str] = {}


def register_torchscript_types() -> None:
    """Map the three Python classes to their TorchScript twins (idempotent).

    Uses two hooks of `torch.jit` (`_add_script_class` and `_jit_override_qualname`); a test
    fails loudly should a torch release drop them.
    """
    if _registered[0]:
        return
    twins = _script_types.compile_twins()
    classes = (JaggedTensor, KeyedJaggedTensor, KeyedTensor)
    for python_class, twin in zip(classes, twins, strict=True):
        qualified = torch._jit_internal._qualified_name(twin)
        script_class = _jit_state._get_script_class(twin)  # type: ignore[no-untyped-call]  # torch
        if script_class is None:
            raise RuntimeError(f"TorchScript did not register {qualified}")
        # Annotations and constructor calls naming the Python class resolve to the twin ...
        _jit_state._add_script_class(python_class, script_class)
        # ... also where TorchScript looks classes up by qualified name (the classes' metaclass
        # answers `_jit_override_qualname` from this table).
        _qualnames[python_class] = qualified
    _registered[0] = True


def script_qualname(python_class: type) -> str:
    """The TorchScript twin's qualified name for one of the three classes (compiles the twins
    on first use)."""
    register_torchscript_types()
    for klass in python_class.__mro__:  # a user's subclass scripts as its base class's twin
        if klass in _qualnames:
            return _qualnames[klass]
    raise AttributeError(f"{python_class.__name__} has no TorchScript twin")


class TorchScriptable:
    """Mixin for `nn.Module`s taking KJTs: registers the twins when the module is scripted."""

    def __prepare_scriptable__(self) -> TorchScriptable:
        register_torchscript_types()
        return self


def script_fields(value: JaggedTensor | KeyedJaggedTensor | KeyedTensor) -> dict[str, Any]:
    """The attributes a scripted function reads off `value`, as tensors and plain Python values
    (host-side caches dropped).

    A process without shardrec (a serving process, say) feeds a saved artifact with
    `types.SimpleNamespace(**fields)` in place of the object.
    """
    if isinstance(value, KeyedJaggedTensor):
        kjt = value
        return {
            "_keys": list(kjt.keys()),
            "_values": kjt.values(),
            "_weights": kjt.weights_or_none(),
            "_lengths": kjt.lengths(),
            "_offsets": kjt.offsets_or_none(),
            "_stride": kjt.stride(),
            "_stride_per_key_per_rank": kjt.stride_per_key_per_rank() or None,
            "_stride_per_key": None,
            "_length_per_key": None,
            "_offset_per_key": None,
            "_lengths_offset_per_key": None,
            "_index_per_key": None,
            "_jt_dict": None,
            "_inverse_indices": kjt.inverse_indices_or_none(),
        }
    if isinstance(value, JaggedTensor):
        return {
            "_values": value.values(),
            "_weights": value.weights_or_none(),
            "_lengths": value.lengths(),
            "_offsets": value.offsets_or_none(),
        }
    if isinstance(value, KeyedTensor):
        return {
            "_keys": list(value.keys()),
            "_length_per_key": list(value.length_per_key()),
            "_values": value.values(),
            "_key_dim": value.key_dim(),
            "_offset_per_key": None,
            "_index_per_key": None,
        }
    raise TypeError(
        "script_fields takes a JaggedTensor, KeyedJaggedTensor or KeyedTensor, got "
        f"{type(value).__name__}"
    )
