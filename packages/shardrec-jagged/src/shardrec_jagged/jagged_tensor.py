"""JaggedTensor: one feature's bags of ids, of varying length, for a batch of B samples.

Layout (B = 3 bags; bag 1 is empty)::

    bag:       0         1     2
    ids:      [10, 11]   []    [12]
    values  = [10, 11, 12]            (N,)      N = total ids
    weights = [w0, w1, w2]            (N,)      optional, one per value
    lengths = [2, 0, 1]               (B,)      ids per bag
    offsets = [0, 2, 2, 3]            (B + 1,)  start of each bag, then N

Either of ``lengths``/``offsets`` may be given; the other is derived on first use and cached.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.fx
from torch.utils._pytree import GetAttrKey, KeyEntry, register_pytree_node

from shardrec_jagged import _kernels
from shardrec_jagged._format import jagged_rows, jt_str
from shardrec_jagged._fx import ProxyableMeta
from shardrec_jagged._jagged_parts import JaggedParts
from shardrec_jagged._validation import (
    as_index_tensor,
    check_bag_lengths,
    check_lengths_offsets_sizes,
    check_values_weights,
    validate_agree,
    validate_jagged,
    validate_offsets,
)

__all__ = ["JaggedTensor"]


class JaggedTensor(JaggedParts, metaclass=ProxyableMeta):
    """An optionally weighted jagged tensor (one feature of a batch).

    Args:
        values: ``(N, *D)`` the ids (or any per-id data) of all bags, bag after bag.
        weights: ``(N,)`` optional per-id weights.
        lengths: ``(B,)`` integer, ids per bag.
        offsets: ``(B + 1,)`` integer, cumulative ``lengths`` starting at 0.
        validate: check tensor contents now (reads them to the host); off by default so that
            construction never waits on the device. ``validate()`` does the same later.

    Only shapes and dtypes are checked at construction (no device-to-host copy).
    """

    _fields = ("_values", "_weights", "_lengths", "_offsets")
    _check_offsets: bool = False  # class default: pieces of a valid value and scripted results

    def __init__(
        self,
        values: torch.Tensor,
        weights: torch.Tensor | None = None,
        lengths: torch.Tensor | Sequence[int] | None = None,
        offsets: torch.Tensor | Sequence[int] | None = None,
        *,
        validate: bool = False,
    ) -> None:
        check_values_weights(values, weights)
        lengths = as_index_tensor(lengths, "lengths", values.device)
        offsets = as_index_tensor(offsets, "offsets", values.device)
        lengths, offsets = check_lengths_offsets_sizes(lengths, offsets)
        self._values = values
        self._weights = weights
        self._lengths = lengths
        self._offsets = offsets
        # Offsets given by the caller are checked at the first host read of the bags (to_dense,
        # to_padded_dense, str): they start at 0, do not decrease and, with lengths also given,
        # agree with them; each named as an offsets problem (derived lengths would only look
        # negative).
        self._check_offsets = offsets is not None
        if validate:
            self.validate()

    @classmethod
    def _unchecked(
        cls,
        values: torch.Tensor,
        weights: torch.Tensor | None,
        lengths: torch.Tensor | None,
        offsets: torch.Tensor | None,
    ) -> JaggedTensor:
        """Internal constructor for pieces of an already valid value: no checks, no fx hook."""
        jt = cls.__new__(cls)
        jt._values = values
        jt._weights = weights
        jt._lengths = lengths
        jt._offsets = offsets
        return jt

    def validate(self) -> JaggedTensor:
        """Check contents: lengths >= 0, they sum to ``values.size(0)``, offsets agree. Syncs."""
        validate_jagged(self._values, self._lengths, self._offsets)
        return self

    # --- constructors ---------------------------------------------------------------------

    @staticmethod
    def empty(
        is_weighted: bool = False,
        device: torch.device | None = None,
        values_dtype: torch.dtype | None = None,
        weights_dtype: torch.dtype | None = None,
        lengths_dtype: torch.dtype = torch.int32,
    ) -> JaggedTensor:
        """A JaggedTensor with zero bags."""
        weights = torch.empty(0, dtype=weights_dtype, device=device) if is_weighted else None
        return JaggedTensor(
            values=torch.empty(0, dtype=values_dtype, device=device),
            weights=weights,
            lengths=torch.empty(0, dtype=lengths_dtype, device=device),
            offsets=torch.empty(0, dtype=lengths_dtype, device=device),  # TorchRec's: no entry
        )

    @staticmethod
    def empty_like(jt: JaggedTensor, device: torch.device | None = None) -> JaggedTensor:
        """Zero bags with ``jt``'s dtypes, on ``device`` (default: ``jt``'s device)."""
        dev = jt.device() if device is None else device
        w = jt.weights_or_none()
        return JaggedTensor(
            values=torch.empty(0, dtype=jt.values().dtype, device=dev),
            weights=None if w is None else torch.empty(0, dtype=w.dtype, device=dev),
            lengths=torch.empty(0, dtype=jt.lengths().dtype, device=dev),
        )

    @staticmethod
    def from_dense(
        values: Sequence[torch.Tensor], weights: Sequence[torch.Tensor] | None = None
    ) -> JaggedTensor:
        """One tensor per bag -> JaggedTensor; ``lengths`` is int32 ``(len(values),)``."""
        if weights is not None and len(weights) != len(values):
            raise ValueError(
                f"from_dense got {len(values)} value tensors but {len(weights)} weight tensors"
            )
        if weights is not None:
            for i, (v, w) in enumerate(zip(values, weights, strict=True)):
                if v.dim() == 0 or w.dim() == 0 or w.size(0) != v.size(0):
                    # concatenated, the weights would pair with another bag's values
                    raise ValueError(
                        f"from_dense: weights[{i}] has shape {tuple(w.shape)} but values[{i}] "
                        f"has {tuple(v.shape)}; each bag needs one weight per value"
                    )
        if len(values) == 0:
            return JaggedTensor.empty(is_weighted=weights is not None)
        values_t = torch.cat(list(values), dim=0)
        lengths = torch.tensor(
            [v.size(0) for v in values], dtype=torch.int32, device=values_t.device
        )
        weights_t = torch.cat(list(weights), dim=0) if weights is not None else None
        return JaggedTensor(values=values_t, weights=weights_t, lengths=lengths)

    @staticmethod
    def from_dense_lengths(
        values: torch.Tensor, lengths: torch.Tensor, weights: torch.Tensor | None = None
    ) -> JaggedTensor:
        """Padded ``values: (B, L)``, ``lengths: (B,)`` -> the first ``lengths[b]`` of each row."""
        return _from_dense_lengths(values, lengths, weights)

    # --- accessors (values, weights, lengths, offsets and device: `JaggedParts`) ------------

    def size_in_bytes(self) -> int:
        ts = (self._values, self._weights, self._lengths, self._offsets)
        return sum(t.element_size() * t.numel() for t in ts if t is not None)

    # --- conversions ------------------------------------------------------------------------

    def to_dense(self) -> list[torch.Tensor]:
        """One tensor per bag (views into ``values``). One host copy of ``lengths``."""
        return self._split(self._values)

    def to_dense_weights(self) -> list[torch.Tensor] | None:
        if self._weights is None:
            return None
        return self._split(self._weights)

    def _check_given_offsets(self) -> None:
        """Once, before the first host read of the bags: the caller's offsets (a full pass over
        them; the read that follows is a full pass too)."""
        if self._check_offsets and not torch.compiler.is_compiling():
            offsets = self._offsets
            assert offsets is not None
            validate_offsets(offsets, self._values.size(0))
            if self._lengths is not None:
                validate_agree(self._lengths, offsets)
            self._check_offsets = False

    def _split(self, data: torch.Tensor) -> list[torch.Tensor]:
        self._check_given_offsets()
        sizes: list[int] = self.lengths().tolist()
        check_bag_lengths(sizes, data.size(0))
        total = sum(sizes)
        return list(data[:total].split_with_sizes(sizes)) if sizes else []

    def to_padded_dense(
        self, desired_length: int | None = None, padding_value: float = 0.0
    ) -> torch.Tensor:
        """``(B, L, *D)`` with ``L = desired_length`` or the longest bag; pads, or truncates."""
        return self._padded(self._values, desired_length, padding_value)

    def to_padded_dense_weights(
        self, desired_length: int | None = None, padding_value: float = 0.0
    ) -> torch.Tensor | None:
        if self._weights is None:
            return None
        return self._padded(self._weights, desired_length, padding_value)

    def _padded(
        self, data: torch.Tensor, desired_length: int | None, padding_value: float
    ) -> torch.Tensor:
        self._check_given_offsets()
        lengths = self.lengths()
        longest = 0
        if lengths.numel() > 0:
            # One host copy for the checks and the longest bag.
            low, total, longest = torch.stack(
                [lengths.min(), lengths.sum(), lengths.max()]
            ).tolist()
            if low < 0 or total > data.size(0):
                check_bag_lengths(lengths.tolist(), data.size(0))  # names the offending entry
        if desired_length is None:
            length = longest
        else:
            if desired_length < 0:
                raise ValueError(f"desired_length must be >= 0, got {desired_length}")
            length = desired_length
        return _kernels.padded_dense(data, self.offsets(), lengths, length, padding_value)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> JaggedTensor:
        """A copy on ``device`` (tensors already there are not copied)."""
        return JaggedTensor(
            values=self._values.to(device, non_blocking=non_blocking),
            weights=_to(self._weights, device, non_blocking),
            lengths=_to(self._lengths, device, non_blocking),
            offsets=_to(self._offsets, device, non_blocking),
        )

    def record_stream(self, stream: torch.Stream) -> None:
        for t in (self._values, self._weights, self._lengths, self._offsets):
            if t is not None:
                t.record_stream(stream)

    def copy_(self, jt: JaggedTensor, non_blocking: bool = False) -> JaggedTensor:
        """In-place copy of ``jt``'s tensors into this one's (same shapes)."""
        _kernels.copy_present_(
            (self._values, self._weights, self._lengths, self._offsets),
            (jt._values, jt._weights, jt._lengths, jt._offsets),
            non_blocking,
        )
        return self

    def __repr__(self) -> str:
        rows = jagged_rows(self._values, self.lengths())
        body = f"values={rows}"
        if self._weights is not None:
            body += f", weights={jagged_rows(self._weights, self.lengths())}"
        return f"JaggedTensor({body})"

    def __str__(self) -> str:
        """TorchRec's text: every bag's values (and weights). ``repr()`` is the bounded one."""
        self._check_given_offsets()
        check_bag_lengths(self.lengths().tolist(), self._values.size(0))
        return jt_str(self._values, self._weights, self.offsets())


def _to(
    t: torch.Tensor | None, device: torch.device | str, non_blocking: bool
) -> torch.Tensor | None:
    return None if t is None else t.to(device, non_blocking=non_blocking)


@torch.fx.wrap  # one leaf under symbolic tracing: the checks below branch on shapes
def _from_dense_lengths(
    values: torch.Tensor, lengths: torch.Tensor, weights: torch.Tensor | None
) -> JaggedTensor:
    if values.dim() < 2:
        raise ValueError(f"from_dense_lengths needs values (B, L), got {tuple(values.shape)}")
    if lengths.dim() != 1 or lengths.numel() != values.size(0):
        raise ValueError(
            f"from_dense_lengths: lengths has shape {tuple(lengths.shape)} but values has "
            f"{values.size(0)} rows; lengths must be ({values.size(0)},)"
        )
    pos = torch.arange(values.size(1), device=values.device)
    mask = pos.unsqueeze(0) < lengths.unsqueeze(1)
    return JaggedTensor(
        values=values[mask],
        weights=None if weights is None else weights[mask],
        lengths=lengths,
    )


# --- pytree: the four tensors are leaves; no static context --------------------------------


def _jt_flatten(jt: JaggedTensor) -> tuple[list[torch.Tensor | None], None]:
    return [jt._values, jt._weights, jt._lengths, jt._offsets], None


def _jt_flatten_with_keys(
    jt: JaggedTensor,
) -> tuple[list[tuple[KeyEntry, torch.Tensor | None]], None]:
    leaves, ctx = _jt_flatten(jt)
    named: list[tuple[KeyEntry, torch.Tensor | None]] = [
        (GetAttrKey(k), v) for k, v in zip(JaggedTensor._fields, leaves, strict=True)
    ]
    return named, ctx


def _jt_unflatten(leaves: Iterable[torch.Tensor | None], context: None) -> JaggedTensor:
    values, weights, lengths, offsets = leaves
    assert values is not None
    return JaggedTensor(values, weights, lengths, offsets)


register_pytree_node(
    JaggedTensor,
    _jt_flatten,
    _jt_unflatten,
    flatten_with_keys_fn=_jt_flatten_with_keys,
    serialized_type_name="shardrec_jagged.JaggedTensor",
)
