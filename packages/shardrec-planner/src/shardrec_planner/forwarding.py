"""Module attributes of a TorchRec-path shim that stand for another module's attribute.

The umbrella package's shims (`shardrec.distributed.planner.*`) call `forward_attributes`; it
lives here because the umbrella defines nothing of its own.

TorchRec's users `mock.patch` private names at TorchRec's module paths
(`torchrec.distributed.planner.proposers.logger`, `...shard_estimators.
_calculate_storage_specific_sizes`) to observe or change what TorchRec's code calls. Here that
code lives in another module, which looks the name up in its own globals when it runs; a
forwarded attribute reads, sets and deletes (restores the original of) that module's name, so a
patch at the TorchRec path reaches the code that uses it.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence

__all__ = ["forward_attributes"]


def _forwarding_property(source: types.ModuleType, name: str, original: object) -> property:
    def get(_: types.ModuleType) -> object:
        return getattr(source, name)

    def put(_: types.ModuleType, value: object) -> None:
        setattr(source, name, value)

    def restore(_: types.ModuleType) -> None:
        setattr(source, name, original)

    return property(get, put, restore, doc=f"{source.__name__}.{name} (forwarded)")


def forward_attributes(shim: str, source: types.ModuleType, names: Sequence[str]) -> None:
    """Make each of `names` of module `shim` (imported, in `sys.modules`) stand for the same
    name of `source`. Raises AttributeError naming a name `source` lacks."""
    module = sys.modules[shim]
    missing = [name for name in names if not hasattr(source, name)]
    if missing:
        raise AttributeError(f"{source.__name__} has no {missing[0]!r} to forward from {shim}")
    props: dict[str, object] = {}
    for name in names:
        props[name] = _forwarding_property(source, name, getattr(source, name))
        module.__dict__.pop(name, None)
    module.__class__ = type(f"{type(module).__name__}Forwarding", (type(module),), props)
