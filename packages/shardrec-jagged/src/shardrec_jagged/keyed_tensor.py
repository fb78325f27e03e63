"""KeyedTensor: dense per-key tensors (typically pooled embeddings) concatenated along one dim.

Layout (``key_dim=1``, batch B = 2)::

    keys           = ["a",        "b"]
    length_per_key = [2,          3]
    values (B, 5)  = [[a0, a1,    b0, b1, b2],
                      [a0, a1,    b0, b1, b2]]
    offset_per_key = [0, 2, 5]

``regroup`` gathers keys of several KeyedTensors into new groups (a key may appear in several
groups); it is one ``split`` per input and one ``cat`` per group, and differentiable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.fx
from torch._jit_internal import is_scripting
from torch.fx._pytree import register_pytree_flatten_spec
from torch.utils._pytree import TreeSpec, register_pytree_node

from shardrec_jagged import _script_functions
from shardrec_jagged._format import dense_rows, kt_str
from shardrec_jagged._fx import ProxyableMeta
from shardrec_jagged._script_types import ScriptKeyedTensor
from shardrec_jagged._validation import UnknownKeyError, check_key_widths, check_keys

# The twins' functions take the TorchScript twins, which stand for our classes only inside
# torch.jit.script (the is_scripting() branches): typed Any for mypy; no "# type:" comment, since
# TorchScript reads those.
_twins: Any = _script_functions

__all__ = ["KeyedTensor"]


class KeyedTensor(ScriptKeyedTensor, metaclass=ProxyableMeta):
    """Dense tensors keyed by name, concatenated along ``key_dim`` (TorchRec's KeyedTensor).

    The plain accessors (``keys``, ``values``, ``key_dim``, ``device``, ``length_per_key``,
    ``offset_per_key``) are the TorchScript twin's, inherited: one source serves eager and
    scripted code (a TorchScript class cannot inherit, but a Python class can inherit from one).

    Args:
        keys: unique names.
        length_per_key: width of each key along ``key_dim``.
        values: e.g. ``(B, sum(length_per_key))`` for ``key_dim=1``.
        key_dim: the dimension the keys are concatenated along.
    """

    # The caches, typed here (the twin declares them through torch.jit.annotate).
    _offset_per_key: list[int] | None
    _index_per_key: dict[str, int] | None

    def __init__(
        self,
        keys: Sequence[str],
        length_per_key: Sequence[int],
        values: torch.Tensor,
        key_dim: int = 1,
        offset_per_key: Sequence[int] | None = None,
        index_per_key: Mapping[str, int] | None = None,
    ) -> None:
        keys_ = check_keys(keys)
        lpk = check_key_widths(keys_, length_per_key, values, key_dim)
        self._keys = keys_
        self._length_per_key = lpk
        self._values = values
        self._key_dim = key_dim
        self._offset_per_key = None if offset_per_key is None else list(offset_per_key)
        self._index_per_key = None if index_per_key is None else dict(index_per_key)

    @staticmethod
    def from_tensor_list(
        keys: Sequence[str], tensors: Sequence[torch.Tensor], key_dim: int = 1, cat_dim: int = 1
    ) -> KeyedTensor:
        """Concatenate ``tensors`` (one per key) along ``cat_dim``."""
        if len(keys) != len(tensors):
            raise ValueError(f"from_tensor_list got {len(keys)} keys but {len(tensors)} tensors")
        for key, t in zip(keys, tensors, strict=True):
            _check_same_outside(tensors[0], t, cat_dim, f"tensor of key {key!r}")
        return KeyedTensor(
            keys=keys,
            length_per_key=[t.shape[key_dim] for t in tensors],
            values=torch.cat(list(tensors), dim=cat_dim),
            key_dim=key_dim,
        )

    def _key_indices(self) -> dict[str, int]:
        if self._index_per_key is None:
            self._index_per_key = {k: i for i, k in enumerate(self._keys)}
        return self._index_per_key

    def size_in_bytes(self) -> int:
        return self._values.element_size() * self._values.numel()

    def __getitem__(self, key: str) -> torch.Tensor:
        index = self._key_indices().get(key)
        if index is None:
            raise UnknownKeyError(f"unknown key {key!r}; this KeyedTensor has {self._keys}")
        start = self.offset_per_key()[index]
        return self._values.narrow(self._key_dim, start, self._length_per_key[index])

    def to_dict(self) -> dict[str, torch.Tensor]:
        parts = self._values.split_with_sizes(self._length_per_key, dim=self._key_dim)
        # strict=False: one width per key by construction (strict costs ~0.15 us per call)
        return dict(zip(self._keys, parts, strict=False))

    @staticmethod
    def regroup(keyed_tensors: list[KeyedTensor], groups: list[list[str]]) -> list[torch.Tensor]:
        """One tensor per group: its keys' columns, concatenated in the group's order."""
        return _regroup(keyed_tensors, groups)  # the one function both eager and script run

    @staticmethod
    def regroup_as_dict(
        keyed_tensors: list[KeyedTensor], groups: list[list[str]], keys: list[str]
    ) -> dict[str, torch.Tensor]:
        """``regroup``, with group ``i`` named ``keys[i]``."""
        return _regroup_as_dict(keyed_tensors, groups, keys)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> KeyedTensor:
        kt = KeyedTensor.__new__(KeyedTensor)
        kt.__dict__.update(self.__dict__)
        kt._values = self._values.to(device, non_blocking=non_blocking)
        return kt

    def record_stream(self, stream: torch.Stream) -> None:
        self._values.record_stream(stream)

    def __repr__(self) -> str:
        if not self._keys:
            return "KeyedTensor(keys=[])"
        lines = [f"KeyedTensor(key_dim={self._key_dim}, shape={tuple(self._values.shape)}) {{"]
        for k in self._keys:
            lines.append(f"  {k!r}: {dense_rows(self[k])}")
        lines.append("}")
        return "\n".join(lines)

    def __str__(self) -> str:
        """TorchRec's text: every key's block. ``repr()`` is the bounded one."""
        return kt_str(self._keys, [self[k] for k in self._keys])


def _check_same_outside(first: torch.Tensor, t: torch.Tensor, dim: int, what: str) -> None:
    """``t`` matches ``first`` in every dimension but ``dim`` (the batch size, for pooled
    embeddings): named here rather than by ``torch.cat``'s "tensor number 1"."""
    a, b = first.shape, t.shape
    if a[:dim] != b[:dim] or a[dim + 1 :] != b[dim + 1 :]:
        raise ValueError(
            f"{what} has shape {tuple(t.shape)} but the first has {tuple(first.shape)}; they "
            f"must agree in every dimension but {dim} (the same batch size)"
        )


def regroup_tensors(
    keyed_tensors: Sequence[KeyedTensor], groups: Sequence[Sequence[str]]
) -> list[torch.Tensor]:
    if len(keyed_tensors) == 0:
        raise ValueError("regroup needs at least one KeyedTensor, got an empty list")
    key_dim = keyed_tensors[0]._key_dim
    where: dict[str, tuple[int, int]] = {}
    for t, kt in enumerate(keyed_tensors):
        if kt._key_dim != key_dim:
            raise ValueError(
                f"regroup needs one key_dim; keyed_tensors[0] has {key_dim}, "
                f"keyed_tensors[{t}] has {kt._key_dim}"
            )
        for i, k in enumerate(kt._keys):
            if k in where:
                raise ValueError(
                    f"key {k!r} is in keyed_tensors[{where[k][0]}] and keyed_tensors[{t}]; "
                    "regroup needs every key in one KeyedTensor"
                )
            where[k] = (t, i)
    for group in groups:
        for k in group:
            if k not in where:
                raise UnknownKeyError(
                    f"regroup: unknown key {k!r} in group {list(group)}; the KeyedTensors hold "
                    f"{list(where)}"
                )
    # Columns of every input, as views; each group is then one cat (the only copy).
    parts = [kt._values.split_with_sizes(kt._length_per_key, dim=key_dim) for kt in keyed_tensors]
    out: list[torch.Tensor] = []
    for group in groups:
        pieces = [parts[t][i] for t, i in (where[k] for k in group)]
        if pieces:
            try:
                out.append(torch.cat(pieces, dim=key_dim))
            except RuntimeError:
                # Name the input (torch names "tensor number 1" of this cat); checked only on
                # failure, so the hot path pays nothing.
                for t, kt in enumerate(keyed_tensors):
                    first = keyed_tensors[0]._values
                    _check_same_outside(first, kt._values, key_dim, f"keyed_tensors[{t}]")
                raise
        else:
            out.append(keyed_tensors[0]._values.narrow(key_dim, 0, 0))
    return out


# torch.fx leaves (traced: one call_function node) that also script: under torch.jit.script only
# the is_scripting() branch is compiled, and it runs the twin's function.
@torch.fx.wrap
def _regroup(keyed_tensors: list[KeyedTensor], groups: list[list[str]]) -> list[torch.Tensor]:
    if is_scripting():
        out: list[torch.Tensor] = _twins.kt_regroup(keyed_tensors, groups)
        return out
    return regroup_tensors(keyed_tensors, groups)


@torch.fx.wrap
def _regroup_as_dict(
    keyed_tensors: list[KeyedTensor], groups: list[list[str]], keys: list[str]
) -> dict[str, torch.Tensor]:
    if is_scripting():
        named: dict[str, torch.Tensor] = _twins.kt_regroup_as_dict(keyed_tensors, groups, keys)
        return named
    if len(groups) != len(keys):
        raise ValueError(
            f"regroup_as_dict got {len(groups)} groups but {len(keys)} names {list(keys)}; "
            "pass one name per group"
        )
    check_keys(keys, "group names")
    return dict(zip(keys, regroup_tensors(keyed_tensors, groups), strict=True))


# --- pytree: values is the one leaf; keys, widths and key_dim are static context ----------

_KTContext = tuple[tuple[str, ...], tuple[int, ...], int]


def _kt_flatten(kt: KeyedTensor) -> tuple[list[torch.Tensor], _KTContext]:
    return [kt._values], (tuple(kt._keys), tuple(kt._length_per_key), kt._key_dim)


def _kt_unflatten(leaves: Iterable[torch.Tensor], ctx: _KTContext) -> KeyedTensor:
    kt = KeyedTensor.__new__(KeyedTensor)
    kt._keys = list(ctx[0])
    kt._length_per_key = list(ctx[1])
    kt._key_dim = ctx[2]
    (kt._values,) = leaves
    kt._offset_per_key = None
    kt._index_per_key = None
    return kt


def _kt_flatten_spec(kt: KeyedTensor, spec: TreeSpec) -> list[torch.Tensor]:
    """Flatten ``kt`` into the layout ``spec`` recorded (an exported program's input): the same
    keys may come in another order, so the values are regrouped into the spec's key order."""
    keys, _widths, key_dim = spec.context
    if kt._keys == list(keys):
        return [kt._values]
    missing = [k for k in keys if k not in kt._key_indices()]
    if missing or len(keys) != len(kt._keys):
        raise ValueError(
            f"KeyedTensor with keys {kt._keys} does not match the recorded keys {list(keys)}"
        )
    return [torch.cat([kt[k] for k in keys], dim=key_dim)]


register_pytree_node(
    KeyedTensor,
    _kt_flatten,
    _kt_unflatten,
    serialized_type_name="shardrec_jagged.KeyedTensor",
)
register_pytree_flatten_spec(KeyedTensor, _kt_flatten_spec)
