"""Input checks shared by the three value types.

Two tiers, so that the hot path never waits on the device:

* ``check_*`` functions look only at Python values, dtypes and shapes. They cost no
  device-to-host copy and run in every constructor (under ``torch.compile`` they become guards).
* ``validate_*`` functions read tensor contents (one small device-to-host copy each). They run
  only when asked: ``validate=True`` at construction or an explicit ``.validate()`` call.

Every error names the offending value and, where one exists, the fix.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

_INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


class UnknownKeyError(KeyError, ValueError):
    """A key that the keyed value does not hold.

    A ``KeyError`` (so ``except KeyError`` written against TorchRec still works) and a
    ``ValueError`` (so it reads as the user mistake it is); prints its message unquoted.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class JaggedDtypeError(TypeError, AssertionError):
    """Non-integer ``lengths``/``offsets`` with entries.

    A ``TypeError`` (the kind of mistake it is) and an ``AssertionError`` (what TorchRec raises,
    so ``except AssertionError`` written against TorchRec still catches it).
    """


def check_keys(keys: Sequence[str], what: str = "keys") -> list[str]:
    """Return ``keys`` as a list; reject non-strings and duplicates."""
    if type(keys) is list:  # the common case: skip the (slow) ABC isinstance check
        out = keys.copy()
    elif isinstance(keys, str) or not isinstance(keys, Sequence):
        raise TypeError(f"{what} must be a list of str, got {type(keys).__name__}: {keys!r}")
    else:
        out = list(keys)
    try:
        # Fast path (~0.5 us for 26 keys, vs ~1.3 us for a per-key isinstance loop): join
        # accepts exactly str and its subclasses, like isinstance(k, str); set() dedups.
        "".join(out)
        if len(set(out)) == len(out):
            return out
    except TypeError:
        pass  # a non-str (maybe unhashable) key: the loops below name it
    if all(isinstance(k, str) for k in out):
        seen: set[str] = set()
        for k in out:
            if k in seen:
                raise ValueError(f"duplicate key {k!r} in {what} {out}; every key must be unique")
            seen.add(k)
    for k in out:
        if not isinstance(k, str):
            raise TypeError(f"{what} must be str, got {type(k).__name__} {k!r} in {out}")
    return out


def check_tensor(t: object, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def as_index_tensor(
    x: torch.Tensor | Sequence[int] | None, name: str, device: torch.device
) -> torch.Tensor | None:
    """``lengths``/``offsets`` given as a Python list of ints (TorchRec's concepts page does it)
    become an int64 tensor on ``device``; tensors and None pass through unchanged."""
    if x is None or isinstance(x, torch.Tensor):
        return x
    if not isinstance(x, Sequence):
        raise TypeError(f"{name} must be a tensor or a list of ints, got {type(x).__name__}")
    bad = [v for v in x if isinstance(v, bool) or not isinstance(v, int)]
    if bad:
        raise TypeError(f"{name} must hold ints, got {bad[0]!r}; pass a list of ints or a tensor")
    return torch.tensor(list(x), dtype=torch.int64, device=device)


def check_index_tensor(t: torch.Tensor, name: str) -> torch.Tensor:
    """``lengths``/``offsets`` must be 1-D integer tensors. An empty one of any dtype or shape
    (``torch.tensor([])`` is float) is accepted as TorchRec does, and returned 1-D; a narrow
    integer one (int8, int16, uint8) is returned as int32."""
    check_tensor(t, name)
    if t.dtype not in _INDEX_DTYPES and t.numel() > 0:
        raise JaggedDtypeError(
            f"{name} must be an integer tensor (int32 or int64), got dtype {t.dtype}; "
            f"convert with {name}.to(torch.int32)"
        )
    if t.dim() != 1:
        if t.numel() == 0:
            return t.reshape(0)
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}; pass {name}.flatten()")
    if t.dtype is not torch.int64 and t.dtype is not torch.int32 and t.numel() > 0:
        # int8 / int16 / uint8 lengths (TorchRec accepts them): no cumsum kernel takes them, and
        # offsets in their dtype would overflow (uint8 lengths [200, 100] end at 300). Widen.
        return t.to(torch.int32)
    return t


def check_values_weights(values: torch.Tensor, weights: torch.Tensor | None) -> None:
    check_tensor(values, "values")
    if values.dim() == 0:
        raise ValueError("values must have at least one dimension, got a 0-d tensor")
    if weights is not None:
        check_tensor(weights, "weights")
        if weights.dim() == 0 or weights.size(0) < values.size(0):
            raise ValueError(
                f"weights has {weights.size(0) if weights.dim() else 0} entries but values has "
                f"{values.size(0)}; weights must hold one entry per value (a longer weights "
                "buffer is fine: its tail is unused)"
            )


def check_lengths_offsets_sizes(
    lengths: torch.Tensor | None, offsets: torch.Tensor | None
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """When both are given, ``offsets`` has one more entry than ``lengths`` (or both are empty).
    Returns both, 1-D."""
    if lengths is None and offsets is None:
        raise ValueError("pass lengths or offsets (or both); got neither")
    if lengths is not None:
        lengths = check_index_tensor(lengths, "lengths")
    if offsets is not None:
        offsets = check_index_tensor(offsets, "offsets")
    if lengths is not None and offsets is not None:
        n, m = lengths.numel(), offsets.numel()
        if m != n + 1 and not (n == 0 and m == 0):
            raise ValueError(
                f"lengths and offsets disagree: lengths has {n} entries, offsets has {m}; "
                f"offsets must have len(lengths) + 1 = {n + 1}"
            )
    return lengths, offsets


def check_length_per_key(length_per_key: Sequence[int], keys: Sequence[str], n_values: int) -> None:
    if torch.compiler.is_compiling():
        # Under torch.compile the per-key lengths are data-dependent symbols: a Python `if` on
        # them cannot be traced, so state the same facts as runtime asserts instead.
        # (torch._check is untyped in torch 2.13's annotations.)
        for n in length_per_key:
            torch._check(n >= 0, lambda: "negative length_per_key")  # type: ignore[no-untyped-call]
        total = sum(length_per_key)
        torch._check(total <= n_values, lambda: "bad lengths sum")  # type: ignore[no-untyped-call]
        return
    if len(length_per_key) != len(keys):
        raise ValueError(
            f"length_per_key has {len(length_per_key)} entries for {len(keys)} keys {list(keys)}"
        )
    if length_per_key and min(length_per_key) < 0:
        for k, n in zip(keys, length_per_key, strict=True):
            if n < 0:
                raise ValueError(f"length_per_key for key {k!r} is {n}; it must be >= 0")
    _check_fits(sum(length_per_key), n_values, length_per_key)


def check_key_widths(
    keys: list[str], length_per_key: Sequence[int], values: object, key_dim: int
) -> list[int]:
    """A KeyedTensor's ``length_per_key`` as a new list, checked against its (checked) ``keys``
    and ``values``, whose size along ``key_dim`` the widths must sum to."""
    widths = list(length_per_key)
    if len(widths) != len(keys):
        raise ValueError(f"length_per_key has {len(widths)} entries for {len(keys)} keys {keys}")
    values = check_tensor(values, "values")
    if keys and not -values.dim() <= key_dim < max(values.dim(), 1):
        raise ValueError(
            f"key_dim {key_dim} is out of range for values of shape {tuple(values.shape)}"
        )
    for k, n in zip(keys, widths, strict=True):
        if n < 0:
            raise ValueError(f"length_per_key for key {k!r} is {n}; it must be >= 0")
    if keys and sum(widths) != values.size(key_dim):
        raise ValueError(
            f"length_per_key {widths} sums to {sum(widths)} but values has size "
            f"{values.size(key_dim)} along key_dim {key_dim} (shape {tuple(values.shape)})"
        )
    return widths


def check_key_bounds(bounds: list[int], keys: list[str], n_values: int) -> None:
    """``bounds``: the offsets at each key's first bag, then the last offset (F + 1 host ints).

    Catches offsets that do not start at 0 or that decrease between keys, and names them as an
    offsets problem (the per-key lengths they imply would only look negative). TorchScript
    compiles it too (the scripted KeyedJaggedTensor calls it): list arguments, no `!r`.
    """
    if bounds[0] != 0:
        raise ValueError(
            f"offsets[0] = {bounds[0]}; offsets must start at 0 (offsets[i] is where bag i "
            "starts in values)"
        )
    for i in range(len(keys)):
        if bounds[i + 1] < bounds[i]:
            raise ValueError(
                f"offsets decrease within key '{keys[i]}' (from {bounds[i]} at its first bag "
                f"to {bounds[i + 1]} at its end); offsets must be non-decreasing"
            )
    if bounds[-1] > n_values:
        raise ValueError(
            f"offsets[-1] = {bounds[-1]} but values has only {n_values} entries; the bags need "
            f"values.size(0) >= {bounds[-1]}"
        )


def check_bag_lengths(lengths: Sequence[int], n_values: int) -> None:
    """Host ``lengths`` of a JaggedTensor against its values (where it reads them anyway)."""
    for i, n in enumerate(lengths):
        if n < 0:
            raise ValueError(f"lengths[{i}] = {n} is negative; lengths must be >= 0")
    _check_fits(sum(lengths), n_values, None)


def _check_fits(total: int, n_values: int, per_key: Sequence[int] | None) -> None:
    """Bags of `total` values fit in `n_values`. `per_key` (named in the message) is formatted
    only on failure: this check runs on every `length_per_key`, a hot path."""
    if total > n_values:
        detail = "" if per_key is None else f" (length_per_key={list(per_key)})"
        raise ValueError(
            f"lengths sum to {total}{detail} but values has only {n_values} entries; the bags "
            f"need values.size(0) >= {total} (a longer values buffer is fine: its tail is unused)"
        )


def check_segments(segments: Sequence[int], n_keys: int) -> list[int]:
    out = [int(s) for s in segments]
    for s in out:
        if s < 0:
            raise ValueError(f"split segments must be >= 0, got {s} in {out}")
    if sum(out) != n_keys:
        raise ValueError(f"split segments {out} sum to {sum(out)}; they must sum to {n_keys} keys")
    return out


def check_permute_indices(indices: Sequence[int], keys: Sequence[str]) -> list[int]:
    n = len(keys)
    out = list(indices)
    for i in out:
        if not isinstance(i, int) or isinstance(i, bool):
            raise TypeError(f"permute indices must be int, got {type(i).__name__} {i!r}")
        if i < 0 or i >= n:
            raise IndexError(
                f"permute index {i} is out of range for {n} keys {list(keys)}; "
                f"valid indices are 0..{n - 1}"
            )
    return out


# --- content checks (read tensor contents: a device-to-host copy) ---------------------------


def validate_lengths(lengths: torch.Tensor, n_values: int, name: str = "lengths") -> None:
    if lengths.numel() == 0:
        return
    neg = (lengths < 0).nonzero()
    if neg.numel() > 0:
        i = int(neg[0, 0])
        raise ValueError(f"{name}[{i}] = {int(lengths[i])} is negative; lengths must be >= 0")
    total = int(lengths.sum())
    if total > n_values:
        raise ValueError(
            f"{name} sum to {total} but values has only {n_values} entries; the bags need "
            f"values.size(0) >= {total} (a longer values buffer is fine: its tail is unused)"
        )


def validate_offsets(offsets: torch.Tensor, n_values: int) -> None:
    if offsets.numel() == 0:
        return
    first, last = int(offsets[0]), int(offsets[-1])
    if first != 0:
        raise ValueError(
            f"offsets[0] = {first}; offsets must start at 0 (offsets[i] is where bag i starts "
            "in values)"
        )
    drop = (offsets[1:] < offsets[:-1]).nonzero()
    if drop.numel() > 0:
        i = int(drop[0, 0]) + 1
        raise ValueError(
            f"offsets decrease at index {i} ({int(offsets[i - 1])} -> {int(offsets[i])}); "
            "offsets must be non-decreasing (that is, lengths must be >= 0)"
        )
    if last > n_values:
        raise ValueError(
            f"offsets[-1] = {last} but values has only {n_values} entries; the bags need "
            f"values.size(0) >= {last}"
        )


def validate_agree(lengths: torch.Tensor, offsets: torch.Tensor) -> None:
    if offsets.numel() == 0:
        return
    diff = offsets[1:] - offsets[:-1]
    bad = (diff != lengths).nonzero()
    if bad.numel() > 0:
        i = int(bad[0, 0])
        raise ValueError(
            f"lengths and offsets disagree at bag {i}: lengths[{i}] = {int(lengths[i])} but "
            f"offsets[{i + 1}] - offsets[{i}] = {int(diff[i])}"
        )


def validate_jagged(
    values: torch.Tensor, lengths: torch.Tensor | None, offsets: torch.Tensor | None
) -> None:
    """Full content check of a jagged layout (syncs)."""
    n = values.size(0)
    if lengths is not None:
        validate_lengths(lengths, n)
    if offsets is not None:
        validate_offsets(offsets, n)
    if lengths is not None and offsets is not None:
        validate_agree(lengths, offsets)
