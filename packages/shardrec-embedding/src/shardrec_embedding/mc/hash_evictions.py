"""Eviction configs of `HashZchManagedCollisionModule` (TorchRec's `hash_mc_evictions`).

A HashZch slot's metadata is an int32 *expiry hour*: every lookup that admits or hits an id
writes `ttl + now_hours` into its slot. When an id finds neither itself nor an empty slot in its
probe window, a slot whose expiry is before `now_hours` may be taken:

- `SINGLE_TTL_EVICTION`: one TTL (hours) for every feature; the first expired slot is taken;
- `PER_FEATURE_TTL_EVICTION`: one TTL per feature of the table (`per_feature_ttl`, in the
  order of `features`); the first expired slot is taken;
- `LRU_EVICTION`: one TTL; the expired slot with the oldest expiry is taken.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable

import torch

from shardrec_jagged import JaggedTensor

__all__ = [
    "HashZchEvictionConfig",
    "HashZchEvictionPolicyName",
    "HashZchEvictionScorer",
    "HashZchPerFeatureTtlScorer",
    "HashZchSingleTtlScorer",
    "get_eviction_scorer",
]

Clock = Callable[[], float]
_SECONDS_PER_HOUR = 3600


class HashZchEvictionPolicyName(enum.Enum):
    """TorchRec's names (plain `Enum` with string values, as TorchRec)."""

    SINGLE_TTL_EVICTION = "SINGLE_TTL_EVICTION"
    PER_FEATURE_TTL_EVICTION = "PER_FEATURE_TTL_EVICTION"
    LRU_EVICTION = "LRU_EVICTION"


@dataclasses.dataclass(frozen=True)
class HashZchEvictionConfig:
    """Eviction settings of one HashZch table.

    Args:
        features: the table's features (in its config's order).
        single_ttl: hours an id keeps its slot after its last lookup (SINGLE_TTL, LRU); >= 1.
        per_feature_ttl: hours per feature (PER_FEATURE_TTL), one per entry of `features`.
    """

    features: list[str]
    single_ttl: int | None = None
    per_feature_ttl: list[int] | None = None

    def __post_init__(self) -> None:
        if self.single_ttl is not None and (
            isinstance(self.single_ttl, bool)
            or not isinstance(self.single_ttl, int)
            or self.single_ttl < 1
        ):
            raise ValueError(
                f"HashZchEvictionConfig: single_ttl must be an int >= 1 (hours), got "
                f"{self.single_ttl!r}"
            )
        if self.per_feature_ttl is not None:
            if len(self.per_feature_ttl) != len(self.features):
                raise ValueError(
                    f"HashZchEvictionConfig: per_feature_ttl has {len(self.per_feature_ttl)} "
                    f"entries for {len(self.features)} features {self.features}; give one TTL "
                    "per feature"
                )
            bad = [t for t in self.per_feature_ttl if not isinstance(t, int) or t < 1]
            if bad:
                raise ValueError(
                    f"HashZchEvictionConfig: per_feature_ttl entries must be ints >= 1 (hours), "
                    f"got {bad}"
                )


class HashZchEvictionScorer:
    """Expiry hours of a lookup's ids and the current eviction threshold (TorchRec's scorer).

    The base scores nothing (no eviction). `clock` (seconds) defaults to `time.time`, read at
    each call.
    """

    _evicts = False  # TTL scorers: slots expiring before the current hour are evictable

    def __init__(self, config: HashZchEvictionConfig, clock: Clock | None = None) -> None:
        self._config = config
        self.clock = clock

    def now_hours(self) -> int:
        return int((self.clock or time.time)() / _SECONDS_PER_HOUR)

    def gen_score(
        self,
        feature: JaggedTensor,
        device: torch.device | None = None,
        feature_split: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`(N,)` int32 expiry hour of each id of `feature` (empty here)."""
        return torch.empty(0, dtype=torch.int32, device=device)

    def gen_threshold(self) -> int:
        """Slots whose expiry is below this are evictable (-1: none)."""
        return self.now_hours() if self._evicts else -1


class HashZchSingleTtlScorer(HashZchEvictionScorer):
    """Every id expires `single_ttl` hours after its last lookup."""

    _evicts = True

    def gen_score(
        self,
        feature: JaggedTensor,
        device: torch.device | None = None,
        feature_split: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # checked at the first scored lookup, as TorchRec (a config may be built before its TTL)
        if self._config.single_ttl is None:
            raise ValueError(
                "SINGLE_TTL_EVICTION / LRU_EVICTION need HashZchEvictionConfig(single_ttl=<hours>)"
                f" for features {self._config.features}, got single_ttl=None"
            )
        values = feature.values()
        return torch.full(
            values.shape,
            self._config.single_ttl + self.now_hours(),
            dtype=torch.int32,
            device=device or values.device,
        )


class HashZchPerFeatureTtlScorer(HashZchEvictionScorer):
    """An id of feature `features[i]` expires `per_feature_ttl[i]` hours after its last lookup.

    `feature_split: (F,)` gives the ids per feature; by default it is read off the feature-major
    lengths `(F * B,)` of the table's jagged tensor.
    """

    _evicts = True

    def gen_score(
        self,
        feature: JaggedTensor,
        device: torch.device | None = None,
        feature_split: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if self._config.per_feature_ttl is None:
            raise ValueError(
                "PER_FEATURE_TTL_EVICTION needs HashZchEvictionConfig(per_feature_ttl=[...]), one "
                f"TTL in hours per feature of {self._config.features}, got None"
            )
        values = feature.values()
        device = device or values.device
        split = feature_split
        if split is None:
            split = _per_feature_counts(feature.lengths(), len(self._config.features))
        ttl = torch.tensor(self._config.per_feature_ttl, dtype=torch.int32, device=device)
        scores = ttl.repeat_interleave(split.to(device), output_size=values.numel())
        return scores + self.now_hours()


def get_eviction_scorer(
    policy_name: HashZchEvictionPolicyName, config: HashZchEvictionConfig
) -> HashZchEvictionScorer:
    """The scorer of `policy_name` (TorchRec's factory)."""
    if policy_name is HashZchEvictionPolicyName.PER_FEATURE_TTL_EVICTION:
        return HashZchPerFeatureTtlScorer(config)
    return HashZchSingleTtlScorer(config)


def _per_feature_counts(lengths: torch.Tensor, num_features: int) -> torch.Tensor:
    """Ids per feature, `(F,)`, of feature-major `lengths: (F * B,)`."""
    if num_features == 0 or lengths.numel() % num_features:
        raise ValueError(
            f"per-feature TTL: {lengths.numel()} bags cannot be split over {num_features} features"
        )
    return lengths.view(num_features, -1).sum(1)
