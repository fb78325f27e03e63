"""TorchRec's virtual (key-value) tables, run as shardrec raw-id (dynamic) tables.

A table config with `use_virtual_table=True` declares TorchRec's key-value table: raw ids from a
virtual id space of `num_embeddings` (e.g. 2^50), rows created on first use, an optional
`virtual_table_eviction_policy`. shardrec runs it as the equivalent explicit raw-id table
(`as_dynamic_table`): `num_embeddings` becomes the table's capacity, `dynamic` the mapped
`DynamicTableConfig`, and the init bounds are the declared ones or TorchRec's default for
virtual tables (`_init_bounds`). The rules
(docs/dynamic.md, "TorchRec's virtual tables"):

- capacity: `dynamic=DynamicTableConfig(capacity=N)` given beside the virtual config; else the
  virtual id space itself when it is at most `MAX_IMPLICIT_CAPACITY` slots; else none can be
  derived: a module on the meta device keeps a config without `dynamic` as declared (the planner
  plans it as TorchRec does; the sharded modules ask for a capacity); otherwise it raises
  naming the fix.
- eviction: `NoEvictionPolicy` (and no policy) -> NONE; `CountBasedEvictionPolicy` -> LFU
  (`eviction_threshold=0` -> NONE); `TimestampBasedEvictionPolicy` -> TTL with the
  `ttl_steps` given in `dynamic` (TorchRec counts minutes, shardrec counts training steps;
  `eviction_ttl_mins=0` -> NONE); the mixed, feature-score and L2-norm policies are refused
  by name with the fix (`FeatureScoreBasedEvictionPolicy(enable_eviction=False)` -> NONE).
- `total_num_buckets`: validated (it divides the virtual id space, and must divide the
  capacity: a ValueError naming the fix otherwise); the raw-id table keeps it with the space
  as its `id_space`, so the planner cuts row-wise shards at whole buckets of slots (TorchRec's
  shard sizes) and each id reaches the rank owning its bucket of the space, TorchRec's rule
  (shardrec_sharding.id_buckets).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from shardrec_embedding.dynamic.config import DynamicTableConfig, EvictionPolicy

if TYPE_CHECKING:
    from shardrec_embedding.configs import BaseEmbeddingConfig, DataType

__all__ = [
    "MAX_IMPLICIT_CAPACITY",
    "CountBasedEvictionPolicy",
    "CountTimestampMixedEvictionPolicy",
    "FeatureL2NormBasedEvictionPolicy",
    "FeatureScoreBasedEvictionPolicy",
    "FeatureScoreMapping",
    "NoEvictionPolicy",
    "TimestampBasedEvictionPolicy",
    "VirtualTableEvictionPolicy",
    "as_dynamic_table",
    "check_policy",
    "resolve_virtual_tables",
    "virtual_dynamic_config",
]

MAX_IMPLICIT_CAPACITY = 1 << 24
"""The largest virtual id space (`num_embeddings`) used as the capacity when none is given."""

VIRTUAL_INIT_SPACE = 4_000_000_000
"""The id space TorchRec's default init range of a virtual table is drawn for."""

_DOCS = "docs/dynamic.md, TorchRec's virtual tables"


# The policy classes are TorchRec 1.8's (`torchrec.modules.embedding_configs`): plain mutable
# dataclasses with TorchRec's fields and defaults, since TorchRec's own code mutates them
# (`init_metaheader_config`) and builds them positionally.
@dataclass
class VirtualTableEvictionPolicy:
    """Base of the eviction policies of a virtual table (not a policy itself)."""

    meta_header_len: int = 0
    embedding_dim: int = 0
    initialized: bool = False

    def init_metaheader_config(self, data_type: DataType, embedding_dim: int) -> None:
        """TorchRec's per-row metadata header (16 bytes: key, timestamp, count) counted in
        elements of `data_type`; set once."""
        if self.initialized:
            return
        from shardrec_embedding.configs import data_type_to_dtype

        self.meta_header_len = 16 // data_type_to_dtype(data_type).itemsize
        self.embedding_dim = embedding_dim
        self.initialized = True

    def get_meta_header_len(self) -> int:
        return self.meta_header_len

    def get_embedding_dim(self) -> int:
        return self.embedding_dim


@dataclass
class CountBasedEvictionPolicy(VirtualTableEvictionPolicy):
    """Evict rarely seen ids. Runs as LFU; `eviction_threshold=0` means no eviction."""

    training_id_eviction_trigger_count: int = 0
    eviction_threshold: int = 15
    decay_rate: float = 0.99
    inference_eviction_threshold: int | None = None

    def __post_init__(self) -> None:
        if self.inference_eviction_threshold is None:
            self.inference_eviction_threshold = self.eviction_threshold


@dataclass
class FeatureScoreBasedEvictionPolicy(VirtualTableEvictionPolicy):
    """Evict by a per-feature score. Refused, unless `enable_eviction=False` (no eviction)."""

    decay_rate: float = 0.99
    training_id_eviction_trigger_count: int = 0
    training_id_keep_count: int = 0
    eviction_ttl_mins: int = 0
    max_inference_id_num_per_rank: int = 0
    inference_eviction_feature_score_threshold: float | None = None
    inference_eviction_ttl_mins: int | None = None
    feature_score_mapping: dict[str, float] | None = None
    feature_score_default_value: float | None = None
    enable_auto_feature_score_collection: bool = False
    enable_eviction: bool = True

    def __post_init__(self) -> None:
        if self.inference_eviction_feature_score_threshold is None:
            self.inference_eviction_feature_score_threshold = 0
        if self.inference_eviction_ttl_mins is None:
            self.inference_eviction_ttl_mins = self.eviction_ttl_mins
        if self.max_inference_id_num_per_rank == 0:
            self.max_inference_id_num_per_rank = self.training_id_keep_count
        if self.enable_auto_feature_score_collection and self.feature_score_mapping is None:
            self.feature_score_mapping = {}


@dataclass
class FeatureScoreMapping:
    """Feature name -> score of `FeatureScoreBasedEvictionPolicy` (carried for TorchRec code)."""

    feature_score_mapping: dict[str, float] = dataclasses.field(default_factory=dict)
    eviction_enabled: bool = False


@dataclass
class TimestampBasedEvictionPolicy(VirtualTableEvictionPolicy):
    """Evict ids unseen for a while. Runs as TTL over training steps: give the steps as
    `dynamic=DynamicTableConfig(ttl_steps=...)`; `eviction_ttl_mins=0` means no eviction."""

    training_id_eviction_trigger_count: int = 0
    eviction_ttl_mins: int = 24 * 60
    inference_eviction_ttl_mins: int | None = None
    max_inference_id_num_per_rank: int = 0

    def __post_init__(self) -> None:
        if self.inference_eviction_ttl_mins is None:
            self.inference_eviction_ttl_mins = self.eviction_ttl_mins


@dataclass
class CountTimestampMixedEvictionPolicy(VirtualTableEvictionPolicy):
    """Evict by count and age together. Refused (one rule per table: pick LFU or TTL)."""

    training_id_eviction_trigger_count: int = 0
    eviction_threshold: int = 15
    decay_rate: float = 0.99
    eviction_ttl_mins: int = 24 * 60
    inference_eviction_threshold: int | None = None
    inference_eviction_ttl_mins: int | None = None

    def __post_init__(self) -> None:
        if self.inference_eviction_ttl_mins is None:
            self.inference_eviction_ttl_mins = self.eviction_ttl_mins
        if self.inference_eviction_threshold is None:
            self.inference_eviction_threshold = self.eviction_threshold


@dataclass
class FeatureL2NormBasedEvictionPolicy(VirtualTableEvictionPolicy):
    """Evict rows of small L2 norm. Refused, unless `eviction_threshold=0.0` (no eviction)."""

    training_id_eviction_trigger_count: int = 0
    eviction_threshold: float = 0.0
    inference_eviction_threshold: float | None = None

    def __post_init__(self) -> None:
        if self.inference_eviction_threshold is None:
            self.inference_eviction_threshold = self.eviction_threshold


@dataclass
class NoEvictionPolicy(VirtualTableEvictionPolicy):
    """Never evict: a full table rejects new ids (they read a zero row)."""


_PICK = (
    "use CountBasedEvictionPolicy (LFU), TimestampBasedEvictionPolicy with "
    "dynamic=DynamicTableConfig(ttl_steps=N) (TTL), NoEvictionPolicy, or leave the policy unset "
    "and give dynamic=DynamicTableConfig(eviction='LRU' | 'LFU' | 'TTL' | 'NONE')"
)


def _count(where: str, name: str, value: object, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{where} {name} must be an int >= {minimum}, got {value!r}")
    return value


def _mapped_eviction(table: str, policy: object) -> tuple[EvictionPolicy, bool]:
    """(shardrec eviction, needs ttl_steps) of `policy`; ValueError/TypeError with the fix."""
    where = f"table {table!r}: virtual_table_eviction_policy {type(policy).__name__}"
    if not isinstance(policy, VirtualTableEvictionPolicy):
        raise TypeError(
            f"table {table!r}: virtual_table_eviction_policy must be a "
            f"VirtualTableEvictionPolicy from shardrec.modules.embedding_configs or None, got "
            f"{policy!r}; {_PICK}"
        )
    if hasattr(policy, "training_id_eviction_trigger_count"):
        _count(
            where, "training_id_eviction_trigger_count", policy.training_id_eviction_trigger_count
        )
    kind = type(policy)
    if kind is NoEvictionPolicy:
        return EvictionPolicy.NONE, False
    if kind is CountBasedEvictionPolicy:
        assert isinstance(policy, CountBasedEvictionPolicy)
        threshold = _count(where, "eviction_threshold", policy.eviction_threshold)
        rate = policy.decay_rate
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 < rate <= 1.0:
            raise ValueError(f"{where} decay_rate must be a number in (0, 1], got {rate!r}")
        return (EvictionPolicy.LFU if threshold else EvictionPolicy.NONE), False
    if kind is TimestampBasedEvictionPolicy:
        assert isinstance(policy, TimestampBasedEvictionPolicy)
        ttl = _count(where, "eviction_ttl_mins", policy.eviction_ttl_mins)
        return (EvictionPolicy.TTL, True) if ttl else (EvictionPolicy.NONE, False)
    if kind is FeatureScoreBasedEvictionPolicy and not policy.enable_eviction:  # type: ignore[attr-defined]
        return EvictionPolicy.NONE, False
    if kind is FeatureL2NormBasedEvictionPolicy and policy.eviction_threshold == 0.0:  # type: ignore[attr-defined]
        return EvictionPolicy.NONE, False
    if kind in (
        CountTimestampMixedEvictionPolicy,
        FeatureScoreBasedEvictionPolicy,
        FeatureL2NormBasedEvictionPolicy,
    ):
        raise ValueError(
            f"{where} is not supported: shardrec's raw-id tables evict by one rule (LRU, LFU or "
            f"TTL over training steps); {_PICK} ({_DOCS})"
        )
    raise ValueError(f"{where} is not a policy shardrec knows; {_PICK} ({_DOCS})")


def check_policy(table: str, policy: object) -> None:
    """Raise naming `table`, the value and the fix when `policy` (a config's
    `virtual_table_eviction_policy`, None allowed) has bad values or cannot run."""
    if policy is not None:
        _mapped_eviction(table, policy)


def virtual_dynamic_config(
    table: str, policy: object, dynamic: DynamicTableConfig | None
) -> DynamicTableConfig:
    """The `DynamicTableConfig` of a virtual table: `dynamic` (or the defaults) with the
    eviction `policy` maps to; its capacity stays as given (None: see `as_dynamic_table`).
    Raises naming `table`, the value and the fix; does not validate the capacity."""
    if dynamic is not None and not isinstance(dynamic, DynamicTableConfig):
        raise TypeError(
            f"table {table!r}: dynamic must be a DynamicTableConfig or None, got {dynamic!r}"
        )
    base = dynamic if dynamic is not None else DynamicTableConfig(eviction=EvictionPolicy.NONE)
    if policy is None:
        return base
    eviction, needs_ttl = _mapped_eviction(table, policy)
    names = {e.value for e in EvictionPolicy}
    given = EvictionPolicy(str(base.eviction)) if str(base.eviction) in names else None
    if dynamic is None:
        given = None
    if given is not None and given not in (EvictionPolicy.LRU, eviction):
        raise ValueError(
            f"table {table!r}: dynamic eviction {given.value} disagrees with "
            f"virtual_table_eviction_policy {type(policy).__name__} (runs as {eviction.value}); "
            "give the eviction in one place: drop dynamic's eviction or the policy"
        )
    if needs_ttl and base.ttl_steps is None:
        raise ValueError(
            f"table {table!r}: TimestampBasedEvictionPolicy(eviction_ttl_mins="
            f"{policy.eviction_ttl_mins}) counts wall-clock minutes; shardrec's TTL counts "  # type: ignore[attr-defined]
            "training steps: pass dynamic=DynamicTableConfig(ttl_steps=N) beside it (N: the "
            f"steps a row may go unseen) ({_DOCS})"
        )
    return dataclasses.replace(base, eviction=eviction)


def _checked_buckets(table: str, buckets: int | None, capacity: int) -> int | None:
    """`total_num_buckets` of the raw-id table: each bucket of the id space gets an equal
    share of the capacity's slots, so the buckets must divide it (ValueError with the fix)."""
    if buckets is not None and capacity % buckets:
        raise ValueError(
            f"table {table!r}: capacity {capacity} is not a multiple of total_num_buckets "
            f"{buckets}; each bucket of the id space holds an equal share of the slots: pick a "
            f"capacity that is a multiple of {buckets} (e.g. "
            f"{-(-capacity // buckets) * buckets}) ({_DOCS})"
        )
    return buckets


def _init_bounds(config: BaseEmbeddingConfig) -> tuple[float, float]:
    """TorchRec's init range of a virtual table: the config's bounds where given, else
    +-sqrt(1 / 4e9) for FP32 rows and +-0.001 for narrower ones (not the id space's
    +-sqrt(1 / num_embeddings), which is ~0 for a 2^50 space)."""
    wide = str(config.data_type) == "FP32"
    default = math.sqrt(1 / VIRTUAL_INIT_SPACE) if wide else 0.001
    low = config.weight_init_min if config.weight_init_min is not None else -default
    high = config.weight_init_max if config.weight_init_max is not None else default
    return low, high


def as_dynamic_table(config: BaseEmbeddingConfig, *, meta: bool = False) -> BaseEmbeddingConfig:
    """The table a `use_virtual_table=True` config runs as (module docstring): a raw-id table
    of `dynamic.capacity` slots when a capacity is given; a plain table of the whole id space
    when none is given and the space holds at most `MAX_IMPLICIT_CAPACITY` ids (the same
    training: every id of the space has its row, nothing is ever evicted); else `config`
    itself on the meta device when it has no `dynamic` either (plan only), and a ValueError
    naming the fix otherwise. A config that is not virtual is returned as is."""
    if not config.use_virtual_table:
        return config
    space = config.num_embeddings
    given = config.dynamic
    capacity = given.capacity if given is not None else None
    if capacity is None and space > MAX_IMPLICIT_CAPACITY:
        if meta and given is None:
            return config
        raise ValueError(
            f"table {config.name!r}: use_virtual_table=True with num_embeddings {space} (the "
            "virtual id space) needs a capacity: shardrec's raw-id tables hold a fixed number "
            "of slots; pass dynamic=DynamicTableConfig(capacity=N) beside it (N: the ids the "
            f"table keeps at once; num_embeddings may stay {space}), or build the module on "
            f"the meta device to plan only ({_DOCS})"
        )
    low, high = _init_bounds(config)
    if given is None:
        return dataclasses.replace(
            config,
            weight_init_min=low,
            weight_init_max=high,
            use_virtual_table=False,
            virtual_table_eviction_policy=None,
        )
    slots = capacity if capacity is not None else space
    dynamic = virtual_dynamic_config(config.name, config.virtual_table_eviction_policy, given)
    return dataclasses.replace(
        config,
        num_embeddings=slots,
        total_num_buckets=_checked_buckets(config.name, config.total_num_buckets, slots),
        id_space=space if config.total_num_buckets is not None else None,
        virtual_table_eviction_policy=None,
        dynamic=dataclasses.replace(dynamic, capacity=slots),
        weight_init_min=low,
        weight_init_max=high,
        use_virtual_table=False,
    )


def resolve_virtual_tables(tables: list[Any], device: torch.device | str | None) -> list[Any]:
    """`as_dynamic_table` of each table, for a module built on `device`."""
    where = torch.device(device) if device is not None else torch.get_default_device()
    return [as_dynamic_table(t, meta=where.type == "meta") for t in tables]
