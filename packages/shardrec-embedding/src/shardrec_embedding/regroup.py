"""Regrouping pooled embeddings: `KTRegroupAsDict` and `PermuteMultiEmbedding` (TorchRec's
`torchrec.modules.regroup`).

`KTRegroupAsDict(groups, keys)` maps a list of KeyedTensors (the outputs of several
collections) to `{keys[g]: tensor}`, where output g concatenates, along the key dim, the blocks
of the features named in `groups[g]`, in that order:

```
kts: [ f1 | f2 ]  [ f3 | f4 ]        groups [["f1", "f3"], ["f4", "f2", "f1"]]
out: {"a": [ f1 | f3 ], "b": [ f4 | f2 | f1 ]}    (a feature may appear in several groups)
```

It is `KeyedTensor.regroup_as_dict` as a module: the first call (eager) resolves each name to a
(input, offset, width) slice and caches it, later calls only slice and concatenate (one copy
per output). The forward scripts with `torch.jit.script` and traces with `torch.fx`; as in
TorchRec, trace or script after a first eager call (a graph traced before it captures the
`module_init` call but not the slices).
"""

from collections.abc import Sequence

import torch
import torch.fx
from torch import nn

from shardrec_embedding._tables import traced_input
from shardrec_embedding.configs import DataType, data_type_to_dtype
from shardrec_jagged import KeyedTensor, TorchScriptable

__all__ = [
    "CacheMixin",
    "KTRegroupAsDict",
    "PermuteMultiEmbedding",
    "module_init",
]


class CacheMixin:
    """A module that caches work across calls; `clear_cache()` forgets it (TorchRec's
    `torchrec.types.CacheMixin`)."""

    def clear_cache(self) -> None:
        raise TypeError(f"{type(self).__name__} must define clear_cache()")


def _get_kts_values(kts: list[KeyedTensor]) -> list[torch.Tensor]:
    return [kt.values() for kt in kts]


def _to_tensor_dict(keys: list[str], values: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """`{keys[i]: values[i]}` (one graph node under fx)."""
    return {key: values[i] for i, key in enumerate(keys)}


def _split_to_tensor_dict(keys: list[str], values: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """`{keys[i]: values[i]}` for split outputs (TorchRec keeps both names)."""
    return {key: values[i] for i, key in enumerate(keys)}


torch.fx.wrap("_get_kts_values")
torch.fx.wrap("_to_tensor_dict")
torch.fx.wrap("_split_to_tensor_dict")


class PermuteMultiEmbedding(TorchScriptable, nn.Module):
    """Slices and concatenates a list of `(B, W_i)` tensors into the regrouped outputs.

    Args:
        groups: the output groups (feature names), kept for reference.
        multi_device: accepted for TorchRec's signature; the slices are plain ints, so every
            device works without moving anything.

    `set_segments(segments, dim)` gives, per output, the `(input, start, width)` slices to
    concatenate along `dim`; until then `forward` returns its input unchanged (as TorchRec's
    does before its tensors are set).

    forward: `values: list[(B, W_i)]` -> `list[(B, out width)]`.
    """

    def __init__(self, groups: Sequence[Sequence[str]], multi_device: bool = False) -> None:
        super().__init__()
        self._groups = [list(g) for g in groups]
        self._multi_device = multi_device
        self._segments: list[list[tuple[int, int, int]]] = [[(0, 0, 0)]]
        self._dim = 1
        self._inited = False

    def set_segments(self, segments: Sequence[Sequence[tuple[int, int, int]]], dim: int) -> None:
        self._segments = [list(s) for s in segments]
        self._dim = dim
        self._inited = True

    def forward(self, values: list[torch.Tensor]) -> list[torch.Tensor]:
        if not self._inited:
            return values
        out: list[torch.Tensor] = []
        for group in self._segments:
            parts = [values[i].narrow(self._dim, start, width) for i, start, width in group]
            out.append(torch.cat(parts, dim=self._dim))
        return out


class KTRegroupAsDict(nn.Module, CacheMixin):
    """`KeyedTensor.regroup_as_dict` as a caching module (module docstring).

    Args:
        groups: per output, the feature names to concatenate (each in some input KT).
        keys: per output, its key in the result; as many as groups.
        emb_dtype: cast the outputs to this data type (e.g. `DataType.BF16`); None keeps the
            inputs' dtype.
        multi_device: TorchRec's flag, accepted (see `PermuteMultiEmbedding`).

    forward: `keyed_tensors: list[KeyedTensor]` (same batch, same key dim; each feature name
    in one of them) -> `{key: (B, group width)}`. A name found in no input, or in several,
    raises `ValueError` on the first call; so do inputs with different key dims.
    """

    def __init__(
        self,
        groups: Sequence[Sequence[str]],
        keys: Sequence[str],
        emb_dtype: DataType | None = None,
        multi_device: bool = False,
    ) -> None:
        super().__init__()
        if len(groups) != len(keys):
            raise ValueError(
                f"KTRegroupAsDict: {len(groups)} groups but {len(keys)} keys; give one key per "
                "group"
            )
        self._groups = [list(g) for g in groups]
        self._keys = list(keys)
        self._is_inited = False
        self._emb_dtype = emb_dtype
        self._cast: torch.dtype | None = (
            None if emb_dtype is None else data_type_to_dtype(DataType(emb_dtype))
        )
        self._permute_pooled_embs_impl = PermuteMultiEmbedding(groups, multi_device)

    def forward(self, keyed_tensors: list[KeyedTensor]) -> dict[str, torch.Tensor]:
        # Not under TorchScript; under fx `module_init` (wrapped) becomes a graph node.
        if not torch._jit_internal.is_scripting():
            traced_input(keyed_tensors)  # registers the value types for scripting the graph
            if not self._is_inited:
                module_init(self, keyed_tensors)
        values = _get_kts_values(keyed_tensors)
        out = self._permute_pooled_embs_impl(values)
        if self._cast is not None:
            out = [v.to(self._cast) for v in out]
        return _to_tensor_dict(self._keys, out)

    def clear_cache(self) -> None:
        """Forget the cached slices: the next call resolves the names again."""
        self._is_inited = False

    @torch.jit.unused
    def _init_regroup(self, keyed_tensors: Sequence[KeyedTensor]) -> None:
        if not keyed_tensors:
            raise ValueError("KTRegroupAsDict needs at least one KeyedTensor, got an empty list")
        dims = {kt.key_dim() for kt in keyed_tensors}
        if len(dims) != 1:
            raise ValueError(f"KTRegroupAsDict: the KeyedTensors have different key dims {dims}")
        where: dict[str, tuple[int, int, int]] = {}
        for i, kt in enumerate(keyed_tensors):
            start = 0
            for key, width in zip(kt.keys(), kt.length_per_key(), strict=True):
                if key in where:
                    raise ValueError(
                        f"KTRegroupAsDict: feature {key!r} is in KeyedTensors {where[key][0]} "
                        f"and {i}; each name must be in one input"
                    )
                where[key] = (i, start, width)
                start += width
        missing = sorted({n for g in self._groups for n in g} - set(where))
        if missing:
            raise ValueError(
                f"KTRegroupAsDict: groups name {missing}, found in no KeyedTensor (keys: "
                f"{sorted(where)})"
            )
        segments = [[where[name] for name in group] for group in self._groups]
        self._permute_pooled_embs_impl.set_segments(segments, dims.pop())
        self._is_inited = True


@torch.jit.ignore  # type: ignore[untyped-decorator]  # untyped in torch
def module_init(module: KTRegroupAsDict, keyed_tensors: list[KeyedTensor]) -> None:
    """Resolve and cache `module`'s slices from the first inputs (TorchRec's free function of
    this name; a graph node when traced, plain Python when scripted)."""
    module._init_regroup(keyed_tensors)


torch.fx.wrap("module_init")
