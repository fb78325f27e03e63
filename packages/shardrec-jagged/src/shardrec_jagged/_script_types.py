# torch.jit.annotate (needed for TorchScript's attribute types) and tolist() are untyped:
# mypy: disable-error-code="no-untyped-call, no-any-return"
"""TorchScript forms of the three value types (docs/design/torchscript.md).

TorchScript cannot compile the Python classes themselves (their constructors validate with
`!r` f-strings, Sequences and helper modules; they have a fx metaclass). Instead each class has a
TorchScript twin here, written in the TorchScript subset, and `register_script_types()` tells
TorchScript to use the twin wherever a signature or a constructor call names the Python class.

How values cross the boundary:
- Into a scripted function, TorchScript builds the twin from the Python object by reading the
  twin's attributes (`_keys`, `_values`, ...) off it: the twins declare only attributes the
  Python classes always have, with the same names and types. No copy of any tensor.
- Out of a scripted function the result is a `torch.ScriptObject` with the twin's methods
  (`values()`, `keys()`, `to_dict()`, ...).

A saved TorchScript artifact carries the twins' code: loading it needs neither this package
nor any Python class.

The twins cover what inference code reads: accessors, per-key views, `to_dict`, `split`,
`permute` and construction from lengths or offsets. Checks raise the same exception types as
the Python classes with messages naming the offending value, written as f-strings without
conversions or format specs (TorchScript compiles those into `str.format` calls; note that it
prints a `list[str]` without quotes).
"""

from typing import TypeAlias

import torch

from shardrec_jagged._validation import check_key_bounds, validate_agree, validate_offsets

__all__ = [
    "ScriptJaggedTensor",
    "ScriptKeyedJaggedTensor",
    "ScriptKeyedTensor",
]


def _lengths_to_offsets(lengths: torch.Tensor) -> torch.Tensor:
    offsets = torch.zeros(lengths.numel() + 1, dtype=lengths.dtype, device=lengths.device)
    torch.cumsum(lengths.reshape(-1), 0, out=offsets[1:])
    return offsets


def _lengths_of(lengths: torch.Tensor | None, offsets: torch.Tensor | None) -> torch.Tensor:
    if lengths is not None:
        return lengths
    assert offsets is not None
    return offsets[1:] - offsets[:-1]


def _offsets_of(offsets: torch.Tensor | None, lengths: torch.Tensor | None) -> torch.Tensor:
    if offsets is not None:
        return offsets
    assert lengths is not None
    return _lengths_to_offsets(lengths)


def _weights_of(weights: torch.Tensor | None, owner: str) -> torch.Tensor:
    if weights is None:
        raise ValueError(f"this {owner} has no weights; use weights_or_none()")
    return weights


def _cumsum(sizes: list[int]) -> list[int]:
    out = [0]
    for s in sizes:
        out.append(out[-1] + s)
    return out


def _check_lengths(
    lengths: torch.Tensor, keys: list[str], stride_per_key: list[int], n_values: int
) -> None:
    """Given lengths: none negative (naming its key and sample), and their sum fits values."""
    if lengths.numel() == 0:
        return
    # One host read for both facts; the offending index is looked up only on failure.
    smallest_and_total: list[int] = torch.stack([lengths.min(), lengths.sum()]).long().tolist()
    if smallest_and_total[0] < 0:
        i = int((lengths < 0).nonzero()[0, 0])
        key = 0
        start = 0
        while key < len(keys) - 1 and i >= start + stride_per_key[key]:
            start += stride_per_key[key]
            key += 1
        raise ValueError(
            f"lengths[{i}] = {int(lengths[i])} is negative (key '{keys[key]}', sample "
            f"{i - start}); lengths count ids per bag and must be >= 0"
        )
    total = smallest_and_total[1]
    if total > n_values:
        raise ValueError(
            f"lengths sum to {total} but values has only {n_values} entries; the bags need "
            f"values.size(0) >= {total} (a longer values buffer is fine: its tail is unused)"
        )


# `self` of the accessors both jagged twins share (a string: the second class comes later).
_JaggedTwin: TypeAlias = "ScriptJaggedTensor | ScriptKeyedJaggedTensor"


class ScriptJaggedTensor:
    """TorchScript twin of `JaggedTensor`: `(N,)` values in bags given by lengths/offsets."""

    def __init__(
        self,
        values: torch.Tensor,
        weights: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
        offsets: torch.Tensor | None = None,
    ) -> None:
        if lengths is None and offsets is None:
            raise ValueError("JaggedTensor needs lengths or offsets; got neither")
        self._values = values
        self._weights = weights
        self._lengths = lengths
        self._offsets = offsets

    # The accessors from `values` to `device` serve both jagged twins (their `self` type says so):
    # the KeyedJaggedTensor twin assigns them in its class body.

    def values(self: _JaggedTwin) -> torch.Tensor:
        return self._values

    def weights(self) -> torch.Tensor:
        return _weights_of(self._weights, "JaggedTensor")

    def weights_or_none(self: _JaggedTwin) -> torch.Tensor | None:
        return self._weights

    def lengths(self: _JaggedTwin) -> torch.Tensor:
        lengths = _lengths_of(self._lengths, self._offsets)
        self._lengths = lengths
        return lengths

    def lengths_or_none(self: _JaggedTwin) -> torch.Tensor | None:
        return self._lengths

    def offsets(self: _JaggedTwin) -> torch.Tensor:
        offsets = _offsets_of(self._offsets, self._lengths)
        self._offsets = offsets
        return offsets

    def offsets_or_none(self: _JaggedTwin) -> torch.Tensor | None:
        return self._offsets

    def device(self: _JaggedTwin) -> torch.device:
        return self._values.device

    def to_dense(self) -> list[torch.Tensor]:
        """One `(n_b,)` tensor per bag (the Python class's checks of the bags first)."""
        n_values = self._values.size(0)
        offsets = self._offsets
        if offsets is not None and offsets.numel() > 0:
            validate_offsets(offsets, n_values)
            lengths_given = self._lengths
            if lengths_given is not None:
                validate_agree(lengths_given, offsets)
        sizes: list[int] = self.lengths().long().tolist()
        total = 0
        for i, n in enumerate(sizes):
            if n < 0:
                raise ValueError(f"lengths[{i}] = {n} is negative; lengths must be >= 0")
            total += n
        if total > n_values:
            raise ValueError(
                f"lengths sum to {total} but values has only {n_values} entries; the bags "
                f"need values.size(0) >= {total} (a longer values buffer is fine: its tail "
                "is unused)"
            )
        return list(torch.split_with_sizes(self._values[:total], sizes))


class ScriptKeyedJaggedTensor:
    """TorchScript twin of `KeyedJaggedTensor` (key-major layout, `(F * B,)` lengths)."""

    def __init__(
        self,
        keys: list[str],
        values: torch.Tensor,
        weights: torch.Tensor | None = None,
        lengths: torch.Tensor | None = None,
        offsets: torch.Tensor | None = None,
        stride: int | None = None,
        stride_per_key_per_rank: list[list[int]] | None = None,
        length_per_key: list[int] | None = None,
        offset_per_key: list[int] | None = None,
    ) -> None:
        if lengths is None and offsets is None:
            raise ValueError("KeyedJaggedTensor needs lengths or offsets; got neither")
        if weights is not None and weights.size(0) < values.size(0):
            raise ValueError(
                f"weights have {weights.numel()} entries but values have {values.numel()}"
            )
        bags = lengths.numel() if lengths is not None else 0
        if lengths is None and offsets is not None:
            bags = offsets.numel() - 1
        if stride is None:
            if stride_per_key_per_rank is not None:
                stride = 0
                for per_rank in stride_per_key_per_rank:
                    stride = max(stride, sum(per_rank))
            elif len(keys) > 0:
                stride = bags // len(keys)
            else:
                stride = 0
        if stride_per_key_per_rank is None and bags != stride * len(keys):
            raise ValueError(
                f"lengths hold {bags} bags but {len(keys)} keys x stride {stride} "
                f"need {stride * len(keys)}"
            )
        self._keys = keys
        self._values = values
        self._weights = weights
        self._lengths = lengths
        self._offsets = offsets
        self._stride: int = stride
        self._stride_per_key_per_rank = stride_per_key_per_rank
        self._length_per_key = length_per_key
        self._offset_per_key = offset_per_key
        # The Python class's caches: declared so that a KJT returned to Python is complete.
        self._stride_per_key = torch.jit.annotate(list[int] | None, None)
        self._lengths_offset_per_key = torch.jit.annotate(list[int] | None, None)
        self._index_per_key = torch.jit.annotate(dict[str, int] | None, None)
        self._jt_dict = torch.jit.annotate(dict[str, ScriptJaggedTensor] | None, None)
        self._inverse_indices = torch.jit.annotate(tuple[list[str], torch.Tensor] | None, None)

    @staticmethod
    def from_lengths_sync(
        keys: list[str],
        values: torch.Tensor,
        lengths: torch.Tensor,
        weights: torch.Tensor | None = None,
        stride: int | None = None,
        stride_per_key_per_rank: list[list[int]] | None = None,
    ) -> "ScriptKeyedJaggedTensor":
        kjt = ScriptKeyedJaggedTensor(
            keys, values, weights, lengths, None, stride, stride_per_key_per_rank
        )
        kjt.offset_per_key()
        return kjt

    @staticmethod
    def from_offsets_sync(
        keys: list[str],
        values: torch.Tensor,
        offsets: torch.Tensor,
        weights: torch.Tensor | None = None,
        stride: int | None = None,
        stride_per_key_per_rank: list[list[int]] | None = None,
    ) -> "ScriptKeyedJaggedTensor":
        kjt = ScriptKeyedJaggedTensor(
            keys, values, weights, None, offsets, stride, stride_per_key_per_rank
        )
        kjt.offset_per_key()
        return kjt

    def keys(self) -> list[str]:
        return self._keys

    def weights(self) -> torch.Tensor:
        return _weights_of(self._weights, "KeyedJaggedTensor")

    # The JaggedTensor twin's accessors: TorchScript compiles a function assigned in a class body
    # as a method of that class (a TorchScript class cannot inherit).
    values = ScriptJaggedTensor.values
    weights_or_none = ScriptJaggedTensor.weights_or_none
    lengths = ScriptJaggedTensor.lengths
    lengths_or_none = ScriptJaggedTensor.lengths_or_none
    offsets = ScriptJaggedTensor.offsets
    offsets_or_none = ScriptJaggedTensor.offsets_or_none
    device = ScriptJaggedTensor.device

    def stride(self) -> int:
        return self._stride

    def variable_stride_per_key(self) -> bool:
        return self._stride_per_key_per_rank is not None

    def stride_per_key_per_rank(self) -> list[list[int]]:
        """`[F][R]`; `[]` unless the KJT has variable batch per key."""
        spkpr = self._stride_per_key_per_rank
        if spkpr is None:
            return torch.jit.annotate(list[list[int]], [])
        return spkpr

    def stride_per_key(self) -> list[int]:
        spkpr = self._stride_per_key_per_rank
        if spkpr is None:
            return [self._stride] * len(self._keys)
        return [sum(per_rank) for per_rank in spkpr]

    def length_per_key(self) -> list[int]:
        """Ids per key (one device-to-host copy on first call, then cached)."""
        lpk = self._length_per_key
        if lpk is None:
            if len(self._keys) == 0:
                lpk = []
            else:
                # The first host read: the Python class's checks (docs/jagged.md, Validation).
                n_values = self._values.size(0)
                lengths = self._lengths
                given_offsets = self._offsets
                if given_offsets is None and lengths is not None:
                    _check_lengths(lengths, self._keys, self.stride_per_key(), n_values)
                if lengths is not None and given_offsets is not None:
                    # Both present: compared bag by bag (the twin declares only the Python
                    # class's fields, which artifacts are fed with, so it cannot tell given
                    # from derived; one full pass, at the first read only).
                    validate_agree(lengths, given_offsets)
                bounds = torch.tensor(
                    _cumsum(self.stride_per_key()), dtype=torch.long, device=self._values.device
                )
                picked: list[int] = self.offsets()[bounds].long().tolist()
                check_key_bounds(picked, self._keys, n_values)
                computed: list[int] = []
                for i in range(len(self._keys)):
                    computed.append(picked[i + 1] - picked[i])
                lpk = computed
            self._length_per_key = lpk
        return lpk

    def length_per_key_or_none(self) -> list[int] | None:
        return self._length_per_key

    def offset_per_key(self) -> list[int]:
        opk = self._offset_per_key
        if opk is None:
            opk = _cumsum(self.length_per_key())
            self._offset_per_key = opk
        return opk

    def offset_per_key_or_none(self) -> list[int] | None:
        return self._offset_per_key

    def sync(self) -> "ScriptKeyedJaggedTensor":
        """Compute `length_per_key`/`offset_per_key` now (one device-to-host copy)."""
        self.offset_per_key()
        return self

    def unsync(self) -> "ScriptKeyedJaggedTensor":
        """Drop the cached host-side metadata."""
        self._length_per_key = None
        self._offset_per_key = None
        return self

    def _index(self, key: str) -> int:
        for i, k in enumerate(self._keys):
            if k == key:
                return i
        raise KeyError(f"unknown key '{key}'; this KeyedJaggedTensor has {self._keys}")

    def __getitem__(self, key: str) -> ScriptJaggedTensor:
        i = self._index(key)
        opk = self.offset_per_key()
        bags = _cumsum(self.stride_per_key())
        w = self._weights
        return ScriptJaggedTensor(
            self._values[opk[i] : opk[i + 1]],
            None if w is None else w[opk[i] : opk[i + 1]],
            self.lengths()[bags[i] : bags[i + 1]],
            None,
        )

    def to_dict(self) -> dict[str, ScriptJaggedTensor]:
        out: dict[str, ScriptJaggedTensor] = {}
        for key in self._keys:
            out[key] = self[key]
        return out

    def split(self, segments: list[int]) -> list["ScriptKeyedJaggedTensor"]:
        """Consecutive groups of `segments[i]` keys (they must sum to the number of keys)."""
        if sum(segments) != len(self._keys):
            raise ValueError(
                f"split segments {segments} sum to {sum(segments)} but the KeyedJaggedTensor "
                f"has {len(self._keys)} keys"
            )
        bounds = _cumsum(segments)
        # A comprehension, not an annotated list: naming this class in a local annotation
        # would make TorchScript compile a second copy of it.
        return [self._keys_slice(bounds[i], bounds[i + 1]) for i in range(len(segments))]

    def _keys_slice(self, start: int, end: int) -> "ScriptKeyedJaggedTensor":
        opk = self.offset_per_key()
        bags = _cumsum(self.stride_per_key())
        w = self._weights
        spkpr = self._stride_per_key_per_rank
        return ScriptKeyedJaggedTensor(
            self._keys[start:end],
            self._values[opk[start] : opk[end]],
            None if w is None else w[opk[start] : opk[end]],
            self.lengths()[bags[start] : bags[end]],
            None,
            self._stride,
            None if spkpr is None else spkpr[start:end],
            self.length_per_key()[start:end],
            None,
        )

    def permute(self, indices: list[int]) -> "ScriptKeyedJaggedTensor":
        """Keys reordered to `[keys[i] for i in indices]` (an index may repeat)."""
        n_keys = len(self._keys)
        for i in indices:
            if i < 0 or i >= n_keys:
                raise IndexError(
                    f"permute index {i} is out of range for {n_keys} keys (valid: [0, {n_keys}))"
                )
        opk = self.offset_per_key()
        lpk = self.length_per_key()
        spk = self.stride_per_key()
        bags = _cumsum(spk)
        lengths = self.lengths()
        w = self._weights
        values: list[torch.Tensor] = []
        weights: list[torch.Tensor] = []
        new_lengths: list[torch.Tensor] = []
        for i in indices:
            values.append(self._values[opk[i] : opk[i + 1]])
            if w is not None:
                weights.append(w[opk[i] : opk[i + 1]])
            new_lengths.append(lengths[bags[i] : bags[i + 1]])
        spkpr = self._stride_per_key_per_rank
        new_spkpr: list[list[int]] | None = None
        if spkpr is not None:
            new_spkpr = [spkpr[i] for i in indices]
        return ScriptKeyedJaggedTensor(
            [self._keys[i] for i in indices],
            torch.cat(values) if len(values) > 0 else self._values[:0],
            None if w is None else (torch.cat(weights) if len(weights) > 0 else w[:0]),
            torch.cat(new_lengths) if len(new_lengths) > 0 else lengths[:0],
            None,
            self._stride,
            new_spkpr,
            [lpk[i] for i in indices],
            None,
        )

    # TorchRec's all-to-all plumbing (_kjt_dist.py; dist_init: _script_dist.py)
    def dist_labels(self) -> list[str]:
        labels = ["lengths", "values"]
        if self._stride_per_key_per_rank is not None:
            labels.append("strides")
        if self._weights is not None:
            labels.append("weights")
        return labels

    def dist_splits(self, key_splits: list[int]) -> list[list[int]]:
        bounds = _cumsum(key_splits)
        bad = bounds[-1] != len(self._keys)
        for n in key_splits:
            bad = bad or n < 0
        if bad:
            raise ValueError(
                f"key_splits {key_splits} must be >= 0 and sum to the {len(self._keys)} keys"
            )
        spk = self.stride_per_key()
        lpk = self.length_per_key()
        bags: list[int] = []
        ids: list[int] = []
        for i in range(len(key_splits)):
            bags.append(sum(spk[bounds[i] : bounds[i + 1]]))
            ids.append(sum(lpk[bounds[i] : bounds[i + 1]]))
        out = [bags, ids]
        if self._stride_per_key_per_rank is not None:
            out.append(key_splits)
        if self._weights is not None:
            out.append(ids)
        return out

    def dist_tensors(self) -> list[torch.Tensor]:
        tensors = [self.lengths(), self._values]
        if self._stride_per_key_per_rank is not None:
            device = self._values.device
            tensors.append(torch.tensor(self.stride_per_key(), dtype=torch.long, device=device))
        w = self._weights
        if w is not None:
            tensors.append(w)
        return tensors


class ScriptKeyedTensor:
    """TorchScript twin of `KeyedTensor`: dense per-key blocks along `key_dim`."""

    def __init__(
        self,
        keys: list[str],
        length_per_key: list[int],
        values: torch.Tensor,
        key_dim: int = 1,
    ) -> None:
        if len(keys) != len(length_per_key):
            raise ValueError(f"KeyedTensor has {len(keys)} keys but {len(length_per_key)} lengths")
        if values.size(key_dim) != sum(length_per_key):
            raise ValueError(
                f"KeyedTensor values have {values.size(key_dim)} columns along dim {key_dim} "
                f"but length_per_key sums to {sum(length_per_key)}"
            )
        self._keys = keys
        self._length_per_key = length_per_key
        self._values = values
        self._key_dim = key_dim
        self._offset_per_key = torch.jit.annotate(list[int] | None, None)
        self._index_per_key = torch.jit.annotate(dict[str, int] | None, None)

    def keys(self) -> list[str]:
        return self._keys

    def values(self) -> torch.Tensor:
        return self._values

    def key_dim(self) -> int:
        return self._key_dim

    def device(self) -> torch.device:
        return self._values.device

    def length_per_key(self) -> list[int]:
        return self._length_per_key

    def offset_per_key(self) -> list[int]:
        opk = self._offset_per_key
        if opk is None:
            opk = _cumsum(self._length_per_key)
            self._offset_per_key = opk
        return opk

    def __getitem__(self, key: str) -> torch.Tensor:
        for i, k in enumerate(self._keys):
            if k == key:
                opk = self.offset_per_key()
                return self._values.narrow(self._key_dim, opk[i], self._length_per_key[i])
        raise KeyError(f"unknown key '{key}'; this KeyedTensor has {self._keys}")

    def to_dict(self) -> dict[str, torch.Tensor]:
        parts = torch.split_with_sizes(self._values, self._length_per_key, self._key_dim)
        out: dict[str, torch.Tensor] = {}
        for i, key in enumerate(self._keys):
            out[key] = parts[i]
        return out


def compile_twins() -> list[type]:
    """Compile the twins (names resolve in this module's globals: `torch.jit.script` on a
    class resolves names in its caller's frame)."""
    return [
        torch.jit.script(ScriptJaggedTensor),
        torch.jit.script(ScriptKeyedJaggedTensor),
        torch.jit.script(ScriptKeyedTensor),
    ]
