"""`torch.jit.script` of a `ManagedCollisionCollection`: its lookup-only twin.

`torch.jit.script(collection)` calls the collection's `__prepare_scriptable__`, which returns a
`ScriptedManagedCollisionCollection`: the same tables, features and state-dict keys, holding the
*same* state tensors (no copy), whose forward remaps ids as the eager collection does in
`eval()`: an id owning a row reads it, any other id reads the miss row (MCH: the module's last
row; HashZch: its probe window's first row, or is dropped with `disable_fallback`). Nothing is
admitted or evicted, so the twin refuses to run in training mode (call `.eval()` first: before
scripting, or on the scripted module).

    eager collection --torch.jit.script--> twin: KJT --permute to the tables' features-->
        split per table --> per-table lookup (MCH: binary search; HashZch: probe) --> KJT

The twin reads the state the eager modules hold when it is scripted: an MCH module's admission
round replaces its sorted arrays, so script again after training further.
"""

import torch
from torch import Tensor, nn

from shardrec_embedding.mc.base import ManagedCollisionModule
from shardrec_embedding.mc.hash_zch import HashZchManagedCollisionModule
from shardrec_embedding.mc.mch import MCHManagedCollisionModule
from shardrec_embedding.mc.probe import lookup, probe_slots
from shardrec_jagged import KeyedJaggedTensor

__all__ = ["ScriptedManagedCollisionCollection", "scripted_lookup"]


def _share_state(twin: nn.Module, module: nn.Module) -> None:
    """Register `module`'s own state (parameters and persistent buffers) on `twin`, same names,
    same tensors."""
    for name, value in module.state_dict(keep_vars=True).items():
        if "." in name:
            continue
        if isinstance(value, nn.Parameter):
            twin.register_parameter(name, value)
        else:
            twin.register_buffer(name, value)


class _MCHLookup(nn.Module):
    """An MCH module's eval-mode remap: binary search of the sorted raw ids."""

    def __init__(self, module: MCHManagedCollisionModule) -> None:
        super().__init__()
        if module._input_hash_func is not None:
            raise NotImplementedError(
                f"{module._describe()}: torch.jit.script of an MCH module with an "
                "input_hash_func is not supported; hash the ids before the collection"
            )
        _share_state(self, module)
        self._sorted = module._mch_sorted_raw_ids
        self._rows = module._mch_remapped_ids_mapping
        self._miss_row: int = module._output_global_offset + module._zch_size - 1

    def forward(
        self, values: Tensor, lengths: Tensor, mutate_miss_lengths: bool
    ) -> tuple[Tensor, Tensor]:
        if values.is_floating_point():
            raise TypeError("MCHManagedCollisionModule: raw ids must be integers, not floats")
        ids = values.to(torch.int64)
        slot = torch.searchsorted(self._sorted[:-1], ids)
        hit = self._sorted[slot] == ids
        rows = torch.where(hit, self._rows[slot], self._miss_row)
        return rows.to(values.dtype), lengths


class _HashZchLookup(nn.Module):
    """A HashZch module's eval-mode remap: probe the id's window for it."""

    def __init__(self, module: HashZchManagedCollisionModule) -> None:
        super().__init__()
        _share_state(self, module)
        self._identities = module._hash_zch_identities.data.view(-1)
        self._bucket_sizes = module._bucket_sizes
        self._bucket_starts = module._bucket_starts
        self._offset: int = module._offset
        self._buckets: int = module._buckets
        self._start_bucket: int = module._start_bucket
        self._local_buckets: int = module._end_bucket - module._start_bucket
        self._input_hash_size: int = module._input_hash_size
        self._probes: int = min(module._max_probe, int(module._bucket_sizes.min().item()))
        self._disable_fallback: bool = module._disable_fallback
        self._minus_one_key: int = torch.iinfo(torch.int64).min  # raw id -1's key

    def forward(
        self, values: Tensor, lengths: Tensor, mutate_miss_lengths: bool
    ) -> tuple[Tensor, Tensor]:
        if values.is_floating_point():
            raise TypeError("HashZchManagedCollisionModule: raw ids must be integers, not floats")
        ids = values.to(torch.int64)
        if self._input_hash_size > 0:
            if bool(((ids < 0) | (ids >= self._input_hash_size)).any()):
                raise IndexError(
                    "HashZchManagedCollisionModule: an id is outside [0, input_hash_size); "
                    "pass ids in range"
                )
            block = (self._input_hash_size + self._buckets - 1) // self._buckets
            bucket = torch.div(ids, block, rounding_mode="floor")
        else:
            bucket = torch.remainder(ids, self._buckets)
        local = bucket - self._start_bucket
        if bool(((local < 0) | (local >= self._local_buckets)).any()):
            raise IndexError(
                "HashZchManagedCollisionModule: ids of buckets outside this shard; route ids "
                "to the rank owning them"
            )
        ids = torch.where(ids == -1, self._minus_one_key, ids)
        windows = probe_slots(
            ids, self._bucket_starts[bucket], self._bucket_sizes[bucket], self._probes
        )
        rows = lookup(self._identities, ids, windows)
        hit = rows >= 0
        if windows.numel() > 0:
            rows = torch.where(hit, rows, windows[:, 0])
        remapped = (rows + self._offset).to(values.dtype)
        if self._disable_fallback and not bool(hit.all()):
            remapped = remapped[hit]
            if mutate_miss_lengths:
                bag = torch.repeat_interleave(
                    torch.arange(lengths.numel(), device=lengths.device), lengths
                )
                kept = bag[hit]
                lengths = torch.zeros_like(lengths).index_add_(0, kept, torch.ones_like(kept))
        return remapped, lengths


def scripted_lookup(module: ManagedCollisionModule) -> nn.Module:
    """The scriptable eval-mode lookup of one MC module (`forward(values, lengths,
    mutate_miss_lengths) -> (rows, lengths)`)."""
    if isinstance(module, MCHManagedCollisionModule):
        return _MCHLookup(module)
    if isinstance(module, HashZchManagedCollisionModule):
        return _HashZchLookup(module)
    raise NotImplementedError(
        f"torch.jit.script of a ManagedCollisionCollection holding a {type(module).__name__} "
        "is not supported (MCHManagedCollisionModule and HashZchManagedCollisionModule are)"
    )


class ScriptedManagedCollisionCollection(nn.Module):
    """Lookup-only twin of a `ManagedCollisionCollection` (module docstring); what
    `torch.jit.script(collection)` compiles.

    Args:
        modules: `{table: MC module}`, in the tables' order.
        feature_names: the tables' features, in the tables' order.
        splits: features per table.
        training: the eager collection's mode (the twin starts in it).
    """

    _feature_names: list[str]
    _splits: list[int]

    def __init__(
        self,
        modules: dict[str, ManagedCollisionModule],
        feature_names: list[str],
        splits: list[int],
        training: bool,
    ) -> None:
        super().__init__()
        self._managed_collision_modules = nn.ModuleDict(
            {table: scripted_lookup(module) for table, module in modules.items()}
        )
        self._feature_names = list(feature_names)
        self._splits = list(splits)
        self.train(training)

    def forward(
        self, features: KeyedJaggedTensor, mutate_miss_lengths: bool = True
    ) -> KeyedJaggedTensor:
        if self.training:
            raise RuntimeError(
                "scripted ManagedCollisionCollection: it only looks ids up (no admission or "
                "eviction); call .eval() on it (or on the module before torch.jit.script)"
            )
        keys = features.keys()
        if keys != self._feature_names:
            index: dict[str, int] = {}
            for i, key in enumerate(keys):
                index[key] = i
            order: list[int] = []
            for name in self._feature_names:
                if name not in index:
                    raise ValueError(
                        "scripted ManagedCollisionCollection: the input KeyedJaggedTensor "
                        "lacks a feature its tables read; pass every table feature"
                    )
                order.append(index[name])
            features = features.permute(order)
        parts = features.split(self._splits)
        values: list[Tensor] = []
        lengths: list[Tensor] = []
        for i, module in enumerate(self._managed_collision_modules.values()):
            rows, part_lengths = module(parts[i].values(), parts[i].lengths(), mutate_miss_lengths)
            values.append(rows)
            lengths.append(part_lengths)
        return KeyedJaggedTensor(
            keys=features.keys(),
            values=torch.cat(values) if len(values) > 0 else features.values(),
            lengths=torch.cat(lengths) if len(lengths) > 0 else features.lengths(),
            weights=features.weights_or_none(),
            stride=features.stride(),
        )
