"""Eviction policies of `MCHManagedCollisionModule` (TorchRec's `mc_modules` policies).

At each eviction round the module holds `zch_size` slots (sorted by raw id; the last one is a
reserved miss row that is never evicted) and a window of distinct new ids with their counts. A
policy scores every held slot and every new id; the `zch_size` best scores keep or take a slot:

    merged scores:  [ held slot 0 .. held slot Z-1 | new id 0 .. new id U'-1 ]
    best Z (stable, descending):  new ids among them take the slots of held ids outside them

Policies keep per-slot metadata (`_mch_<name>` buffers of the module, int64, `(Z,)`) and per
window-entry metadata (`_history_<name>`). The three built-in policies read two kinds:

- `counts` (per slot): how often the slot's id was seen since it was admitted;
- `last_access_iter` (per slot and per window entry): the last iteration that saw the id.

Scores (higher is kept): LFU `counts`; LRU `-(now - last + 1) ** decay`; DistanceLFU
`counts / (now - last + 1) ** decay`. Ties keep the held id (the held slots come first in the
stable sort), then the more frequent new id.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import NamedTuple

import torch

from shardrec_embedding.dynamic.id_map import _library
from shardrec_embedding.mc.round_native import (
    ScoreKind,
    argsort_subset,
    copy_at_,
    update_and_score,
)

__all__ = [
    "DistanceLFU_EvictionPolicy",
    "LFU_EvictionPolicy",
    "LRU_EvictionPolicy",
    "MCHEvictionPolicy",
    "MCHEvictionPolicyMetadataInfo",
    "ThresholdFilter",
]

_INT64_MAX = torch.iinfo(torch.int64).max

ThresholdFilter = Callable[[torch.Tensor], tuple[torch.Tensor, float | torch.Tensor]]
"""`id_counts: (U,) -> (admit mask: (U,) bool, threshold)` (see `mc.filters`)."""


class MCHEvictionPolicyMetadataInfo(NamedTuple):
    """One metadata buffer of a policy: `_mch_<name>` if per slot, `_history_<name>` if per
    window entry."""

    metadata_name: str
    is_mch_metadata: bool
    is_history_metadata: bool


_COUNTS = MCHEvictionPolicyMetadataInfo("counts", True, False)
_LAST_ACCESS = MCHEvictionPolicyMetadataInfo("last_access_iter", True, True)


class MCHEvictionPolicy(abc.ABC):
    """Base of the MCH eviction policies (TorchRec's `MCHEvictionPolicy`).

    A subclass lists its metadata (`counts` and/or `last_access_iter`, handled here) and scores
    slots in `eviction_scores`. Subclasses with other metadata override the three hooks below.
    """

    def __init__(
        self,
        metadata_info: list[MCHEvictionPolicyMetadataInfo],
        threshold_filtering_func: ThresholdFilter | None = None,
    ) -> None:
        unknown = [m.metadata_name for m in metadata_info if m not in (_COUNTS, _LAST_ACCESS)]
        if unknown and type(self).update_metadata_and_generate_eviction_scores is (
            MCHEvictionPolicy.update_metadata_and_generate_eviction_scores
        ):
            raise ValueError(
                f"{type(self).__name__}: metadata {unknown} is not one the base policy maintains "
                "('counts', 'last_access_iter'); override the metadata hooks to use it"
            )
        if threshold_filtering_func is not None and not callable(threshold_filtering_func):
            raise TypeError(
                f"{type(self).__name__}: threshold_filtering_func must be a function (e.g. "
                "functools.partial(dynamic_threshold_filter, threshold_skew_multiplier=10)) or "
                f"None, got {type(threshold_filtering_func).__name__}"
            )
        self._metadata_info = list(metadata_info)
        self._threshold_filtering_func = threshold_filtering_func

    @property
    def metadata_info(self) -> list[MCHEvictionPolicyMetadataInfo]:
        return self._metadata_info

    @abc.abstractmethod
    def eviction_scores(self, current_iter: int, merged: dict[str, torch.Tensor]) -> torch.Tensor:
        """Scores of the `merged` slots and candidates, `(Z + U',)` each; higher is kept."""

    def record_history_metadata(
        self,
        current_iter: int,
        incoming_ids: torch.Tensor,
        history_metadata: dict[str, torch.Tensor],
    ) -> None:
        """Write the window metadata of `incoming_ids: (n,)` into the `(n,)` views given."""
        if "last_access_iter" in history_metadata:
            history_metadata["last_access_iter"].fill_(current_iter)

    def coalesce_history_metadata(
        self,
        current_iter: int,
        history_metadata: dict[str, torch.Tensor],
        unique_ids_counts: torch.Tensor,
        unique_inverse_mapping: torch.Tensor,
        additional_ids: torch.Tensor | None = None,
        threshold_mask: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Per distinct id `(U,)` (or `(U',)` admitted by `threshold_mask`): its window metadata."""
        out: dict[str, torch.Tensor] = {}
        if "last_access_iter" in history_metadata:
            last = history_metadata["last_access_iter"]
            if additional_ids is not None:
                last = torch.cat([last, torch.full_like(additional_ids, current_iter)])
            per_id = torch.zeros_like(unique_ids_counts).scatter_reduce_(
                0, unique_inverse_mapping, last, reduce="amax", include_self=False
            )
            out["last_access_iter"] = per_id if threshold_mask is None else per_id[threshold_mask]
        return out

    @torch.no_grad()
    def update_metadata_and_generate_eviction_scores(
        self,
        current_iter: int,
        mch_size: int,
        coalesced_history_argsort_mapping: torch.Tensor,
        coalesced_history_sorted_unique_ids_counts: torch.Tensor,
        coalesced_history_mch_matching_elements_mask: torch.Tensor,
        coalesced_history_mch_matching_indices: torch.Tensor,
        mch_metadata: dict[str, torch.Tensor],
        coalesced_history_metadata: dict[str, torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Update held slots' metadata with the window, choose who stays.

        The window ids come sorted by count, descending (`..._sorted_unique_ids_counts: (U',)`,
        `argsort_mapping` is that order); `matching_mask: (U',)` marks ids already held, at slots
        `matching_indices`. Returns `(evicted slot indices, indices among the new ids that take
        them)`, pairwise, and writes the new ids' metadata into the freed slots.
        """
        held = coalesced_history_mch_matching_elements_mask
        slots = coalesced_history_mch_matching_indices
        kind = self._native_score_kind()
        if kind is not None:
            fused = update_and_score(
                kind,
                current_iter,
                mch_size,
                coalesced_history_argsort_mapping,
                coalesced_history_sorted_unique_ids_counts,
                held,
                slots,
                mch_metadata,
                coalesced_history_metadata,
            )
            if fused is not None:
                scores, fresh, may_be_nan = fused
                evicted, selected = _select(mch_size, scores, may_be_nan=may_be_nan)
                for name, values in fresh.items():
                    copy_at_(mch_metadata[name], evicted, values, selected)
                return evicted, selected
        new: dict[str, torch.Tensor] = {}
        if "counts" in mch_metadata:
            counts = coalesced_history_sorted_unique_ids_counts
            mch_metadata["counts"][slots] += counts[held]
            new["counts"] = counts[~held]
            mch_metadata["counts"][mch_size - 1] = _INT64_MAX  # the miss row is never evicted
        if "last_access_iter" in mch_metadata:
            last = coalesced_history_metadata["last_access_iter"][coalesced_history_argsort_mapping]
            mch_metadata["last_access_iter"][slots] = last[held]
            new["last_access_iter"] = last[~held]
            mch_metadata["last_access_iter"][mch_size - 1] = current_iter
        merged = {name: torch.cat([mch_metadata[name], new[name]]) for name in new}
        evicted, selected = _select(mch_size, self.eviction_scores(current_iter, merged))
        for name, values in new.items():
            mch_metadata[name][evicted] = values[selected]
        return evicted, selected

    def _native_score_kind(self) -> ScoreKind | None:
        """The fused native kind of this policy's scores, or None (scores by `eviction_scores`):
        only a built-in policy whose scoring is not overridden has one."""
        return None


def _select(
    pivot: int, scores: torch.Tensor, *, may_be_nan: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """The `pivot` best of `scores: (pivot + U',)`: (held slots that lose, new ids that win),
    each in the order of a stable descending sort of the scores (losers and winners pair up
    in that order). `may_be_nan=False`: the caller knows no score is NaN (not checked)."""
    n = scores.numel()
    if n == pivot:
        empty = torch.empty(0, dtype=torch.int64, device=scores.device)
        return empty, empty
    if scores.device.type != "cpu" or (
        may_be_nan and scores.is_floating_point() and bool(scores.isnan().any())
    ):
        order = torch.argsort(scores, descending=True, stable=True)
        kept, dropped = order[:pivot], order[pivot:]
        return dropped[dropped < pivot], kept[kept >= pivot] - pivot
    # Without the full sort: the n - pivot dropped are the smallest in (score, -index) order,
    # found by a selection (the (n - pivot)-th smallest score; of the ties at it, the last
    # ones go); only the losers and the winners, a few out of n, are then sorted.
    threshold = _kth_smallest(scores, n - pivot)
    lib = _library()
    if lib is not None and scores.dtype is torch.float32 and scores.dim() == 1:
        scores = scores.contiguous()
        # one spare entry each: the kernel writes the next entry before it counts it
        losers = torch.empty(min(pivot, n - pivot) + 1, dtype=torch.int64)
        winners = torch.empty(n - pivot + 1, dtype=torch.int64)
        counts = torch.empty(2, dtype=torch.int64)
        lib.sr_idmap_split_f32(
            scores.data_ptr(),
            n,
            pivot,
            float(threshold),
            losers.data_ptr(),
            winners.data_ptr(),
            counts.data_ptr(),
        )
        losers, winners = losers[: int(counts[0])], winners[: int(counts[1])]
    else:
        below = scores < threshold
        at = torch.nonzero(scores == threshold).reshape(-1)
        dropped_mask = below
        dropped_mask[at[at.numel() - (n - pivot - int(below.sum())) :]] = True
        dropped = torch.nonzero(dropped_mask).reshape(-1)
        losers = dropped[dropped < pivot]
        winners = torch.nonzero(~dropped_mask[pivot:]).reshape(-1)
    losers = argsort_subset(scores, losers, descending=True)
    winners = argsort_subset(scores[pivot:], winners, descending=True)
    return losers, winners


def _kth_smallest(scores: torch.Tensor, k: int) -> torch.Tensor:
    """`torch.kthvalue(scores, k).values` (no NaN in `scores`); float32 by a native
    quickselect when the native kernels are built."""
    lib = _library()
    if lib is not None and scores.dtype is torch.float32 and scores.dim() == 1:
        scores = scores.contiguous()
        scratch = torch.empty_like(scores)
        value = lib.sr_idmap_kth_f32(scores.data_ptr(), scores.numel(), k, scratch.data_ptr())
        return torch.tensor(value, dtype=torch.float32)
    return torch.kthvalue(scores, k).values


def _distance(current_iter: int, last: torch.Tensor, decay_exponent: float) -> torch.Tensor:
    return torch.pow(current_iter - last + 1, decay_exponent)


class LFU_EvictionPolicy(MCHEvictionPolicy):
    """Keep the most frequently seen ids (counts since admission)."""

    def __init__(self, threshold_filtering_func: ThresholdFilter | None = None) -> None:
        super().__init__([_COUNTS], threshold_filtering_func)

    def eviction_scores(self, current_iter: int, merged: dict[str, torch.Tensor]) -> torch.Tensor:
        return merged["counts"]

    def _native_score_kind(self) -> ScoreKind | None:
        own = type(self).eviction_scores is LFU_EvictionPolicy.eviction_scores
        return ScoreKind.LFU if own else None


class LRU_EvictionPolicy(MCHEvictionPolicy):
    """Keep the most recently seen ids."""

    def __init__(
        self,
        decay_exponent: float = 1.0,
        threshold_filtering_func: ThresholdFilter | None = None,
    ) -> None:
        super().__init__([_LAST_ACCESS], threshold_filtering_func)
        self._decay_exponent = decay_exponent

    def eviction_scores(self, current_iter: int, merged: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.neg(_distance(current_iter, merged["last_access_iter"], self._decay_exponent))

    def _native_score_kind(self) -> ScoreKind | None:
        own = type(self).eviction_scores is LRU_EvictionPolicy.eviction_scores
        return ScoreKind.LRU if own and self._decay_exponent == 1.0 else None


class DistanceLFU_EvictionPolicy(MCHEvictionPolicy):
    """Keep ids by count divided by (iterations since last seen + 1) ** decay_exponent."""

    def __init__(
        self,
        decay_exponent: float = 1.0,
        threshold_filtering_func: ThresholdFilter | None = None,
    ) -> None:
        super().__init__([_COUNTS, _LAST_ACCESS], threshold_filtering_func)
        self._decay_exponent = decay_exponent

    def eviction_scores(self, current_iter: int, merged: dict[str, torch.Tensor]) -> torch.Tensor:
        distance = _distance(current_iter, merged["last_access_iter"], self._decay_exponent)
        return torch.div(merged["counts"], distance)

    def _native_score_kind(self) -> ScoreKind | None:
        own = type(self).eviction_scores is DistanceLFU_EvictionPolicy.eviction_scores
        return ScoreKind.DISTANCE_LFU if own and self._decay_exponent == 1.0 else None
