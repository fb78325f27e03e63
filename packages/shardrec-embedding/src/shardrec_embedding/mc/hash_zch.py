"""`HashZchManagedCollisionModule`: multi-probe zero-collision hashing (TorchRec's MPZCH).

State (TorchRec's state-dict keys): `_hash_zch_identities: (Z, 1)` int64, the raw id owning each
row (-1: free; so raw id -1 is stored as -2**63, and those two ids share a row), and
`_hash_zch_metadata: (Z, 1)` int32, each row's expiry hour (with an eviction
policy). The rows are cut into `total_num_buckets` equal buckets; an id's bucket is
`id % buckets` (`input_hash_size == 0`) or `id // ceil(input_hash_size / buckets)`, and it
probes `max_probe` rows of that bucket from a hash of the id (`mc.probe`).

Training: an id keeps the row it owns; a new id takes the first free (or expired, with an
eviction policy) row of its window; evaluation and `*_readonly` features only look up. An id
that finds no row reads its window's first row (a collision; counted in `stats()`), or with
`disable_fallback=True` is dropped from the batch (its bag's length shrinks).

The probing runs in vectorized torch (`mc.probe`); it is the seam where a native kernel fits.
"""

import dataclasses
import logging

import torch

from shardrec_embedding.mc.base import ManagedCollisionModule
from shardrec_embedding.mc.hash_evictions import (
    Clock,
    HashZchEvictionConfig,
    HashZchEvictionPolicyName,
    HashZchEvictionScorer,
    get_eviction_scorer,
)
from shardrec_embedding.mc.probe import insert, lookup, probe_slots
from shardrec_jagged import JaggedTensor

__all__ = ["HashZchManagedCollisionModule", "HashZchStats"]

_LOG = logging.getLogger(__name__)
_INT64_MIN = torch.iinfo(torch.int64).min


@dataclasses.dataclass(kw_only=True)
class HashZchStats:
    """Counters since construction (training and evaluation lookups)."""

    lookups: int = 0
    hits: int = 0
    inserts: int = 0
    evictions: int = 0
    collisions: int = 0  # ids that found no row: they read a shared row (or were dropped)


class HashZchManagedCollisionModule(ManagedCollisionModule):
    """Multi-probe managed collisions (TorchRec's `HashZchManagedCollisionModule`).

    Args (TorchRec's; the ones TorchRec marks internal or experimental are accepted and noted):
        zch_size: rows of this module (a multiple of `total_num_buckets`).
        device: where identities and metadata live.
        total_num_buckets: buckets of the row range (row-wise shards own whole buckets).
        max_probe: rows an id probes (capped at the bucket size).
        input_hash_size: range of raw ids; 0: any int64 (bucket by modulo).
        output_segments, start_bucket, end_bucket: set by the sharder.
        is_inference: lookups only.
        name: the table's name, for messages and metrics.
        eviction_policy_name, eviction_config: see `mc.hash_evictions`; None: no eviction.
        disable_fallback: drop ids without a row instead of reading a shared one.
        read_only_suffix: features ending with it only look up.
        opt_in_prob, percent_reserved_slots, track_id_freq, write_runtime_meta_dim,
        tb_logging_frequency, inference_dispatch_div_train_world_size, enable_per_feature_lookups,
        no_bag, persist_hash_zch_bucket: accepted for TorchRec's signature; only the defaults are
        implemented (other values raise `NotImplementedError`).
    """

    _hash_zch_metadata: torch.Tensor | None
    _bucket_sizes: torch.Tensor
    _bucket_starts: torch.Tensor

    IDENTITY_BUFFER: str = "_hash_zch_identities"
    METADATA_BUFFER: str = "_hash_zch_metadata"
    BUCKET_BUFFER: str = "_hash_zch_bucket"

    def __init__(
        self,
        zch_size: int,
        device: torch.device,
        total_num_buckets: int,
        max_probe: int = 128,
        input_hash_size: int = 0,
        output_segments: list[int] | None = None,
        is_inference: bool = False,
        name: str | None = None,
        tb_logging_frequency: int = 0,
        eviction_policy_name: HashZchEvictionPolicyName | None = None,
        eviction_config: HashZchEvictionConfig | None = None,
        inference_dispatch_div_train_world_size: bool = False,
        start_bucket: int = 0,
        end_bucket: int | None = None,
        opt_in_prob: int = -1,
        percent_reserved_slots: float = 0,
        disable_fallback: bool = False,
        track_id_freq: bool = False,
        read_only_suffix: str = "_readonly",
        enable_per_feature_lookups: bool = False,
        no_bag: bool = False,
        write_runtime_meta_dim: int = 0,
        persist_hash_zch_bucket: bool = True,
    ) -> None:
        table = f"table {name!r}" if name else "HashZchManagedCollisionModule"
        if isinstance(zch_size, bool) or not isinstance(zch_size, int) or zch_size <= 0:
            raise ValueError(f"{table}: zch_size must be a positive int (rows), got {zch_size!r}")
        if not isinstance(total_num_buckets, int) or total_num_buckets <= 0:
            raise ValueError(
                f"{table}: total_num_buckets must be a positive int, got {total_num_buckets!r}"
            )
        if not isinstance(max_probe, int) or max_probe <= 0:
            raise ValueError(f"{table}: max_probe must be a positive int, got {max_probe!r}")
        if input_hash_size < 0:
            raise ValueError(
                f"{table}: input_hash_size must be >= 0 (0: any int64 id), got {input_hash_size}"
            )
        if output_segments is None:
            if zch_size % total_num_buckets:
                raise ValueError(
                    f"{table}: zch_size {zch_size} must be a multiple of total_num_buckets "
                    f"{total_num_buckets} (or pass output_segments)"
                )
            step = zch_size // total_num_buckets
            output_segments = [step * b for b in range(total_num_buckets + 1)]
        unsupported = {
            "opt_in_prob": (opt_in_prob, -1),
            "percent_reserved_slots": (percent_reserved_slots, 0),
            "track_id_freq": (track_id_freq, False),
            "write_runtime_meta_dim": (write_runtime_meta_dim, 0),
            "inference_dispatch_div_train_world_size": (
                inference_dispatch_div_train_world_size,
                False,
            ),
            "enable_per_feature_lookups": (enable_per_feature_lookups, False),
            "no_bag": (no_bag, False),
        }
        changed = [k for k, (v, default) in unsupported.items() if v != default]
        if changed:
            raise NotImplementedError(
                f"{table}: HashZchManagedCollisionModule arguments {changed} are not implemented "
                "in shardrec; leave them at their defaults (docs/porting.md)"
            )
        super().__init__(
            device=device,
            output_segments=output_segments,
            skip_state_validation=True,
            read_only_suffix=read_only_suffix,
        )
        self._name = name
        self._zch_size = zch_size
        self._buckets = total_num_buckets
        self._output_segments = list(output_segments)
        self._start_bucket = start_bucket
        self._end_bucket = end_bucket if end_bucket is not None else total_num_buckets
        self._max_probe = max_probe
        self._input_hash_size = input_hash_size
        self._is_inference = is_inference
        self._tb_logging_frequency = tb_logging_frequency
        self._disable_fallback = disable_fallback
        self._persist_hash_zch_bucket = persist_hash_zch_bucket
        eviction_policy_name = _policy_name(table, eviction_policy_name)
        _check_config(table, eviction_config)
        self._eviction_policy_name = eviction_policy_name
        self._eviction_config = eviction_config
        self._scorer: HashZchEvictionScorer | None = None
        if eviction_policy_name is not None:
            if eviction_config is None:
                raise ValueError(
                    f"{table}: eviction_policy_name={eviction_policy_name.value} needs an "
                    "eviction_config (HashZchEvictionConfig(features=..., single_ttl=...))"
                )
            self._scorer = get_eviction_scorer(eviction_policy_name, eviction_config)
        self._evicted_indices: list[torch.Tensor] = []
        self.stats = HashZchStats()
        # per bucket of this module: [first row, rows] relative to its first row
        sizes = torch.diff(torch.tensor(self._output_segments, dtype=torch.int64))
        starts = torch.tensor(self._output_segments[:-1], dtype=torch.int64)
        self._offset = int(self._output_segments[self._start_bucket])
        # TorchRec's attribute: the first global row of this module, None when it is 0.
        self._output_global_offset_tensor: torch.Tensor | None = (
            torch.tensor([self._offset], dtype=torch.int64) if self._offset > 0 else None
        )
        self.register_buffer("_bucket_sizes", sizes.to(self.device), persistent=False)
        self.register_buffer("_bucket_starts", (starts - self._offset).to(self.device), False)
        self._hash_zch_identities = torch.nn.Parameter(
            torch.full((zch_size, 1), -1, dtype=torch.int64, device=self.device),
            requires_grad=False,
        )
        # only with an eviction policy (TorchRec's state-dict keys)
        metadata = torch.full((zch_size, 1), -1, dtype=torch.int32, device=self.device)
        self.register_buffer(self.METADATA_BUFFER, metadata if self._scorer is not None else None)
        self._kept_metadata: torch.Tensor | None = None  # set aside by reset_inference_mode
        self._register_load_state_dict_pre_hook(_drop_metadata_in_inference, with_module=True)  # type: ignore[no-untyped-call]  # untyped in torch
        self.register_buffer(
            self.BUCKET_BUFFER,
            torch.tensor([[total_num_buckets]]),
            persistent=persist_hash_zch_bucket,
        )

    # -- the ManagedCollisionModule interface -------------------------------------------------

    def preprocess(self, features: dict[str, JaggedTensor]) -> dict[str, JaggedTensor]:
        return features

    def profile(self, features: dict[str, JaggedTensor]) -> dict[str, JaggedTensor]:
        return features

    def forward(
        self,
        features: dict[str, JaggedTensor],
        mutate_miss_lengths: bool = True,
    ) -> dict[str, JaggedTensor]:
        return self.remap(features, mutate_miss_lengths=mutate_miss_lengths)

    @torch.no_grad()
    def remap(
        self,
        features: dict[str, JaggedTensor],
        mutate_miss_lengths: bool = True,
        write_weights: torch.Tensor | None = None,
    ) -> dict[str, JaggedTensor]:
        if write_weights is not None:
            raise NotImplementedError("HashZch write_weights (runtime metadata) is not implemented")
        return {
            name: self._remap_one(name, jt, mutate_miss_lengths) for name, jt in features.items()
        }

    def evict(self) -> torch.Tensor | None:
        if not self._evicted_indices:
            return None
        rows: torch.Tensor = torch.unique(torch.cat(self._evicted_indices)) + self._offset
        self._evicted_indices = []
        return rows

    def output_size(self) -> int:
        return self._zch_size

    def input_size(self) -> int:
        return self._input_hash_size

    def buckets(self) -> int:
        return self._buckets

    def validate_state(self) -> None:
        return None

    def open_slots(self) -> torch.Tensor:
        """Free rows, `(1,)` (TorchRec 1.8 returns `[0]` for this module)."""
        return (self._hash_zch_identities == -1).sum().reshape(1)

    def rebuild_with_output_id_range(
        self,
        output_id_range: tuple[int, int],
        output_segments: list[int] | None = None,
        device: torch.device | None = None,
    ) -> "HashZchManagedCollisionModule":
        segments = self._output_segments
        if output_id_range[0] not in segments or output_id_range[1] not in segments:
            raise ValueError(
                f"{self._describe()}: rows [{output_id_range[0]}, {output_id_range[1]}) do not "
                f"start and end on bucket boundaries {segments}; give each rank whole buckets"
            )
        return type(self)(
            zch_size=output_id_range[1] - output_id_range[0],
            device=device or self.device,
            total_num_buckets=self._buckets,
            max_probe=self._max_probe,
            input_hash_size=self._input_hash_size,
            output_segments=segments,
            is_inference=self._is_inference,
            name=self._name,
            eviction_policy_name=self._eviction_policy_name,
            eviction_config=self._eviction_config,
            start_bucket=segments.index(output_id_range[0]),
            end_bucket=segments.index(output_id_range[1]),
            disable_fallback=self._disable_fallback,
            read_only_suffix=self._read_only_suffix,
        )

    def reset_inference_mode(self) -> None:
        """Lookups only from now on (`eval()`; no id is admitted or evicted). As TorchRec's, the
        eviction metadata leaves the state dict (a loaded state's is ignored) until
        `reset_training_mode()`."""
        self.reset_intrainer_bulk_eval_mode()
        if self._hash_zch_metadata is not None:
            self._kept_metadata = self._hash_zch_metadata
            self._hash_zch_metadata = None

    def reset_intrainer_bulk_eval_mode(self) -> None:
        """TorchRec's in-trainer evaluation mode: lookups only (the state dict unchanged)."""
        self._is_inference = True
        self.eval()

    def reset_training_mode(self) -> None:
        """Admission (and eviction) again, with the metadata `reset_inference_mode` set aside."""
        self._is_inference = False
        self.train()
        if self._kept_metadata is not None:
            self._hash_zch_metadata = self._kept_metadata
            self._kept_metadata = None

    @property
    def max_probe(self) -> int:
        """Rows an id probes."""
        return self._max_probe

    @property
    def disable_fallback(self) -> bool:
        """Whether ids that find no row are dropped (else they read their window's first row)."""
        return self._disable_fallback

    @property
    def eviction_flag(self) -> int:
        """TorchRec's kernel code of the eviction policy: 1 for LRU, else 0."""
        return int(self._eviction_policy_name == HashZchEvictionPolicyName.LRU_EVICTION)

    @property
    def is_sharded(self) -> bool:
        """Whether this module holds only some of the table's buckets (a row-wise shard)."""
        return self._end_bucket - self._start_bucket < self._buckets

    # -- lookups -------------------------------------------------------------------------------

    def _describe(self) -> str:
        return f"table {self._name!r}" if self._name else "HashZchManagedCollisionModule"

    def _check_range(self, name: str, ids: torch.Tensor) -> None:
        if self._input_hash_size == 0 or ids.numel() == 0:
            return
        out = (ids < 0) | (ids >= self._input_hash_size)
        if bool(out.any()):
            raise IndexError(
                f"{self._describe()}: feature {name!r} id {ids[out][0].item()} is outside [0, "
                f"input_hash_size={self._input_hash_size}); pass ids in range or build the "
                "module with input_hash_size=0 (any int64 id)"
            )

    def _windows(self, name: str, ids: torch.Tensor) -> torch.Tensor:
        """`(N, P)` local rows each id probes."""
        if self._input_hash_size == 0:
            bucket = torch.remainder(ids, self._buckets)
        else:
            block = -(-self._input_hash_size // self._buckets)
            bucket = torch.div(ids, block, rounding_mode="floor")
        local = bucket - self._start_bucket
        if ids.numel() and bool(
            ((local < 0) | (local >= self._end_bucket - self._start_bucket)).any()
        ):
            raise IndexError(
                f"{self._describe()}: feature {name!r} has ids of buckets outside this shard's "
                f"[{self._start_bucket}, {self._end_bucket}); route ids to the rank owning them"
            )
        sizes = self._bucket_sizes[bucket]
        probes = min(self._max_probe, int(self._bucket_sizes.min().item()))
        return probe_slots(ids, self._bucket_starts[bucket], sizes, probes)

    def _remap_one(self, name: str, jt: JaggedTensor, mutate_miss_lengths: bool) -> JaggedTensor:
        values = jt.values()
        if values.is_floating_point() or values.is_complex() or values.dtype == torch.bool:
            raise TypeError(
                f"{self._describe()}: feature {name!r} has {values.dtype} ids; raw ids must be "
                "integers (int64 or int32)"
            )
        # -1 marks a free row (TorchRec's identity format): raw id -1 is keyed as int64 min
        ids = values.to(torch.int64)
        self._check_range(name, ids)
        ids = torch.where(ids == -1, _INT64_MIN, ids)
        identities = self._hash_zch_identities.data.view(-1)
        uniq, inverse = torch.unique(ids, return_inverse=True)
        windows = self._windows(name, uniq)
        rows = lookup(identities, uniq, windows)
        writable = (
            self.training and not self._is_inference and not name.endswith(self._read_only_suffix)
        )
        if writable:
            rows = self._admit(uniq, rows, windows, jt, inverse)
        self.stats.lookups += int(ids.numel())
        hit = rows[inverse] >= 0
        self.stats.hits += int(hit.sum())
        self.stats.collisions += int((~hit).sum())
        out = torch.where(rows >= 0, rows, windows[:, 0] if windows.numel() else rows)
        remapped = (out[inverse] + self._offset).to(values.dtype)
        lengths, weights = jt.lengths(), jt.weights_or_none()
        if self._disable_fallback and not bool(hit.all()):
            remapped = remapped[hit]
            weights = None if weights is None else weights[hit]
            if mutate_miss_lengths:
                bag = torch.repeat_interleave(
                    torch.arange(lengths.numel(), device=lengths.device), lengths
                )
                lengths = torch.zeros_like(lengths).index_add_(
                    0, bag[hit], torch.ones_like(bag[hit])
                )
        return JaggedTensor(values=remapped, lengths=lengths, weights=weights)

    def _admit(
        self,
        uniq: torch.Tensor,
        rows: torch.Tensor,
        windows: torch.Tensor,
        jt: JaggedTensor,
        inverse: torch.Tensor,
    ) -> torch.Tensor:
        identities = self._hash_zch_identities.data.view(-1)
        metadata = None if self._hash_zch_metadata is None else self._hash_zch_metadata.view(-1)
        new = rows < 0
        expiry, threshold = None, -1
        if self._scorer is not None and metadata is not None:
            expiry, threshold = metadata, self._scorer.gen_threshold()
            # ids of this batch keep their rows: nothing they hold is evicted by this batch
            metadata[rows[~new]] = torch.iinfo(torch.int32).max
        got, evicted = insert(
            identities,
            uniq[new],
            windows[new],
            expiry,
            threshold,
            oldest_first=self._eviction_policy_name is HashZchEvictionPolicyName.LRU_EVICTION,
        )
        rows = rows.clone()
        rows[new] = got
        self.stats.inserts += int((got >= 0).sum())
        if evicted.numel():
            self.stats.evictions += int(evicted.numel())
            self._evicted_indices.append(evicted)
        if self._scorer is not None and metadata is not None:
            per_id = self._scorer.gen_score(jt)
            score = torch.full_like(uniq, -1, dtype=torch.int32).scatter_reduce(
                0, inverse, per_id, reduce="amax", include_self=True
            )
            held = rows >= 0
            metadata[rows[held]] = score[held]
        return rows


def _drop_metadata_in_inference(
    module: torch.nn.Module, state_dict: dict[str, object], prefix: str, *args: object
) -> None:
    """A module in inference mode (`reset_inference_mode`) ignores a loaded state's metadata."""
    if isinstance(module, HashZchManagedCollisionModule) and module._hash_zch_metadata is None:
        state_dict.pop(prefix + HashZchManagedCollisionModule.METADATA_BUFFER, None)


def _policy_name(table: str, value: object) -> HashZchEvictionPolicyName | None:
    """`value` as a policy name (its string value accepted too), or None."""
    if value is None or isinstance(value, HashZchEvictionPolicyName):
        return value
    names = [p.value for p in HashZchEvictionPolicyName]
    if value not in names:
        raise ValueError(
            f"{table}: unknown eviction_policy_name {value!r}; pass a HashZchEvictionPolicyName "
            f"({names}) or None"
        )
    return HashZchEvictionPolicyName(value)


def _check_config(table: str, config: object) -> None:
    if config is not None and not isinstance(config, HashZchEvictionConfig):
        raise TypeError(
            f"{table}: eviction_config must be a HashZchEvictionConfig(features=..., "
            f"single_ttl=...), got {type(config).__name__}"
        )


def set_clock(module: HashZchManagedCollisionModule, clock: Clock | None = None) -> None:
    """Use `clock()` (seconds) for the module's eviction hours (tests, replays)."""
    if module._scorer is not None:
        module._scorer.clock = clock
