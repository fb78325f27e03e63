"""`DynamicTableConfig`: how a raw-id (dynamic) table maps ids to slots, admits and evicts.

Attached to a table config as `EmbeddingBagConfig(..., dynamic=DynamicTableConfig(...))`
(or `EmbeddingConfig`). The table's `num_embeddings` is its capacity: the number of slots
(rows) raw ids are mapped to. docs/dynamic.md describes the policies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "AdmissionPolicy",
    "DynamicTableConfig",
    "EvictionPolicy",
    "UnknownIdPolicy",
]


class EvictionPolicy(StrEnum):
    """What frees a slot when a new id needs one and the table is full.

    NONE: nothing; new ids are rejected (they read a zero row) until slots are freed.
    LRU: the least recently seen rows of a scanned window of slots.
    LFU: the least often seen rows of a scanned window (ties: least recently seen).
    TTL: rows unseen for `ttl_steps` training steps are freed by a sweep of
        `scan_per_step` slots per step; when full, new ids take expired rows only.
    """

    NONE = "NONE"
    LRU = "LRU"
    LFU = "LFU"
    TTL = "TTL"

    def __str__(self) -> str:
        return self.value


class AdmissionPolicy(StrEnum):
    """When an id that has no slot gets one (in training; evaluation never inserts).

    ALWAYS: on first sight.
    THRESHOLD: once it was seen `admission_threshold` times (counted by a count-min sketch:
        it may admit an id early when sketch cells collide, never late).
    PROBABILITY: each sighting admits it with probability `admission_probability`, drawn by a
        hash of (id, step, `admission_seed`): the same stream gives the same admissions.
    """

    ALWAYS = "ALWAYS"
    THRESHOLD = "THRESHOLD"
    PROBABILITY = "PROBABILITY"

    def __str__(self) -> str:
        return self.value


class UnknownIdPolicy(StrEnum):
    """What an id without a slot reads in evaluation: ZERO (a zero row) or DEFAULT_ROW (the
    table's `default_row` buffer, zeros until set). In training a not-admitted id always
    reads a zero row and receives no update."""

    ZERO = "ZERO"
    DEFAULT_ROW = "DEFAULT_ROW"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, kw_only=True)
class DynamicTableConfig:
    """The raw-id behaviour of one table (all fields optional).

    capacity: slots of the table; None means the table's `num_embeddings` (the two must
        agree when both are given).
    eviction: an `EvictionPolicy` or its name.
    ttl_steps: for TTL, the training steps a row may go unseen before it is freed (>= 1).
    admission: an `AdmissionPolicy` or its name.
    admission_threshold: sightings needed under THRESHOLD (>= 1; 1 admits on first sight).
    admission_probability: admission chance per sighting under PROBABILITY, in (0, 1].
    admission_seed: seed of the PROBABILITY draws and of the THRESHOLD sketch's hashes.
    sketch_width: cells per row of the THRESHOLD count-min sketch (2 rows); 0 picks the
        power of two >= 2 x capacity (at least 1024).
    unknown_id: an `UnknownIdPolicy` or its name (evaluation only).
    load_factor: most ids per bucket of the id map (buckets = the power of two
        >= capacity / load_factor), in (0, 0.95].
    scan_per_step: slots one TTL sweep looks at per step, and the smallest window an
        eviction scans (>= 1): the bound on the policy's work per step.
    init_seed: seed of the rows a freed slot is reset to (the table's uniform initializer
        drawn by a counter-based generator of (seed, table name, slot, step); see
        docs/dynamic.md). A table with a custom `init_fn` calls it instead.
    """

    capacity: int | None = None
    eviction: EvictionPolicy = EvictionPolicy.LRU
    ttl_steps: int | None = None
    admission: AdmissionPolicy = AdmissionPolicy.ALWAYS
    admission_threshold: int = 1
    admission_probability: float = 1.0
    admission_seed: int = 0
    sketch_width: int = 0
    unknown_id: UnknownIdPolicy = UnknownIdPolicy.ZERO
    load_factor: float = 0.5
    scan_per_step: int = 1024
    init_seed: int = 0

    def validate(self, table: str, num_embeddings: int) -> None:
        """Raise ValueError / TypeError naming `table`, the value and the fix; normalize the
        policy names to enums. Called by the table config that holds this one."""
        where = f"table {table!r}: dynamic"
        for name, enum in (
            ("eviction", EvictionPolicy),
            ("admission", AdmissionPolicy),
            ("unknown_id", UnknownIdPolicy),
        ):
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, enum(value))
            except ValueError:
                valid = ", ".join(e.value for e in enum)
                raise ValueError(f"{where} {name} {value!r} is not one of {valid}") from None
        if self.capacity is not None:
            _int(where, "capacity", self.capacity, "the number of slots (rows) the table holds")
            if self.capacity != num_embeddings:
                raise ValueError(
                    f"{where} capacity {self.capacity} differs from num_embeddings "
                    f"{num_embeddings}; a dynamic table's rows are its slots: set "
                    f"num_embeddings={self.capacity} (or leave capacity unset)"
                )
        if self.eviction is EvictionPolicy.TTL:
            if self.ttl_steps is None:
                raise ValueError(f"{where} eviction TTL needs ttl_steps (an int >= 1)")
            _int(where, "ttl_steps", self.ttl_steps, "the steps a row may go unseen")
        elif self.ttl_steps is not None:
            raise ValueError(
                f"{where} ttl_steps {self.ttl_steps} is given but eviction is "
                f"{self.eviction.value}; set eviction='TTL' or drop ttl_steps"
            )
        _int(where, "admission_threshold", self.admission_threshold, "the sightings to admit")
        p = self.admission_probability
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 < p <= 1.0:
            raise ValueError(
                f"{where} admission_probability {p!r} must be a number in (0, 1]; 1 admits on "
                "first sight"
            )
        if isinstance(self.admission_seed, bool) or not isinstance(self.admission_seed, int):
            raise TypeError(f"{where} admission_seed must be an int, got {self.admission_seed!r}")
        if isinstance(self.init_seed, bool) or not isinstance(self.init_seed, int):
            raise TypeError(f"{where} init_seed must be an int, got {self.init_seed!r}")
        if self.sketch_width != 0:
            _int(where, "sketch_width", self.sketch_width, "cells per sketch row (0: automatic)")
        lf = self.load_factor
        if isinstance(lf, bool) or not isinstance(lf, int | float) or not 0.0 < lf <= 0.95:
            raise ValueError(f"{where} load_factor {lf!r} must be in (0, 0.95]; 0.5 is the default")
        _int(where, "scan_per_step", self.scan_per_step, "the slots scanned per step")

    def num_buckets(self, capacity: int) -> int:
        """Buckets of the id map of a table of `capacity` slots (a power of two)."""
        need = max(2, math.ceil(capacity / self.load_factor) + 1)
        return 1 << (need - 1).bit_length()

    def sketch_cells(self, capacity: int) -> int:
        """Cells per row of the THRESHOLD sketch (a power of two)."""
        width = self.sketch_width or max(1024, 2 * capacity)
        return 1 << (width - 1).bit_length()


def _int(where: str, name: str, value: object, meaning: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where} {name} must be an int >= 1 ({meaning}), got {value!r}")
    if value < 1:
        raise ValueError(f"{where} {name} must be >= 1 ({meaning}), got {value}")
