"""Moving a sharded state_dict to a device, and gathering it into a full one for serving.

TorchRec's `torchrec.inference.state_dict_transform`:

- `state_dict_to_device(state_dict, pg, device)`: every key of any rank (sorted), each value on
  `device`; a `ShardedTensor` stays one, its local shards moved; a key this rank lacks becomes
  an empty `ShardedTensor` (every rank takes part in each key's construction, a collective).
- `state_dict_gather(src, dst)`: for each key of `dst`, rank 0's `dst` tensor receives the whole
  sharded value of `src` (`ShardedTensor` or `DTensor`; a collective of the value's process
  group); a plain tensor is copied on every rank. The other ranks' `dst` keeps its sharded
  entries unchanged, as in TorchRec.

Differences from TorchRec (refusals instead of a hang or a late error): a key of `dst` missing
from `src`, a value of another type, or a `dst` tensor whose shape is not the value's global
shape raise `ValueError` naming the key on every rank of the first sharded value's group before
any gather starts. A `DTensor` value (TorchRec 1.8 cannot copy one into a plain tensor) is
gathered like a `ShardedTensor`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, MutableMapping

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed._shard.sharded_tensor.api import ShardedTensor
from torch.distributed._shard.sharded_tensor.shard import Shard
from torch.distributed.tensor import DTensor

from shardrec_collectives import ShardingEnv, agree_on_error, all_gather_object

__all__ = ["state_dict_gather", "state_dict_to_device"]

StateValue = Tensor | ShardedTensor


def _all_keys(state_dict: Mapping[str, object], env: ShardingEnv) -> list[str]:
    names: set[str] = set()
    for keys in all_gather_object(env, list(state_dict)):
        assert isinstance(keys, list)
        names.update(keys)
    return sorted(names)


def state_dict_to_device(
    state_dict: Mapping[str, StateValue], pg: dist.ProcessGroup, device: torch.device
) -> dict[str, StateValue]:
    """`state_dict` with every value on `device` (see the module docstring); a collective."""
    env = ShardingEnv.from_process_group(pg)
    out: dict[str, StateValue] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ShardedTensor announces its deprecation
        for key in _all_keys(state_dict, env):
            value = state_dict.get(key)
            if value is None:
                # No entry here (e.g. a table placed on other ranks): join the construction.
                out[key] = ShardedTensor._init_from_local_shards([], [], process_group=pg)
            elif isinstance(value, ShardedTensor):
                shards = [
                    Shard.from_tensor_and_offsets(
                        s.tensor.to(device), list(s.metadata.shard_offsets), env.rank
                    )
                    for s in value.local_shards()
                ]
                out[key] = ShardedTensor._init_from_local_shards(
                    shards, list(value.metadata().size), process_group=pg
                )
            elif isinstance(value, Tensor):
                out[key] = value.to(device)
            else:
                raise ValueError(
                    f"state_dict[{key!r}] is a {type(value).__name__}; expected a Tensor or a "
                    "ShardedTensor"
                )
    return out


def _global_shape(value: object) -> tuple[int, ...] | None:
    if isinstance(value, ShardedTensor):
        return tuple(value.metadata().size)
    if isinstance(value, Tensor):
        return tuple(value.shape)
    return None


def _check(src: Mapping[str, object], dst: Mapping[str, Tensor]) -> ValueError | None:
    for key, target in dst.items():
        if key not in src:
            return ValueError(f"state_dict_gather: dst key {key!r} is not in src")
        shape = _global_shape(src[key])
        if shape is None:
            return ValueError(
                f"state_dict_gather: src[{key!r}] is a {type(src[key]).__name__}; expected a "
                "Tensor, ShardedTensor or DTensor"
            )
        if tuple(target.shape) != shape:
            return ValueError(
                f"state_dict_gather: dst[{key!r}] has shape {tuple(target.shape)}, but the "
                f"value in src is {shape}"
            )
    return None


def _group_of(value: object) -> dist.ProcessGroup | None:
    if isinstance(value, ShardedTensor):
        return value._process_group
    if isinstance(value, DTensor):
        return value.device_mesh.get_group()
    return None


def _gather_sharded(value: ShardedTensor, target: Tensor) -> None:
    env = ShardingEnv.from_process_group(value._process_group)
    mine = [(list(s.metadata.shard_offsets), s.tensor.detach().cpu()) for s in value.local_shards()]
    gathered = all_gather_object(env, mine)
    if env.rank != 0:
        return
    for rank_shards in gathered:
        assert isinstance(rank_shards, list)
        for offsets, piece in rank_shards:
            region = target
            for dim, (start, length) in enumerate(zip(offsets, piece.shape, strict=True)):
                region = region.narrow(dim, start, length)
            region.copy_(piece)


def state_dict_gather(src: Mapping[str, StateValue], dst: MutableMapping[str, Tensor]) -> None:
    """Fill `dst` (full-size tensors, e.g. an unsharded model's `state_dict()`) from `src` (this
    rank's sharded `state_dict()`); see the module docstring. A collective: every rank calls it
    with the same keys."""
    groups = [g for g in (_group_of(src.get(k)) for k in dst) if g is not None]
    error = _check(src, dst)
    if groups:
        agree_on_error(ShardingEnv.from_process_group(groups[0]), error)
    elif error is not None:
        raise error
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for key, target in dst.items():
            value = src[key]
            if isinstance(value, ShardedTensor):
                _gather_sharded(value, target)
            elif isinstance(value, DTensor):
                full = value.full_tensor()
                if value.device_mesh.get_group().rank() == 0:
                    target.copy_(full)
            else:
                target.copy_(value)
