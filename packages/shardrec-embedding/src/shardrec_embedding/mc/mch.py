"""`MCHManagedCollisionModule`: sorted managed-collision hashing (TorchRec's "sort ZCH").

State: `zch_size` slots, each a (raw id, row) pair, kept sorted by raw id so that a batch is
remapped by one `searchsorted`. Empty slots hold the raw id int64 max. The last slot (largest
raw id) is reserved: its row, `output_global_offset + zch_size - 1`, is what every id without a
slot reads, so `zch_size - 1` ids can own a row.

    _mch_sorted_raw_ids:        [ 3   8   41  max  max ]   (sorted; max = empty)
    _mch_remapped_ids_mapping:  [ 2   0   1   3    4   ]   (row of each slot)

Training: every forward appends its ids to a window, and every `eviction_interval` forwards
the window's distinct ids compete with the held ids under the eviction policy (the round:
mc/mch_round.py, a mixin of this module). Evaluation: lookups only. Remapping reads the state
*after* this forward's eviction round.

`_mch_remap` (the lookup by binary search) stays in this module, beside `remap`, its caller:
`torch.fx.wrap` makes fx's tracer replace the function by a graph leaf only in the globals of
the module that wrapped it (TorchRec's `test_fx_jit_script_not_training` traces and scripts an
MCH module), so a caller in another module would trace into it.
"""

import logging
from collections.abc import Callable

import torch

from shardrec_embedding.mc.base import ManagedCollisionModule
from shardrec_embedding.mc.mch_round import MCHRound, MCHStats
from shardrec_embedding.mc.policies import MCHEvictionPolicy
from shardrec_embedding.mc.sorted_index import SortedSlotIndex
from shardrec_jagged import JaggedTensor

__all__ = ["MCHManagedCollisionModule", "MCHStats"]

_LOG = logging.getLogger(__name__)
_INT64_MAX = torch.iinfo(torch.int64).max

InputHashFunc = Callable[[torch.Tensor, int], torch.Tensor]


def _int_ids(name: str, values: torch.Tensor) -> torch.Tensor:
    """`values` as int64 ids; float (and bool) ids raise."""
    if values.is_floating_point() or values.is_complex() or values.dtype == torch.bool:
        raise TypeError(
            f"feature {name} has {values.dtype} ids; raw ids must be integers (int64 or int32)"
        )
    return values.to(torch.int64)


def _with_rows(feature: JaggedTensor, rows: torch.Tensor) -> JaggedTensor:
    """`feature` with `rows` for its ids, in the ids' dtype."""
    return JaggedTensor(
        values=rows.to(feature.values().dtype),
        lengths=feature.lengths(),
        offsets=feature.offsets(),
        weights=feature.weights_or_none(),
    )


@torch.fx.wrap
def _mch_remap(
    features: dict[str, JaggedTensor],
    mch_sorted_raw_ids: torch.Tensor,
    mch_remapped_ids_mapping: torch.Tensor,
    zch_index: int,
) -> dict[str, JaggedTensor]:
    """Each feature's ids -> the row of their slot, or `zch_index` for ids without one."""
    remapped: dict[str, JaggedTensor] = {}
    for name, feature in features.items():
        ids = _int_ids(name, feature.values())
        slot = torch.searchsorted(mch_sorted_raw_ids[:-1], ids)
        hit = mch_sorted_raw_ids[slot] == ids
        rows = torch.where(hit, mch_remapped_ids_mapping[slot], zch_index)
        remapped[name] = _with_rows(feature, rows)
    return remapped


class MCHManagedCollisionModule(MCHRound, ManagedCollisionModule):
    """Sorted-array managed collisions with a pluggable eviction policy (TorchRec's MCH module).

    Args:
        zch_size: rows of the table (`num_embeddings`); `zch_size - 1` raw ids can own one.
        device: where the slots live (`meta`: nothing is allocated; for planning).
        eviction_policy: `LFU_EvictionPolicy`, `LRU_EvictionPolicy`,
            `DistanceLFU_EvictionPolicy` or a subclass of `MCHEvictionPolicy`.
        eviction_interval: forwards (training) between admission / eviction rounds, >= 1.
        input_hash_size: range of the raw ids, passed to `input_hash_func`; also the id range
            row-wise sharding splits (default 2**63 - 1: any non-negative int64).
        input_hash_func: `f(ids, input_hash_size) -> ids` applied before everything else.
        mch_size, mch_hash_func: deprecated in TorchRec and ignored (a warning says so).
        name: the table's name, for messages.
        output_global_offset: first row of this module's range (row-wise shards).
        output_segments: row ranges of all row-wise shards (set by the sharder).
        buckets: number of uniform buckets of the range (set by the sharder).

    Ids of any int64 value are accepted (an id equal to int64 max reads the miss row); float ids
    raise `TypeError`.
    """

    _mch_sorted_raw_ids: torch.Tensor
    _mch_remapped_ids_mapping: torch.Tensor
    _mch_metadata: dict[str, torch.Tensor]
    _mch_slots: torch.Tensor
    _delimiter: torch.Tensor
    _history_metadata: dict[str, torch.Tensor]
    # {feature: (its ids, their rows)} found by this forward's round, for remap
    _round_rows: dict[str, tuple[torch.Tensor, torch.Tensor]]
    _round_stamp: tuple[int, int]

    def __init__(
        self,
        zch_size: int,
        device: torch.device,
        eviction_policy: MCHEvictionPolicy,
        eviction_interval: int,
        input_hash_size: int = (2**63) - 1,
        input_hash_func: InputHashFunc | None = None,
        mch_size: int | None = None,
        mch_hash_func: InputHashFunc | None = None,
        name: str | None = None,
        output_global_offset: int = 0,
        output_segments: list[int] | None = None,
        buckets: int = 1,
    ) -> None:
        table = f"table {name!r}" if name else "MCHManagedCollisionModule"
        if isinstance(zch_size, bool) or not isinstance(zch_size, int) or zch_size <= 0:
            raise ValueError(f"{table}: zch_size must be a positive int (rows), got {zch_size!r}")
        if (
            isinstance(eviction_interval, bool)
            or not isinstance(eviction_interval, int)
            or eviction_interval <= 0
        ):
            raise ValueError(
                f"{table}: eviction_interval must be an int >= 1 (forwards between eviction "
                f"rounds), got {eviction_interval!r}"
            )
        if not isinstance(eviction_policy, MCHEvictionPolicy):
            raise TypeError(
                f"{table}: eviction_policy must be an MCHEvictionPolicy (LFU_EvictionPolicy(), "
                f"LRU_EvictionPolicy(), DistanceLFU_EvictionPolicy()), got "
                f"{type(eviction_policy).__name__}"
            )
        if (
            isinstance(input_hash_size, bool)
            or not isinstance(input_hash_size, int)
            or input_hash_size < 0
        ):
            raise ValueError(
                f"{table}: input_hash_size must be an int >= 0 (the raw ids' range; default "
                f"2**63 - 1), got {input_hash_size!r}"
            )
        if output_segments is None:
            output_segments = [output_global_offset, output_global_offset + zch_size]
        super().__init__(device=device, output_segments=output_segments)
        if mch_size is not None or mch_hash_func is not None:
            _LOG.warning("MCHManagedCollisionModule: mch_size / mch_hash_func are ignored")
        self._init_output_segments_tensor: torch.Tensor = self._output_segments_tensor
        self._name = name
        self._zch_size = zch_size
        self._input_hash_size = input_hash_size
        self._input_hash_func = input_hash_func
        self._output_global_offset = output_global_offset
        self._eviction_interval = eviction_interval
        self._eviction_policy = eviction_policy
        self._buckets = buckets
        self._current_iter = -1
        self._last_eviction_iter = -1
        self._evicted = False
        self._evicted_emb_indices = torch.empty((0,), dtype=torch.int64, device=self.device)
        self._round_rows = {}
        self._round_stamp = (-1, -1)
        # rows of later rounds not yet consumed by evict(), merged into the above lazily
        self._pending_rows: list[torch.Tensor] = []
        self._input_history_buffer_size = -1
        self._current_history_buffer_offset = 0
        self._mch_metadata = {}
        self._history_metadata = {}
        self.stats = MCHStats()
        self._init_buffers()
        self._index = (
            SortedSlotIndex(zch_size, output_global_offset)
            if SortedSlotIndex.worthwhile() and self.device.type == "cpu"
            else None
        )

    def _init_buffers(self) -> None:
        device, size = self.device, self._zch_size
        full = torch.full((size,), _INT64_MAX, dtype=torch.int64, device=device)
        self.register_buffer("_mch_sorted_raw_ids", full)
        self.register_buffer(
            "_mch_slots", torch.tensor([size - 1], dtype=torch.int64, device=device), False
        )
        self.register_buffer(
            "_delimiter", torch.tensor([_INT64_MAX], dtype=torch.int64, device=device), False
        )
        start = self._output_global_offset
        self.register_buffer(
            "_mch_remapped_ids_mapping",
            torch.arange(start, start + size, dtype=torch.int64, device=device),
        )
        for info in self._eviction_policy.metadata_info:
            if info.is_mch_metadata:
                buffer = torch.zeros((size,), dtype=torch.int64, device=device)
                self.register_buffer("_mch_" + info.metadata_name, buffer)
                self._mch_metadata[info.metadata_name] = buffer

    def _init_history_buffers(self, num_ids: int) -> None:
        size = int(num_ids * self._eviction_interval * 1.25)
        self._input_history_buffer_size = size
        self._history_accumulator = torch.empty(size, dtype=torch.int64, device=self.device)
        for info in self._eviction_policy.metadata_info:
            if info.is_history_metadata:
                buffer = torch.zeros(size, dtype=torch.int64, device=self.device)
                self.register_buffer("_history_" + info.metadata_name, buffer, persistent=False)
                self._history_metadata[info.metadata_name] = buffer

    # -- the ManagedCollisionModule interface -------------------------------------------------

    def preprocess(self, features: dict[str, JaggedTensor]) -> dict[str, JaggedTensor]:
        if self._input_hash_func is None:
            return features
        return {
            name: JaggedTensor(
                values=self._input_hash_func(jt.values(), self._input_hash_size),
                lengths=jt.lengths(),
                offsets=jt.offsets(),
                weights=jt.weights_or_none(),
            )
            for name, jt in features.items()
        }

    def profile(self, features: dict[str, JaggedTensor]) -> dict[str, JaggedTensor]:
        self._round_rows = {}
        if not self.training:
            return features
        self._check_ids(features)
        if self._current_iter == -1:
            self._current_iter = int(self._current_iter_tensor.item())
            self._last_eviction_iter = self._current_iter
        self._current_iter += 1
        self._current_iter_tensor.add_(1)
        num_ids = sum(jt.values().numel() for jt in features.values())
        if self._input_history_buffer_size == -1 and num_ids > 0:
            # sized at the first non-empty batch (TorchRec: the first batch, so an empty first
            # batch would leave a window of 0 ids and admit nothing ever)
            self._init_history_buffers(num_ids)
        spans: dict[str, tuple[torch.Tensor, int, int]] = {}
        if self._input_history_buffer_size > 0:
            for name, jt in features.items():
                start = self._current_history_buffer_offset
                self._record(jt.values())
                if self._current_history_buffer_offset - start == jt.values().numel():
                    spans[name] = (jt.values(), start, self._current_history_buffer_offset)
        if self._current_iter - self._last_eviction_iter == self._eviction_interval:
            if self._input_history_buffer_size > 0:
                self._coalesce_history(spans)
            self._last_eviction_iter = self._current_iter
        return features

    def remap(
        self,
        features: dict[str, JaggedTensor],
        mutate_miss_lengths: bool = True,
        write_weights: torch.Tensor | None = None,
    ) -> dict[str, JaggedTensor]:
        round_rows, self._round_rows = self._round_rows, {}
        if (
            round_rows
            and self._round_stamp == self._state_stamp()
            and all(
                name in round_rows and round_rows[name][0] is feature.values()
                for name, feature in features.items()
            )
        ):
            # this forward's round already found the row of every id of these features
            return {
                name: _with_rows(feature, round_rows[name][1]) for name, feature in features.items()
            }
        index = self._ready_index()
        if index is not None:
            return self._indexed_remap(features, index)
        return _mch_remap(
            features,
            self._mch_sorted_raw_ids,
            self._mch_remapped_ids_mapping,
            self._output_global_offset + self._zch_size - 1,
        )

    def forward(
        self,
        features: dict[str, JaggedTensor],
        mutate_miss_lengths: bool = True,
    ) -> dict[str, JaggedTensor]:
        features = self.preprocess(features)
        features = self.profile(features)
        return self.remap(features)

    def _indexed_remap(
        self, features: dict[str, JaggedTensor], index: SortedSlotIndex
    ) -> dict[str, JaggedTensor]:
        """`_mch_remap` by the hash index: one probe per id instead of a binary search."""
        miss_row = self._output_global_offset + self._zch_size - 1
        remapped: dict[str, JaggedTensor] = {}
        for name, feature in features.items():
            rows = index.rows(_int_ids(name, feature.values()))
            remapped[name] = _with_rows(feature, rows.masked_fill_(rows < 0, miss_row))
        return remapped

    @torch.no_grad()
    def evict(self) -> torch.Tensor | None:
        if not self._evicted:
            return None
        self._evicted = False
        self._merge_pending_rows()
        return self._evicted_emb_indices

    def output_size(self) -> int:
        return self._zch_size

    def input_size(self) -> int:
        return self._input_hash_size

    def buckets(self) -> int:
        return self._buckets

    def open_slots(self) -> torch.Tensor:
        held = torch.searchsorted(self._mch_sorted_raw_ids, self._delimiter)
        return self._mch_slots - held

    def validate_state(self) -> None:
        start = self._output_global_offset
        end = start + self._zch_size
        segments = self._output_segments_tensor
        if not (bool((segments == start).any()) and bool((segments == end).any())):
            raise ValueError(
                f"{self._describe()}: a shard owning rows [{start}, {end}) cannot be built from "
                f"the loaded output segments {segments[segments >= 0].tolist()}; load a "
                "checkpoint saved with the same row-wise layout"
            )
        self._output_segments_tensor = self._init_output_segments_tensor
        self._sort_mch_buffers()

    def rebuild_with_output_id_range(
        self,
        output_id_range: tuple[int, int],
        output_segments: list[int],
        device: torch.device | None = None,
    ) -> "MCHManagedCollisionModule":
        return type(self)(
            name=self._name,
            zch_size=output_id_range[1] - output_id_range[0],
            device=device or self.device,
            eviction_policy=self._eviction_policy,
            eviction_interval=self._eviction_interval,
            input_hash_size=self._input_hash_size,
            input_hash_func=self._input_hash_func,
            output_global_offset=output_id_range[0],
            output_segments=output_segments,
            buckets=len(output_segments) - 1,
        )

    def reset_inference_mode(self) -> None:
        self._evicted = False
        self._last_eviction_iter = -1

    # -- messages ------------------------------------------------------------------------------

    def _describe(self) -> str:
        return f"table {self._name!r}" if self._name else "MCHManagedCollisionModule"

    def _check_ids(self, features: dict[str, JaggedTensor]) -> None:
        for name, jt in features.items():
            dtype = jt.values().dtype
            if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
                raise TypeError(
                    f"{self._describe()}: feature {name!r} has {jt.values().dtype} ids; raw ids "
                    "must be integers (int64 or int32)"
                )
