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
from collections.abc import Callable, Sequence

import torch

__all__ = [
    "HashZchEvictionConfig",
    "HashZchEvictionPolicyName",
    "HashZchEvictionScorer",
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
    """Per-id expiry hours and the current threshold for one policy.

    `scores(values, lengths, features)` gives `(N,)` int32 expiry hours for the ids `values:
    (N,)` of a table whose `features` features are laid out feature-major in `lengths: (F * B,)`.
    """

    def __init__(
        self,
        policy: HashZchEvictionPolicyName,
        config: HashZchEvictionConfig,
        clock: Clock = time.time,
    ) -> None:
        if policy is HashZchEvictionPolicyName.PER_FEATURE_TTL_EVICTION:
            if config.per_feature_ttl is None:
                raise ValueError(
                    "PER_FEATURE_TTL_EVICTION needs HashZchEvictionConfig(per_feature_ttl=[...]), "
                    "one TTL in hours per feature"
                )
        elif config.single_ttl is None:
            raise ValueError(
                f"{policy.value} needs HashZchEvictionConfig(single_ttl=<hours>), got None"
            )
        self.policy = policy
        self.config = config
        self.clock = clock

    def now_hours(self) -> int:
        return int(self.clock() / _SECONDS_PER_HOUR)

    def scores(self, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        now = self.now_hours()
        if self.config.per_feature_ttl is None or (
            self.policy is not HashZchEvictionPolicyName.PER_FEATURE_TTL_EVICTION
        ):
            assert self.config.single_ttl is not None
            return torch.full_like(values, self.config.single_ttl + now, dtype=torch.int32)
        ttl = torch.tensor(self.config.per_feature_ttl, dtype=torch.int32, device=values.device)
        per_feature = _per_feature_counts(lengths, len(self.config.features))
        return ttl.repeat_interleave(per_feature, output_size=values.numel()) + now


def _per_feature_counts(lengths: torch.Tensor, num_features: int) -> torch.Tensor:
    """Ids per feature, `(F,)`, of feature-major `lengths: (F * B,)`."""
    if num_features == 0 or lengths.numel() % num_features:
        raise ValueError(
            f"per-feature TTL: {lengths.numel()} bags cannot be split over {num_features} features"
        )
    return lengths.view(num_features, -1).sum(1)


def check_features(features: Sequence[str], config: HashZchEvictionConfig) -> None:
    """Refuse a config naming other features than the table reads."""
    if list(features) != list(config.features):
        raise ValueError(
            f"HashZchEvictionConfig.features {config.features} must be the table's features "
            f"{list(features)}, in order"
        )
