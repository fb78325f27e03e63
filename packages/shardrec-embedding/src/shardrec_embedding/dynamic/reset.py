"""Reset rows of freed slots to a table's uniform initializer, by a counter-based generator.

A freed slot's row is redrawn as a pure function of `(table seed, slot, generation)`, where
the generation is the table's training steps so far (`DynamicTable.generation`): the same
stream gives the same rows whatever ran before, and the native writer (`sr_idmap_init_rows`
in `_native/idmap.c`: hash, scale and store each float straight into the weight, no
temporary, no scatter) and the torch twin below (any device, any float dtype) give the same
float32 values:

```
key_r = mix64(seed ^ mix64(slot + generation * G1))
h_p   = mix64(key_r + (p + 1) * G2)                     column pairs p = 0, 1, ...
u_2p  = (h_p >> 40) / 2^24,   u_2p+1 = ((h_p >> 8) mod 2^24) / 2^24        in [0, 1)
row[j] = low + (high - low) * u_j                        float32, two rounded operations
```

`table_seed(init_seed, name)` mixes the config's `init_seed` with the table's name, so tables
of one model draw different rows. Only the default uniform initializer has a counter-based
form; a table with a custom `init_fn` keeps calling it on the freed rows (torch's RNG).
"""

from __future__ import annotations

import zlib

import torch
from torch import Tensor

from shardrec_embedding.dynamic.hashing import mix64
from shardrec_embedding.dynamic.id_map import _library

__all__ = ["fill_rows_", "init_rows_", "table_seed"]

_G1 = 0x9E3779B97F4A7C15
_G2 = 0xD1B54A32D192ED03
_M64 = (1 << 64) - 1


def _signed(x: int) -> int:
    x &= _M64
    return x - (1 << 64) if x >= 1 << 63 else x


def _mix_int(x: int) -> int:
    x &= _M64
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & _M64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & _M64
    return x ^ (x >> 33)


def table_seed(init_seed: int, name: str) -> int:
    """The seed of table `name`'s reset rows (a signed int64)."""
    return _signed(_mix_int(init_seed ^ (zlib.crc32(name.encode()) << 32)))


def _low_span(low: float, high: float) -> tuple[float, float]:
    lo = torch.tensor(low, dtype=torch.float32)
    return float(lo), float(torch.tensor(high, dtype=torch.float32) - lo)


def init_rows_(
    weight: Tensor,
    slots: Tensor,
    *,
    row_offset: int,
    seed: int,
    generation: int,
    low: float,
    high: float,
) -> None:
    """Rows `row_offset + slots` of the 2-D `weight` become the counter-based uniform draws of
    `(seed, slot, generation)` in `[low, high)` (see the module doc), in place, no grad."""
    slots = slots.reshape(-1).to(device="cpu", dtype=torch.int64).contiguous()
    if slots.numel() == 0:
        return
    lo, span = _low_span(low, high)
    lib = _library()
    if (
        lib is not None
        and weight.device.type == "cpu"
        and weight.dtype is torch.float32
        and weight.dim() == 2
        and weight.stride(1) == 1
    ):
        lib.sr_idmap_init_rows(
            weight.data_ptr(),
            weight.stride(0),
            weight.shape[1],
            slots.data_ptr(),
            slots.numel(),
            row_offset,
            seed,
            generation,
            lo,
            span,
            torch.get_num_threads(),
        )
        # Written through a pointer: tell autograd the weight changed, as an index_put would.
        torch.autograd.graph.increment_version(weight)
        return
    with torch.no_grad():
        rows = uniform_rows(slots.to(weight.device), weight.shape[1], seed, generation, lo, span)
        weight[slots.to(weight.device) + row_offset] = rows.to(weight.dtype)


def uniform_rows(
    slots: Tensor, dim: int, seed: int, generation: int, low: float, span: float
) -> Tensor:
    """The torch twin of `sr_idmap_init_rows`: `(k, dim)` float32 rows for `slots`."""
    key = mix64(torch.full_like(slots, seed) ^ mix64(slots + _signed(generation * _G1)))
    pairs = (dim + 1) // 2
    steps = torch.tensor(
        [_signed((p + 1) * _G2) for p in range(pairs)], dtype=torch.int64, device=slots.device
    )
    h = mix64(key.unsqueeze(1) + steps)
    high24 = (h >> 40) & 0xFFFFFF
    low24 = (h >> 8) & 0xFFFFFF
    u = torch.stack([high24, low24], dim=2).reshape(slots.numel(), 2 * pairs)[:, :dim]
    u = u.to(torch.float32) * (2.0**-24)
    lo = torch.tensor(low, dtype=torch.float32, device=slots.device)
    sp = torch.tensor(span, dtype=torch.float32, device=slots.device)
    return u * sp + lo


def fill_rows_(state: Tensor, slots: Tensor, *, row_offset: int, value: float) -> None:
    """Rows `row_offset + slots` of the 1-D or 2-D `state` (an optimizer's per-row state) become
    `value`, in place, no grad: one native prefetched pass for a float32 CPU tensor with unit
    column stride (`sr_idmap_fill_rows`), else `index_fill_`. The same values either way."""
    slots = slots.reshape(-1).to(device="cpu", dtype=torch.int64).contiguous()
    if slots.numel() == 0:
        return
    lib = _library()
    if (
        lib is not None
        and state.device.type == "cpu"
        and state.dtype is torch.float32
        and state.dim() in (1, 2)
        and state.stride(-1) == 1
    ):
        lib.sr_idmap_fill_rows(
            state.data_ptr(),
            state.stride(0) if state.dim() == 2 else 1,
            state.shape[1] if state.dim() == 2 else 1,
            slots.data_ptr(),
            slots.numel(),
            row_offset,
            value,
        )
        torch.autograd.graph.increment_version(state)
        return
    with torch.no_grad():
        state.index_fill_(0, slots.to(state.device) + row_offset, value)
