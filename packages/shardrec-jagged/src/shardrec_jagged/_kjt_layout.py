"""Where a KeyedJaggedTensor's bags are: resolve stride and per-key batch sizes from shapes.

Shape arithmetic only (no tensor contents are read): runs in every constructor.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["cumsum", "resolve_batch_layout", "used_part"]


def cumsum(xs: Sequence[int]) -> list[int]:
    out = [0] * (len(xs) + 1)
    for i, x in enumerate(xs):
        out[i + 1] = out[i] + x
    return out


def _as_stride_lists(
    spkpr: torch.Tensor | Sequence[Sequence[int]] | None, keys: list[str]
) -> list[list[int]] | None:
    if spkpr is None:
        return None
    rows = spkpr.tolist() if isinstance(spkpr, torch.Tensor) else [list(r) for r in spkpr]
    if len(rows) != len(keys):
        raise ValueError(
            f"stride_per_key_per_rank has {len(rows)} rows for {len(keys)} keys {keys}; "
            "it needs one row (batch size per rank) per key"
        )
    if rows and any(len(r) != len(rows[0]) for r in rows):
        raise ValueError(
            f"stride_per_key_per_rank rows have different rank counts: {rows}; every key "
            "needs one entry per rank"
        )
    for k, r in zip(keys, rows, strict=True):
        if any(s < 0 for s in r):
            raise ValueError(f"stride_per_key_per_rank for key {k!r} is {r}; strides must be >= 0")
    return rows


def resolve_batch_layout(
    keys_: list[str],
    values: torch.Tensor,
    lengths: torch.Tensor | None,
    offsets: torch.Tensor | None,
    stride: int | None,
    stride_per_key_per_rank: torch.Tensor | Sequence[Sequence[int]] | None,
    stride_per_key: Sequence[int] | None,
    inverse_indices: tuple[Sequence[str], torch.Tensor] | None,
) -> tuple[int, list[list[int]] | None, list[int] | None]:
    """``(stride, stride_per_key_per_rank, stride_per_key)``; raises when the bag count of
    ``lengths``/``offsets`` does not fit the keys and strides."""
    spkpr = _as_stride_lists(stride_per_key_per_rank, keys_)
    n_keys = len(keys_)
    if lengths is not None:
        n_bags = lengths.numel()
    else:
        assert offsets is not None
        n_bags = max(offsets.numel() - 1, 0)

    spk: list[int] | None = None
    if spkpr is not None:
        spk = list(stride_per_key) if stride_per_key is not None else [sum(r) for r in spkpr]
        if sum(spk) != n_bags:
            raise ValueError(
                f"stride_per_key_per_rank gives {sum(spk)} bags (per key {spk}) but lengths "
                f"has {n_bags} entries; they must be equal"
            )
        if stride is None:
            if inverse_indices is not None and inverse_indices[1].numel() > 0:
                stride = int(inverse_indices[1].shape[-1])
            else:
                stride = max(spk, default=0)
    elif n_keys == 0:
        if n_bags != 0:
            raise ValueError(f"a KeyedJaggedTensor with no keys cannot have {n_bags} bags")
        stride = 0 if stride is None else stride
    elif stride is None:
        if n_bags % n_keys != 0:
            raise ValueError(
                f"lengths has {n_bags} entries, not a multiple of the {n_keys} keys "
                f"{keys_}; lengths must be (F * B,)"
            )
        stride = n_bags // n_keys
    elif stride * n_keys != n_bags:
        raise ValueError(
            f"lengths has {n_bags} entries but stride {stride} x {n_keys} keys = "
            f"{stride * n_keys}; lengths must be (F * B,)"
        )
    if stride < 0:
        raise ValueError(f"stride must be >= 0, got {stride}")
    return stride, spkpr, spk


def used_part(data: torch.Tensor, length_per_key: Sequence[int]) -> torch.Tensor:
    """``data`` without the unused tail of a values buffer longer than the lengths use."""
    total = sum(length_per_key)
    if torch.compiler.is_compiling():
        return data[:total]  # no data-dependent branch under compile; a view either way
    return data if data.size(0) == total else data[:total]
