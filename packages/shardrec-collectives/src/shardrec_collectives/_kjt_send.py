"""What one rank sends in a KJT all-to-all, built from either input form.

`kjt_all_to_all` takes a KJT per destination or a `KeySelection` (keys of one KJT per
destination); both become a `Prepared`: per destination, the pieces whose concatenation is the
sent KJT's lengths / values / weights, and the facts the header carries (dtypes, flags, error).
A `KeySelection`'s pieces are views of its KJT's per-key segments, so the ids are copied once,
into the send buffer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from shardrec_collectives import _primitives as prim
from shardrec_collectives.env import ShardingEnv
from shardrec_jagged import KeyedJaggedTensor

__all__ = ["KeySelection", "Outgoing", "Prepared", "from_kjts", "from_selection"]


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Outgoing:
    """What this rank sends one destination: a KJT, or pieces of one, concatenated on send.

    lengths / values / weights: pieces whose concatenations are the sent KJT's lengths
    `(sum(strides),)`, values `(sum(counts),)` and weights (None: unweighted).
    """

    keys: tuple[str, ...]
    stride: int
    strides: list[int]
    counts: list[int]
    lengths: list[torch.Tensor]
    values: list[torch.Tensor]
    weights: list[torch.Tensor] | None


def _whole(kjt: KeyedJaggedTensor, strides: list[int], counts: list[int]) -> Outgoing:
    w = kjt.weights_or_none()
    return Outgoing(
        keys=tuple(kjt.keys()),
        stride=kjt.stride(),
        strides=strides,
        counts=counts,
        lengths=[kjt.lengths()],
        values=[kjt.values()],
        weights=None if w is None else [w],
    )


def _check_local(per_rank: Sequence[KeyedJaggedTensor]) -> None:
    """Content checks whose failure is reported through the header (so no rank hangs)."""
    first = per_rank[0]
    for d, kjt in enumerate(per_rank):
        if kjt.values().dtype != first.values().dtype:
            raise TypeError(
                f"per_rank[{d}] values have dtype {kjt.values().dtype} but per_rank[0] has "
                f"{first.values().dtype}; every KJT sent must use the same id dtype"
            )
        if kjt.lengths().dtype != first.lengths().dtype:
            raise TypeError(
                f"per_rank[{d}] lengths have dtype {kjt.lengths().dtype} but per_rank[0] has "
                f"{first.lengths().dtype}; every KJT sent must use the same lengths dtype"
            )
        if kjt.device() != first.device():
            raise ValueError(
                f"per_rank[{d}] is on {kjt.device()} but per_rank[0] is on {first.device()}"
            )
    weight_dtypes = {w.dtype for k in per_rank if (w := k.weights_or_none()) is not None}
    if len(weight_dtypes) > 1:
        raise TypeError(
            f"the KJTs sent have weights of several dtypes {sorted(map(str, weight_dtypes))}"
        )


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class KeySelection:
    """A `kjt_all_to_all` input: rank d gets the keys of `features` at `keys_per_rank[d]`.

    Means `[features.permute(k) for k in keys_per_rank]` (an empty `k`: an empty KJT with
    `features`' batch size, so that rank still learns this rank's batch size) and receives the
    same, bit for bit, but copies the ids once on the way out: the send buffer is one
    `torch.cat` over views of `features`' per-key segments, where permuted KJTs are a copy each
    and then a second copy into the buffer. (A variable-batch `features` is permuted.)

    `wire_dtype`: an integer dtype the ids and bag lengths travel (and arrive) as, instead of the
    ids' own, when the caller knows they fit (e.g. `torch.int32` for int64 ids of tables with
    fewer than 2**31 rows: half the bytes). They are cast while the send buffer is built (no
    extra pass). Every rank must pass the same `wire_dtype` (a rank that sends another id
    dtype gets the usual dtype disagreement error on every rank).

    Raises `IndexError` for a position outside `features`' keys and `ValueError` for a position
    named twice in one list (a rank receives each key at most once).
    """

    features: KeyedJaggedTensor
    keys_per_rank: Sequence[Sequence[int]]
    wire_dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        wire = self.wire_dtype
        if wire is not None and (wire.is_floating_point or wire.is_complex or wire == torch.bool):
            raise TypeError(f"wire_dtype must be an integer dtype, got {wire}")
        num_keys = len(self.features.keys())
        for d, picked in enumerate(self.keys_per_rank):
            seen: set[int] = set()
            for i in picked:
                if not 0 <= i < num_keys:
                    raise IndexError(
                        f"keys_per_rank[{d}] names key position {i}, but the KJT has "
                        f"{num_keys} keys {self.features.keys()}"
                    )
                if i in seen:
                    raise ValueError(
                        f"keys_per_rank[{d}] names key position {i} twice ({list(picked)}); "
                        f"a rank receives each key at most once"
                    )
                seen.add(i)

    def permuted(self) -> list[KeyedJaggedTensor]:
        """The KJTs this selection stands for (one copy of the ids each)."""
        return [_select_by_permute(self.features, list(k)) for k in self.keys_per_rank]


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Prepared:
    """This rank's side of one exchange, whichever form the input had."""

    sends: list[Outgoing]
    values: torch.Tensor  # this rank's ids (only dtype and device are read: the wire's)
    lengths_dtype: torch.dtype
    weight_dtype: torch.dtype | None
    variable: bool
    weight_grad: bool
    error: BaseException | None


def from_kjts(
    env: ShardingEnv, per_rank: Sequence[KeyedJaggedTensor], error: BaseException | None
) -> Prepared:
    if len(per_rank) != env.world_size:
        raise ValueError(
            f"kjt_all_to_all needs one KJT per rank ({env.world_size}), got {len(per_rank)}"
        )
    for d, kjt in enumerate(per_rank):
        if not isinstance(kjt, KeyedJaggedTensor):
            raise TypeError(f"per_rank[{d}] must be a KeyedJaggedTensor, got {type(kjt).__name__}")
    if error is None:
        try:
            _check_local(per_rank)
        except (TypeError, ValueError) as exc:
            error = exc
    own = per_rank[env.rank]
    # Whether weights are differentiable must be one decision for all ranks (backward runs the
    # reverse all-to-all on every rank), so it travels in the header.
    weight_grad = torch.is_grad_enabled() and any(
        w is not None and w.requires_grad
        for k in per_rank
        if (w := k.weights_or_none()) is not None
    )
    sends: list[Outgoing] = []
    for kjt in per_rank:
        try:
            sends.append(_whole(kjt, kjt.stride_per_key(), kjt.length_per_key()))
        except (TypeError, ValueError, RuntimeError) as exc:
            error = error or exc
            zeros = [0] * len(kjt.keys())
            sends.append(_whole(kjt, zeros, zeros))
    weight_dtypes = [w.dtype for k in per_rank if (w := k.weights_or_none()) is not None]
    return Prepared(
        sends=sends,
        values=own.values(),
        lengths_dtype=own.lengths().dtype,
        weight_dtype=weight_dtypes[0] if weight_dtypes else None,
        variable=any(k.variable_stride_per_key() for k in per_rank),
        weight_grad=weight_grad,
        error=error,
    )


def from_selection(selection: KeySelection, error: BaseException | None) -> Prepared:
    """Pieces of a fixed-batch KJT: per destination, views of its keys' segments."""
    features = selection.features
    keys = features.keys()
    stride = features.stride()
    values = features.values()
    lengths = features.lengths()
    weights = features.weights_or_none()
    counts: list[int] = [0] * len(keys)
    if error is None:
        try:
            counts = features.length_per_key()
        except (TypeError, ValueError, RuntimeError) as exc:
            error = exc
    wire = values.dtype
    if selection.wire_dtype is not None and not values.dtype.is_floating_point:
        wire = selection.wire_dtype
    if not values.dtype.is_floating_point and not lengths.dtype.is_floating_point:
        # One cast for all keys (the send buffer then takes each piece in its own dtype).
        lengths = lengths.to(wire)
    starts = prim.exclusive_cumsum(counts)
    sends: list[Outgoing] = []
    for picked in selection.keys_per_rank:
        names = tuple(keys[i] for i in picked)
        if error is not None:
            # The input is unusable: send nothing; the header carries the error to every rank.
            zeros = [0] * len(picked)
            sends.append(
                Outgoing(
                    keys=names,
                    stride=0,
                    strides=zeros,
                    counts=zeros,
                    lengths=[],
                    values=[],
                    weights=None,
                )
            )
            continue
        spans = [(starts[i], starts[i] + counts[i]) for i in picked]
        sends.append(
            Outgoing(
                keys=names,
                stride=stride,
                strides=[stride] * len(picked),
                counts=[counts[i] for i in picked],
                lengths=[lengths[i * stride : (i + 1) * stride] for i in picked],
                values=[values[a:b] for a, b in spans],
                weights=None if weights is None else [weights[a:b] for a, b in spans],
            )
        )
    return Prepared(
        sends=sends,
        values=values if wire == values.dtype else values.new_empty(0, dtype=wire),
        lengths_dtype=features.lengths().dtype,
        weight_dtype=None if weights is None else weights.dtype,
        variable=False,
        weight_grad=torch.is_grad_enabled() and weights is not None and weights.requires_grad,
        error=error,
    )


def _select_by_permute(features: KeyedJaggedTensor, picked: list[int]) -> KeyedJaggedTensor:
    if picked == list(range(len(features.keys()))):
        return features
    if not picked:
        values = features.values()
        weights = features.weights_or_none()
        return KeyedJaggedTensor(
            [],
            values.new_empty(0),
            weights=None if weights is None else weights.new_empty(0),
            lengths=features.lengths().new_empty(0),
            stride=features.stride(),
        )
    return features.permute(picked)
