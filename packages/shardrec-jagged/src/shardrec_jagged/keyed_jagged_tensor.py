"""KeyedJaggedTensor: F features' jagged bags for a batch, in one key-major layout.

Layout (keys ``["f0", "f1"]``, stride B = 3)::

    sample:        0          1       2
    "f0"          [V0, V1]   []      [V2]
    "f1"          [V3]       [V4]    [V5, V6, V7]

    values  = [V0, V1, V2, V3, V4, V5, V6, V7]    (N,)
    lengths = [2, 0, 1,   1, 1, 3]                 (F * B,)   f0's B bags, then f1's
    offsets = [0, 2, 2, 3, 4, 5, 8]                (F * B + 1,)
    length_per_key = [3, 5]    offset_per_key = [0, 3, 8]

Variable batch per feature (VBE): ``stride_per_key_per_rank[f][r]`` bags of feature f came from
rank r, so feature f has ``sum(stride_per_key_per_rank[f])`` bags and ``lengths`` has
``sum`` over features of those. ``inverse_indices = (keys, (F, B) tensor)`` maps each of the B
samples back to its (deduplicated) bag.

Host-side metadata (``length_per_key``, ``offset_per_key``) needs one small device-to-host copy;
it is computed on first use and cached (``sync()`` computes it eagerly, ``unsync()`` drops it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx
from torch._jit_internal import is_scripting

from shardrec_jagged import _kernels, _kjt_dist, _kjt_ops, _script_functions
from shardrec_jagged._format import kjt_repr, kjt_str
from shardrec_jagged._fx import ProxyableMeta
from shardrec_jagged._jagged_parts import JaggedParts
from shardrec_jagged._kjt_device import (
    kjt_copy_,
    kjt_pin_memory,
    kjt_record_stream,
    kjt_to,
)
from shardrec_jagged._kjt_layout import cumsum, resolve_batch_layout, used_part
from shardrec_jagged._kjt_lengths import compute_length_per_key
from shardrec_jagged._kjt_pytree import register_kjt_pytree
from shardrec_jagged._validation import (
    UnknownKeyError,
    as_index_tensor,
    check_keys,
    check_length_per_key,
    check_lengths_offsets_sizes,
    check_permute_indices,
    check_values_weights,
    validate_jagged,
)
from shardrec_jagged.jagged_tensor import JaggedTensor

# The twins' functions take the TorchScript twins, which stand for our classes only inside
# torch.jit.script (the is_scripting() branches): typed Any for mypy; no "# type:" comment, since
# TorchScript reads those.
_twins: Any = _script_functions

__all__ = ["KeyedJaggedTensor"]


class KeyedJaggedTensor(JaggedParts, metaclass=ProxyableMeta):
    """An optionally weighted jagged tensor per key, for a batch (TorchRec's KJT).

    Args:
        keys: feature names, unique.
        values: ``(N,)`` ids of all features, key-major.
        weights: ``(N,)`` optional per-id weights.
        lengths: ``(F * B,)`` integer, ids per bag; or give ``offsets``.
        offsets: ``(F * B + 1,)`` integer, cumulative lengths starting at 0.
        stride: batch size B; inferred from ``lengths``/``offsets`` when left out.
        stride_per_key_per_rank: ``[F][R]`` bags per key per rank (variable batch per key).
        stride_per_key, length_per_key, lengths_offset_per_key, offset_per_key, jt_dict:
            precomputed caches (as in TorchRec), checked against the shapes where cheap.
        index_per_key: accepted for TorchRec compatibility; always rebuilt from ``keys``.
        inverse_indices: ``(keys, (F, B) integer tensor)`` for variable batch per key.
        validate: check tensor contents now (one device-to-host copy). ``validate()`` later.

    Construction checks only Python values, dtypes and shapes: never a device-to-host copy.
    """

    _fields = ("_values", "_weights", "_lengths", "_offsets", "_inverse_indices")
    _check_agree: bool = False  # class default: a KJT returned by TorchScript never sets it

    def __init__(
        self,
        keys: Sequence[str],
        values: torch.Tensor,
        weights: torch.Tensor | None = None,
        lengths: torch.Tensor | Sequence[int] | None = None,
        offsets: torch.Tensor | Sequence[int] | None = None,
        stride: int | None = None,
        stride_per_key_per_rank: torch.Tensor | Sequence[Sequence[int]] | None = None,
        stride_per_key: Sequence[int] | None = None,
        length_per_key: Sequence[int] | None = None,
        lengths_offset_per_key: Sequence[int] | None = None,
        offset_per_key: Sequence[int] | None = None,
        index_per_key: Mapping[str, int] | None = None,
        jt_dict: dict[str, JaggedTensor] | None = None,
        inverse_indices: tuple[Sequence[str], torch.Tensor] | None = None,
        *,
        validate: bool = False,
    ) -> None:
        keys_ = check_keys(keys)
        check_values_weights(values, weights)
        lengths = as_index_tensor(lengths, "lengths", values.device)
        offsets = as_index_tensor(offsets, "offsets", values.device)
        if lengths is None and offsets is None and not keys_:
            lengths = values.new_empty(0, dtype=torch.int32)  # TorchRec's KJT([], values)
        lengths, offsets = check_lengths_offsets_sizes(lengths, offsets)
        stride, spkpr, spk = resolve_batch_layout(
            keys_,
            values,
            lengths,
            offsets,
            stride,
            stride_per_key_per_rank,
            stride_per_key,
            inverse_indices,
        )
        n_keys = len(keys_)
        if length_per_key is not None:
            check_length_per_key(length_per_key, keys_, values.size(0))
        if offset_per_key is not None and (
            len(offset_per_key) != n_keys + 1 or offset_per_key[-1] != values.size(0)
        ):
            raise ValueError(
                f"offset_per_key {list(offset_per_key)} must have {n_keys + 1} entries ending "
                f"at values.size(0) = {values.size(0)}"
            )
        if (
            spkpr is None
            and stride_per_key is not None
            and list(stride_per_key) != ([stride] * n_keys)
        ):
            raise ValueError(
                f"stride_per_key {list(stride_per_key)} disagrees with stride {stride} for "
                f"{n_keys} keys; pass stride_per_key_per_rank for a variable batch per key"
            )
        if lengths_offset_per_key is not None and (
            len(lengths_offset_per_key) != n_keys + 1
            or lengths_offset_per_key[-1] != sum(spk if spk is not None else [stride] * n_keys)
        ):
            raise ValueError(
                f"lengths_offset_per_key {list(lengths_offset_per_key)} must have {n_keys + 1} "
                "entries ending at the number of bags"
            )
        if inverse_indices is not None:
            check_keys(inverse_indices[0], "inverse_indices keys")
            if inverse_indices[1].is_floating_point():
                raise TypeError(
                    f"inverse_indices tensor must be integer, got {inverse_indices[1].dtype}"
                )

        self._keys = keys_
        self._values = values
        self._weights = weights
        self._lengths = lengths
        self._offsets = offsets
        self._stride = stride
        self._stride_per_key_per_rank = spkpr
        self._stride_per_key = (
            spk
            if spk is not None
            else (list(stride_per_key) if stride_per_key is not None else None)
        )
        self._length_per_key = None if length_per_key is None else list(length_per_key)
        self._offset_per_key = None if offset_per_key is None else list(offset_per_key)
        self._lengths_offset_per_key = (
            None if lengths_offset_per_key is None else list(lengths_offset_per_key)
        )
        self._index_per_key: dict[str, int] | None = None  # index_per_key: rebuilt from keys
        self._jt_dict = jt_dict
        self._inverse_indices: tuple[list[str], torch.Tensor] | None = (
            None if inverse_indices is None else (list(inverse_indices[0]), inverse_indices[1])
        )
        # Both given by the caller: their agreement is checked at the first host read (a full
        # pass, paid only by KJTs built this way; derived ones compute one from the other).
        self._check_agree = lengths is not None and offsets is not None
        if validate:
            self.validate()

    @classmethod
    def _unchecked(
        cls,
        keys: list[str],
        values: torch.Tensor,
        weights: torch.Tensor | None,
        lengths: torch.Tensor | None,
        offsets: torch.Tensor | None,
        stride: int | None,
        stride_per_key_per_rank: list[list[int]] | None = None,
        length_per_key: list[int] | None = None,
        offset_per_key: list[int] | None = None,
        inverse_indices: tuple[list[str], torch.Tensor] | None = None,
    ) -> KeyedJaggedTensor:
        """Internal constructor for results derived from a valid KJT: no checks at all.

        Also the only way to build a KJT with a repeated key (``permute`` may repeat one).
        """
        kjt = cls.__new__(cls)
        kjt._keys = keys
        kjt._values = values
        kjt._weights = weights
        kjt._lengths = lengths
        kjt._offsets = offsets
        kjt._stride = stride
        kjt._stride_per_key_per_rank = stride_per_key_per_rank
        kjt._stride_per_key = (
            None if stride_per_key_per_rank is None else [sum(r) for r in stride_per_key_per_rank]
        )
        kjt._length_per_key = length_per_key
        kjt._offset_per_key = offset_per_key
        kjt._lengths_offset_per_key = None
        kjt._index_per_key = None
        kjt._jt_dict = None
        kjt._inverse_indices = inverse_indices
        kjt._check_agree = False
        return kjt

    def validate(self) -> KeyedJaggedTensor:
        """Check contents (lengths >= 0, sums match values, offsets agree). Syncs once."""
        validate_jagged(self._values, self._lengths, self._offsets)
        if self._length_per_key is not None:
            actual = self._compute_length_per_key()
            if actual != self._length_per_key:
                raise ValueError(
                    f"length_per_key {self._length_per_key} disagrees with lengths, which give "
                    f"{actual}"
                )
        return self

    # --- constructors -----------------------------------------------------------------------

    @staticmethod
    def from_offsets_sync(
        keys: list[str],
        values: torch.Tensor,
        offsets: torch.Tensor,
        weights: torch.Tensor | None = None,
        stride: int | None = None,
        stride_per_key_per_rank: list[list[int]] | None = None,
        inverse_indices: tuple[list[str], torch.Tensor] | None = None,
    ) -> KeyedJaggedTensor:
        """Build from offsets and compute the per-key metadata now (one device-to-host copy)."""
        if is_scripting():  # the twin has no inverse indices
            out: KeyedJaggedTensor = _twins.ScriptKeyedJaggedTensor.from_offsets_sync(
                keys, values, offsets, weights, stride, stride_per_key_per_rank
            )
            return out
        return KeyedJaggedTensor(
            keys=keys,
            values=values,
            weights=weights,
            offsets=offsets,
            stride=stride,
            stride_per_key_per_rank=stride_per_key_per_rank,
            inverse_indices=inverse_indices,
        ).sync()

    @staticmethod
    def from_lengths_sync(
        keys: list[str],
        values: torch.Tensor,
        lengths: torch.Tensor,
        weights: torch.Tensor | None = None,
        stride: int | None = None,
        stride_per_key_per_rank: list[list[int]] | None = None,
        inverse_indices: tuple[list[str], torch.Tensor] | None = None,
    ) -> KeyedJaggedTensor:
        """Build from lengths and compute the per-key metadata now (one device-to-host copy)."""
        if is_scripting():  # the twin has no inverse indices
            out: KeyedJaggedTensor = _twins.ScriptKeyedJaggedTensor.from_lengths_sync(
                keys, values, lengths, weights, stride, stride_per_key_per_rank
            )
            return out
        if inverse_indices is None:
            # Without the argument: under torch.fx this call is a graph node, and the
            # TorchScript twin that a scripted graph builds takes no inverse_indices.
            return KeyedJaggedTensor(
                keys=keys,
                values=values,
                weights=weights,
                lengths=lengths,
                stride=stride,
                stride_per_key_per_rank=stride_per_key_per_rank,
            ).sync()
        return KeyedJaggedTensor(
            keys=keys,
            values=values,
            weights=weights,
            lengths=lengths,
            stride=stride,
            stride_per_key_per_rank=stride_per_key_per_rank,
            inverse_indices=inverse_indices,
        ).sync()

    @staticmethod
    def from_jt_dict(jt_dict: dict[str, JaggedTensor]) -> KeyedJaggedTensor:
        """One JaggedTensor per key -> KJT; differing bag counts give variable batch per key."""
        return _from_jt_dict(jt_dict)

    @staticmethod
    def concat(kjt_list: Sequence[KeyedJaggedTensor]) -> KeyedJaggedTensor:
        """Keys of every KJT, in order; all must share the batch size and weightedness."""
        return _kjt_concat(kjt_list)

    @staticmethod
    def empty(
        is_weighted: bool = False,
        device: torch.device | None = None,
        values_dtype: torch.dtype | None = None,
        weights_dtype: torch.dtype | None = None,
        lengths_dtype: torch.dtype = torch.int32,
    ) -> KeyedJaggedTensor:
        """No keys, no bags."""
        return KeyedJaggedTensor(
            keys=[],
            values=torch.empty(0, dtype=values_dtype, device=device),
            weights=torch.empty(0, dtype=weights_dtype, device=device) if is_weighted else None,
            lengths=torch.empty(0, dtype=lengths_dtype, device=device),
            stride=0,
        )

    @staticmethod
    def empty_like(kjt: KeyedJaggedTensor, device: torch.device | None = None) -> KeyedJaggedTensor:
        """Without ``device``: no keys, same dtypes, stride and variable-batch layout.

        With ``device``: same keys and shapes, uninitialized tensors on ``device``.
        """
        return _kjt_empty_like(kjt, device)

    def clear_storage(self) -> None:
        """Free the memory of every tensor (their storages shrink to 0 bytes; shapes stay).

        For a KJT kept only for its host metadata; its contents are garbage afterwards.
        """
        _kjt_ops.kjt_clear_storage(self)

    # --- accessors --------------------------------------------------------------------------

    def keys(self) -> list[str]:
        return self._keys

    # values, weights, lengths, offsets and device: `JaggedParts`

    def stride(self) -> int:
        """Batch size B (with variable batch: the largest per-key batch, or the inverse
        indices' batch)."""
        return self._stride

    _stride_value: int | None

    @property
    def _stride(self) -> int:
        # None only in a KJT rebuilt from a pytree whose context leaves the batch to the leaves
        # (_kjt_pytree.py): derived on first use, so that under torch.export the size is read
        # inside the module that uses it (a dynamic batch stays symbolic).
        stride = self._stride_value
        if stride is not None:
            return stride
        n = len(self._keys)
        lengths = self._lengths
        if lengths is not None:
            derived: int = lengths.shape[0] // n
        else:
            assert self._offsets is not None
            derived = (self._offsets.shape[0] - 1) // n
        self._stride_value = derived
        return derived

    @_stride.setter
    def _stride(self, value: int | None) -> None:
        self._stride_value = value

    def stride_per_key(self) -> list[int]:
        if self._stride_per_key is None:
            spkpr = self._stride_per_key_per_rank  # set, but not its sums: a KJT from TorchScript
            self._stride_per_key = (
                [self._stride] * len(self._keys) if spkpr is None else [sum(r) for r in spkpr]
            )
        return self._stride_per_key

    def stride_per_key_per_rank(self) -> list[list[int]]:
        """``[F][R]``; ``[]`` unless the KJT has variable batch per key."""
        spkpr = self._stride_per_key_per_rank
        return [] if spkpr is None else spkpr

    def variable_stride_per_key(self) -> bool:
        return self._stride_per_key_per_rank is not None

    def inverse_indices(self) -> tuple[list[str], torch.Tensor]:
        if self._inverse_indices is None:
            raise ValueError("this KeyedJaggedTensor has no inverse_indices")
        return self._inverse_indices

    def inverse_indices_or_none(self) -> tuple[list[str], torch.Tensor] | None:
        return self._inverse_indices

    def index_per_key(self) -> dict[str, int]:
        return self._key_indices()

    def _key_indices(self) -> dict[str, int]:
        if self._index_per_key is None:
            self._index_per_key = {k: i for i, k in enumerate(self._keys)}
        return self._index_per_key

    def lengths_offset_per_key(self) -> list[int]:
        """Where each key's bags start in ``lengths``, then ``F * B``: ``(F + 1)`` ints."""
        if self._lengths_offset_per_key is None:
            self._lengths_offset_per_key = cumsum(self.stride_per_key())
        return self._lengths_offset_per_key

    def length_per_key(self) -> list[int]:
        """Ids per key (one device-to-host copy on first call, then cached)."""
        if self._length_per_key is None:
            self._length_per_key = self._compute_length_per_key()
        return self._length_per_key

    def length_per_key_or_none(self) -> list[int] | None:
        return self._length_per_key

    def offset_per_key(self) -> list[int]:
        """Where each key's ids start in ``values``, then N: ``(F + 1)`` ints."""
        if self._offset_per_key is None:
            self._offset_per_key = cumsum(self.length_per_key())
        return self._offset_per_key

    def offset_per_key_or_none(self) -> list[int] | None:
        return self._offset_per_key

    def _compute_length_per_key(self) -> list[int]:
        return compute_length_per_key(self)

    def sync(self) -> KeyedJaggedTensor:
        """Compute ``length_per_key``/``offset_per_key`` now (one device-to-host copy)."""
        self.length_per_key()
        self.offset_per_key()
        return self

    def unsync(self) -> KeyedJaggedTensor:
        """Drop the cached host-side metadata."""
        self._length_per_key = None
        self._offset_per_key = None
        return self

    def size_in_bytes(self) -> int:
        ts = (self._values, self._weights, self._lengths, self._offsets)
        return sum(t.element_size() * t.numel() for t in ts if t is not None)

    # --- per-key views ---------------------------------------------------------------------

    def __getitem__(self, key: str) -> JaggedTensor:
        """Key ``key``'s bags as a JaggedTensor (views, no copy)."""
        # Cached attributes read directly (the accessor methods fill them on a miss): a
        # getitem is ~2 us, and four method calls were ~0.3 us of it.
        index = (self._index_per_key or self._key_indices()).get(key)
        if index is None:
            raise UnknownKeyError(f"unknown key {key!r}; this KeyedJaggedTensor has {self._keys}")
        opk = self._offset_per_key or self.offset_per_key()
        lopk = self._lengths_offset_per_key or self.lengths_offset_per_key()
        lengths = self._lengths
        if lengths is None:
            _kjt_ops.check_offsets_alone(self)
            lengths = self.lengths()
        start, end = opk[index], opk[index + 1]
        w = self._weights
        return JaggedTensor._unchecked(
            self._values[start:end],
            None if w is None else w[start:end],
            lengths[lopk[index] : lopk[index + 1]],
            None,
        )

    def to_dict(self, compute_offsets: bool = True) -> dict[str, JaggedTensor]:
        """Key -> JaggedTensor (views into this KJT), cached. Works for a batch of 0 samples."""
        if self._jt_dict is None:
            self._jt_dict = _kjt_ops.kjt_to_dict(self, compute_offsets)
        return self._jt_dict

    def split(self, segments: Sequence[int]) -> list[KeyedJaggedTensor]:
        """Consecutive groups of ``segments[i]`` keys each (0 allowed; they must sum to F)."""
        return _kjt_ops.kjt_split(self, segments)

    def permute(
        self, indices: Sequence[int], indices_tensor: torch.Tensor | None = None
    ) -> KeyedJaggedTensor:
        """Keys reordered to ``[keys[i] for i in indices]``; an index may repeat or be left out.

        ``indices_tensor`` is accepted for TorchRec compatibility and not needed.
        """
        order = check_permute_indices(indices, self._keys)
        lpk = self.length_per_key()
        spkpr = self._stride_per_key_per_rank
        lengths = self.lengths()
        w = None if self._weights is None else used_part(self._weights, lpk)
        used = used_part(self._values, lpk)
        if spkpr is None:
            values, weights, new_lengths = _kernels.permute_kjt(
                (used, w, lengths), lpk, order, self._stride
            )
        else:
            values = _kernels.permute_segments(used, lpk, order)
            weights = None if w is None else _kernels.permute_segments(w, lpk, order)
            new_lengths = _kernels.permute_segments(lengths, self.stride_per_key(), order)
        return KeyedJaggedTensor._unchecked(
            keys=[self._keys[i] for i in order],
            values=values,
            weights=weights,
            lengths=new_lengths,
            offsets=None,
            stride=self._stride,
            stride_per_key_per_rank=None if spkpr is None else [spkpr[i] for i in order],
            length_per_key=[lpk[i] for i in order],
        )

    dist_labels = _kjt_dist.dist_labels  # TorchRec's all-to-all plumbing: see _kjt_dist.py
    dist_splits = _kjt_dist.dist_splits
    dist_tensors = _kjt_dist.dist_tensors

    @staticmethod
    def dist_init(
        keys: list[str],
        tensors: list[torch.Tensor],
        variable_stride_per_key: bool,
        num_workers: int,
        recat: torch.Tensor | None,
        stride_per_rank: list[int] | None,
        stagger: int = 1,
    ) -> KeyedJaggedTensor:
        args = (keys, tensors, variable_stride_per_key, num_workers, recat, stride_per_rank)
        if is_scripting():  # the twin's form, _script_dist.py
            out: KeyedJaggedTensor = _twins.kjt_dist_init(args, stagger)
            return out
        return _kjt_dist.dist_init(KeyedJaggedTensor, args, stagger)

    def flatten_lengths(self) -> KeyedJaggedTensor:
        """The same KJT with 1-D lengths (TorchRec compatibility; ours are always 1-D)."""
        return self

    # --- devices and memory ----------------------------------------------------------------

    def to(
        self,
        device: torch.device | str,
        non_blocking: bool = False,
        dtype: torch.dtype | None = None,
    ) -> KeyedJaggedTensor:
        """A copy on ``device``; ``dtype`` (if given) converts the weights only, as TorchRec."""
        return kjt_to(self, device, non_blocking, dtype)

    def pin_memory(self) -> KeyedJaggedTensor:
        """A copy in pinned host memory (for asynchronous host-to-device copies)."""
        return kjt_pin_memory(self)

    def copy_(self, kjt: KeyedJaggedTensor, non_blocking: bool = False) -> KeyedJaggedTensor:
        """Copy ``kjt``'s tensors into this KJT's (same shapes) and adopt its host metadata."""
        return kjt_copy_(self, kjt, non_blocking)

    def record_stream(self, stream: torch.Stream) -> None:
        kjt_record_stream(self, stream)

    def __repr__(self) -> str:
        return kjt_repr(self)

    def __str__(self) -> str:
        """TorchRec's text: every key's bags. ``repr()`` is the bounded one."""
        return kjt_str(self)


register_kjt_pytree(KeyedJaggedTensor)


# Leaves for torch.fx: a traced module records one call instead of iterating Proxies. Module
# globals of this file, so that fx's patching of them reaches the static methods above.
@torch.fx.wrap
def _kjt_concat(kjt_list: Sequence[KeyedJaggedTensor]) -> KeyedJaggedTensor:
    return _kjt_ops.kjt_concat(kjt_list)


@torch.fx.wrap
def _kjt_empty_like(
    kjt: KeyedJaggedTensor, device: torch.device | None = None
) -> KeyedJaggedTensor:
    if is_scripting():  # only this branch is compiled when scripted
        out: KeyedJaggedTensor = _twins.kjt_empty_like(kjt, device)
        return out
    return _kjt_ops.kjt_empty_like(kjt, device)


@torch.fx.wrap
def _from_jt_dict(jt_dict: dict[str, JaggedTensor]) -> KeyedJaggedTensor:
    if is_scripting():
        out: KeyedJaggedTensor = _twins.kjt_from_jt_dict(jt_dict)
        return out
    return _kjt_ops.from_jt_dict(KeyedJaggedTensor, jt_dict)
