"""How many ids each key of a KeyedJaggedTensor holds: the one place its lengths/offsets are read
on the host (one small device-to-host copy), so also where their contents are checked.

A values buffer longer than the bags use is accepted (its tail is unused); a shorter one, a
negative length (given lengths), and offsets that do not start at 0 or that decrease between
keys raise here, named as what they are. A decrease inside one key's offsets is left to
``validate()`` (a full pass over the offsets), and to the readers that hand out per-key bags
(``to_dict``, ``__getitem__``: ``_kjt_ops.check_offsets_alone``) and the lookup modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from shardrec_jagged import _kernels
from shardrec_jagged._validation import check_key_bounds, check_length_per_key, validate_agree

if TYPE_CHECKING:
    from shardrec_jagged.keyed_jagged_tensor import KeyedJaggedTensor

__all__ = ["compute_length_per_key"]


def compute_length_per_key(kjt: KeyedJaggedTensor) -> list[int]:
    keys, lengths, offsets = kjt._keys, kjt._lengths, kjt._offsets
    n_keys = len(keys)
    if n_keys == 0:
        return []
    n_bags = lengths.numel() if lengths is not None else max(offsets.numel() - 1, 0)  # type: ignore[union-attr]  # one is set
    if n_bags == 0:
        return [0] * n_keys
    values = kjt._values
    if values.is_meta:
        # A meta KJT has no contents to read: spread values.size(0) over the keys (TorchRec's
        # placeholder), so that shape-only code (module construction, tracing) runs.
        total = values.size(0)
        return [total // n_keys + (total % n_keys if i == 0 else 0) for i in range(n_keys)]
    if torch.compiler.is_compiling():
        # Data-dependent checks cannot be traced: check_length_per_key states them as
        # torch._check asserts instead.
        out = _length_per_key_compiled(kjt)
        check_length_per_key(out, keys, values.size(0))
        return out
    if kjt._check_agree:
        assert lengths is not None and offsets is not None
        validate_agree(lengths, offsets)  # names the first bag where they differ
        kjt._check_agree = False
    if kjt._stride_per_key_per_rank is None and offsets is not None:
        # Cheapest when offsets exist: read F + 1 of them (a strided view), diff on host. Free
        # checks on those; a decrease inside one key needs a full pass (40+ us on 13k offsets,
        # measured), left to validate().
        bounds = _kernels.offsets_at(offsets, kjt._stride)
        check_key_bounds(bounds, keys, values.size(0))
        out = [bounds[i + 1] - bounds[i] for i in range(n_keys)]
    elif kjt._stride_per_key_per_rank is None and lengths is not None:
        # The hot path (construct from lengths, then length_per_key): the per-key sums and the
        # smallest length, read together. With every length >= 0 the sums are >= 0 and one per
        # key, so only their total is left to check; the full check runs only to name a failure.
        out, smallest = _kernels.length_per_key_and_min(lengths, n_keys, kjt._stride)
        if smallest < 0:
            raise negative_length_error(lengths, keys, kjt._stride)
        if sum(out) > values.shape[0]:
            check_length_per_key(out, keys, values.shape[0])
        return out
    else:
        # Variable batch per key. Given lengths: a negative one inside a key leaves the key's
        # bounds intact, so the smallest length is read too (given offsets: a decrease inside
        # one key is validate()'s, as for a fixed batch).
        if offsets is None and lengths is not None and int(lengths.min()) < 0:
            raise _negative_length_error_vb(lengths, keys, kjt.stride_per_key())
        # Per-key boundaries of the offsets: one gather of F + 1 entries.
        index = torch.tensor(kjt.lengths_offset_per_key(), device=values.device)
        picked: list[int] = kjt.offsets()[index].tolist()
        check_key_bounds(picked, keys, values.size(0))
        out = [picked[i + 1] - picked[i] for i in range(n_keys)]
    check_length_per_key(out, keys, values.size(0))
    return out


def negative_length_error(lengths: torch.Tensor, keys: list[str], stride: int) -> ValueError:
    """The error for a fixed-batch KJT's first negative length, naming its key and sample."""
    i = int((lengths < 0).nonzero()[0, 0])
    return ValueError(
        f"lengths[{i}] = {int(lengths[i])} is negative (key {keys[i // stride]!r}, sample "
        f"{i % stride}); lengths count ids per bag and must be >= 0"
    )


def _negative_length_error_vb(
    lengths: torch.Tensor, keys: list[str], stride_per_key: list[int]
) -> ValueError:
    """The error for a variable-batch KJT's first negative length, naming its key and sample."""
    i = int((lengths < 0).nonzero()[0, 0])
    start, k = 0, 0
    while k < len(keys) - 1 and i >= start + stride_per_key[k]:
        start += stride_per_key[k]
        k += 1
    return ValueError(
        f"lengths[{i}] = {int(lengths[i])} is negative (key {keys[k]!r}, sample {i - start}); "
        "lengths count ids per bag and must be >= 0"
    )


def _length_per_key_compiled(kjt: KeyedJaggedTensor) -> list[int]:
    n_keys, lengths, offsets = len(kjt._keys), kjt._lengths, kjt._offsets
    if kjt._stride_per_key_per_rank is None and offsets is not None:
        return _kernels.length_per_key_from_offsets(offsets, n_keys, kjt._stride)
    if kjt._stride_per_key_per_rank is None and lengths is not None:
        return _kernels.length_per_key(lengths, n_keys, kjt._stride)
    index = torch.tensor(kjt.lengths_offset_per_key(), device=kjt._values.device)
    picked = kjt.offsets()[index]
    out: list[int] = (picked[1:] - picked[:-1]).tolist()
    return out
