"""Helpers of TorchRec's `torchrec.modules.utils`, written for shardrec.

- `deterministic_dedup(ids)`: the sorted unique ids and, for each, the position of its *last*
  occurrence in `ids` (so that "last write wins" updates are reproducible).
- `construct_jagged_tensors(embeddings, features, embedding_names, ...)`: per-id embedding rows
  `(N, D)` of a KJT's ids (key-major, as an unpooled lookup returns them) split into
  `{name: JaggedTensor}` with the KJT's per-key lengths; a name listed several times gets its
  blocks concatenated along dim 1.
- Module helpers: output width by a probe, Xavier re-initialization of `nn.Linear`s, nested
  `ModuleList`s of copies.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence

import torch
from torch import nn

from shardrec_jagged import JaggedTensor, KeyedJaggedTensor

__all__ = [
    "check_module_output_dimension",
    "construct_jagged_tensors",
    "construct_modulelist_from_single_module",
    "convert_list_of_modules_to_modulelist",
    "deterministic_dedup",
    "extract_module_or_tensor_callable",
    "get_module_output_dimension",
    "init_mlp_weights_xavier_uniform",
]


def deterministic_dedup(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ids: `(N,)`. Returns `(unique ids sorted, (U,) int64 index of each one's last
    occurrence in ids)`."""
    flat = ids.reshape(-1)
    unique, inverse = torch.unique(flat, sorted=True, return_inverse=True)
    positions = torch.arange(flat.numel(), device=flat.device)
    last = torch.zeros(unique.numel(), dtype=torch.int64, device=flat.device)
    last.scatter_reduce_(0, inverse, positions, reduce="amax", include_self=False)
    return unique, last


def construct_jagged_tensors(
    embeddings: torch.Tensor,
    features: KeyedJaggedTensor,
    embedding_names: Sequence[str],
    need_indices: bool = False,
    features_to_permute_indices: Mapping[str, Sequence[int]] | None = None,
    original_features: KeyedJaggedTensor | None = None,
    reverse_indices: torch.Tensor | None = None,
    use_gather_select: bool = False,
) -> dict[str, JaggedTensor]:
    """Split `embeddings` by key into JaggedTensors (module docstring).

    Args:
        embeddings: `(N, D)` rows in the KJT's value order (or `(U, D)` rows of deduplicated
            ids with `reverse_indices: (N,)` mapping each id to its row).
        features: the KJT the rows belong to (`original_features` replaces it when given).
        embedding_names: one output name per KJT key, in key order.
        need_indices: put each key's ids in the JaggedTensor's `weights`.
        features_to_permute_indices: `{name: order}` reordering the blocks of a name listed
            several times before concatenation.
        use_gather_select: accepted for TorchRec's signature (gather and index_select agree).
    """
    del use_gather_select
    if original_features is not None:
        features = original_features
    if reverse_indices is not None:
        embeddings = embeddings.index_select(0, reverse_indices)
    keys = features.keys()
    if len(embedding_names) != len(keys):
        raise ValueError(
            f"construct_jagged_tensors: {len(embedding_names)} embedding_names for {len(keys)} "
            f"keys {keys}; give one name per key"
        )
    sizes = features.length_per_key()
    rows = torch.split(embeddings, sizes, dim=0)
    ids = torch.split(features.values(), sizes) if need_indices else None
    lengths = features.lengths().view(len(keys), -1) if keys else features.lengths()
    positions: dict[str, list[int]] = {}
    for i, name in enumerate(embedding_names):
        positions.setdefault(name, []).append(i)
    out: dict[str, JaggedTensor] = {}
    for name, idx in positions.items():
        order = (features_to_permute_indices or {}).get(name)
        if order is not None:
            idx = [idx[j] for j in order]
        out[name] = JaggedTensor(
            values=rows[idx[0]] if len(idx) == 1 else torch.cat([rows[i] for i in idx], dim=1),
            lengths=lengths[idx[0]],
            weights=ids[idx[0]] if ids is not None else None,
        )
    return out


def extract_module_or_tensor_callable(
    module_or_callable: Callable[[], nn.Module]
    | nn.Module
    | Callable[[torch.Tensor], torch.Tensor],
) -> nn.Module | Callable[[torch.Tensor], torch.Tensor]:
    """A module as is; a factory taking no argument called (it must return a module); any
    other callable (a tensor function) as is."""
    if isinstance(module_or_callable, nn.Module):
        return module_or_callable
    try:
        params = inspect.signature(module_or_callable).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: a tensor function
        return module_or_callable  # type: ignore[return-value]  # not a factory
    required = [
        p
        for p in params
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if required:
        return module_or_callable  # type: ignore[return-value]  # takes the tensor
    module = module_or_callable()  # type: ignore[call-arg]  # a factory taking nothing
    if not isinstance(module, nn.Module):
        raise ValueError(
            f"a callable taking no argument must return an nn.Module, got {type(module).__name__}"
        )
    return module


def get_module_output_dimension(
    module: Callable[[torch.Tensor], torch.Tensor] | nn.Module, in_features: int
) -> int:
    """The last dim of `module`'s output for one zero input row of width `in_features`."""
    out: torch.Tensor = module(torch.zeros(1, in_features))
    return int(out.size(-1))


def check_module_output_dimension(
    module: Iterable[nn.Module] | nn.Module, in_features: int, out_features: int
) -> bool:
    """Whether `module` (or every module of a list / ModuleList, recursively) maps width
    `in_features` to `out_features`."""
    if isinstance(module, list | nn.ModuleList):
        return all(check_module_output_dimension(m, in_features, out_features) for m in module)
    assert isinstance(module, nn.Module)
    return get_module_output_dimension(module, in_features) == out_features


def init_mlp_weights_xavier_uniform(m: nn.Module) -> None:
    """For `module.apply`: an `nn.Linear` gets Xavier-uniform weights and a zero bias."""
    if isinstance(m, nn.Linear):
        nn.init.xavier_uniform_(m.weight)
        if m.bias is not None:
            with torch.no_grad():
                m.bias.zero_()


def construct_modulelist_from_single_module(module: nn.Module, sizes: tuple[int, ...]) -> nn.Module:
    """Nested ModuleLists of shape `sizes` holding copies of `module`, each copy's Linears
    re-initialized (`init_mlp_weights_xavier_uniform`)."""
    if len(sizes) == 1:
        return nn.ModuleList(
            [copy.deepcopy(module).apply(init_mlp_weights_xavier_uniform) for _ in range(sizes[0])]
        )
    return nn.ModuleList(
        [construct_modulelist_from_single_module(module, sizes[1:]) for _ in range(sizes[0])]
    )


def convert_list_of_modules_to_modulelist(
    modules: Iterable[nn.Module], sizes: tuple[int, ...]
) -> nn.Module:
    """Nested lists of modules of shape `sizes` as nested ModuleLists; a count that differs
    from `sizes` raises `ValueError`."""
    items = list(modules)
    if len(items) != sizes[0]:
        raise ValueError(f"got {len(items)} modules where sizes {sizes} asks for {sizes[0]}")
    if len(sizes) == 1:
        return nn.ModuleList(items)
    return nn.ModuleList(
        [convert_list_of_modules_to_modulelist(m, sizes[1:]) for m in items]  # type: ignore[arg-type]  # nested lists of modules
    )
