"""`data_parallel` sharding: every rank holds the whole table and looks up its own batch.

No communication in forward. Gradients are dense and summed over ranks before they are
accumulated into `.grad` (`ReplicatedGrads`: row-sparse all-gather or dense all-reduce), so every
replica sees the gradient of the whole global batch (the same sum the sharded types' fused
updates apply) and a dense optimizer keeps the replicas identical. A table built from a `meta`
module is initialized on rank 0 and broadcast, so the replicas start identical too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

from shardrec_collectives import (
    Awaitable,
    NoWait,
    ShardingEnv,
    all_gather_pooled,
    all_reduce_sum,
    broadcast_,
)
from shardrec_embedding import PoolingType
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import ShardingType
from shardrec_sharding.layout import Segment
from shardrec_sharding.lookup import LocalLookup, LookupTable
from shardrec_sharding.strategies._local import consecutive_columns, held_lookup
from shardrec_sharding.types import DistInput, LocalBatch, SequenceInput, StrategyArgs


class ReplicatedGrads:
    """Sums the gradients of replicated tables over the ranks, row-sparse when that is smaller.

    A batch touches few rows of a large table, so each table's gradient hook (registered on the
    weight, so it sees this backward's contribution before it is accumulated into `.grad`)
    exchanges only the rows the forward passes since the last backward looked up: every rank
    all-gathers every rank's touched rows (ids, then values) and adds them, in rank order, into
    its gradient: the same sum on every rank, so the replicas stay identical. When the touched
    rows of all ranks exceed half the table (or were not recorded), one dense `all_reduce_sum`
    moves fewer bytes. Every rank builds the same autograd graph, so the hooks run in the same
    order everywhere and their collectives match up.
    """

    _MAX_PENDING = 16  # forwards without a backward (e.g. evaluation with grad on) -> go dense

    def __init__(self, env: ShardingEnv) -> None:
        self.env = env
        self._touched: dict[str, list[Tensor] | None] = {}

    def note(self, table: str, ids: Tensor) -> None:
        """Record that a forward looked up `ids` (table-local rows) of `table`."""
        if not torch.is_grad_enabled():
            return
        pending = self._touched.setdefault(table, [])
        if pending is None:
            return
        if len(pending) >= self._MAX_PENDING:
            self._touched[table] = None
            return
        pending.append(ids)

    def hook(self, table: str) -> Callable[[Tensor], Tensor]:
        """The gradient hook of `table`'s weight."""
        env = self.env

        def reduce(grad: Tensor) -> Tensor:
            pending = self._touched.get(table)
            self._touched[table] = []
            with torch.no_grad():
                if pending is None or grad.dim() != 2:
                    return all_reduce_sum(env, grad).wait()
                rows = (
                    torch.unique(torch.cat(pending)).long()
                    if pending
                    else grad.new_empty(0, dtype=torch.int64)
                )
                counts = torch.zeros(env.world_size, dtype=torch.int64, device=grad.device)
                counts[env.rank] = rows.numel()
                per_rank = [int(c) for c in all_reduce_sum(env, counts).wait().tolist()]
                if 2 * sum(per_rank) >= grad.shape[0]:
                    return all_reduce_sum(env, grad).wait()
                # Padded to the largest count with zero rows added to row 0 (a no-op), so the
                # all-gathers are even: uneven ones unpad through a boolean mask, measured at
                # a third of this hook's time.
                biggest = max(per_rank)
                pad = biggest - rows.numel()
                padded_rows = torch.nn.functional.pad(rows, (0, pad))
                local = grad.index_select(0, padded_rows)
                if pad:
                    local[rows.numel() :] = 0.0
                even = [biggest] * env.world_size
                ids = all_gather_pooled(env, padded_rows.unsqueeze(1), even)
                values = all_gather_pooled(env, local, even)
                all_ids = ids.wait().squeeze(1)
                all_values = values.wait()
                # Rows outside `rows` are zero in this backward's contribution. `grad` is this
                # table's own slice of the lookup's gradient buffer, consumed only here, so it
                # is updated in place (a copy would cost a table-sized write per step).
                grad.index_fill_(0, rows, 0.0)
                return grad.index_add_(0, all_ids, all_values)

        return reduce


def replicate(
    env: ShardingEnv, tables: Sequence[LookupTable], lookup: LocalLookup
) -> ReplicatedGrads:
    """Make replicated tables start identical (a `meta` module's are initialized on rank 0 and
    broadcast) and sum their gradients over the ranks."""
    grads = ReplicatedGrads(env)
    modules = lookup.table_modules()
    for table in tables:
        weight = modules[table.local.name].weight
        assert isinstance(weight, Tensor)
        if table.weight is None:
            broadcast_(env, weight.data, src=0)
        if env.world_size > 1:
            weight.register_hook(grads.hook(table.local.name))  # type: ignore[no-untyped-call]  # untyped in torch's stubs
    return grads


class _Replicated:
    """What both data_parallel strategies share: a local lookup over the whole tables and their
    replicated gradients, told which ids each forward looked up."""

    carries_errors = False

    def __init__(self, args: StrategyArgs, pooling: PoolingType | None) -> None:
        assert args.sharding_type is ShardingType.DATA_PARALLEL, args.sharding_type
        self.sharding_type: ShardingType = args.sharding_type
        self.env = args.env
        self.segments: list[Segment] = [s for t in args.tables for s in t.segments]
        # data_parallel places the whole table on every rank: every segment has its table
        self.lookup, local_tables = held_lookup(args, self.segments, pooling)
        assert len(local_tables) == len(args.tables)
        self._segment_tables = [t.name for t in args.tables for _ in t.segments]
        self._grads = replicate(args.env, local_tables, self.lookup)

    def _note_ids(self, kjt: KeyedJaggedTensor, key_index: Sequence[int]) -> None:
        """Hands each segment's ids of this forward to its table's gradient exchange."""
        values, offsets = kjt.values(), kjt.offset_per_key()
        for table, k in zip(self._segment_tables, key_index, strict=True):
            self._grads.note(table, values[offsets[k] : offsets[k + 1]])


class DataParallelSharding(_Replicated):
    """Replicated tables (see module docstring)."""

    def __init__(self, args: StrategyArgs) -> None:
        super().__init__(args, None)
        self._features = [s.feature for s in self.segments]
        columns, self.output_dim = consecutive_columns(self.segments)
        self.segment_columns: Mapping[int, Sequence[int]] = columns
        self.output_blocks: Sequence[int] = (self.output_dim,)

    def input_dist(self, batch: LocalBatch) -> Awaitable[DistInput]:
        features = batch.features
        key_index = tuple(batch.feature_pos[f] for f in self._features)
        return NoWait(
            DistInput(
                features=features, key_index=key_index, batch_size_per_rank=(features.stride(),)
            )
        )

    def compute(self, dist_input: DistInput) -> Tensor:
        kjt = dist_input.features
        self._note_ids(kjt, dist_input.key_index)
        return self.lookup(
            kjt.values(),
            kjt.lengths(),
            kjt.weights_or_none(),
            kjt.offset_per_key(),
            kjt.stride(),
            dist_input.key_index,
        )

    def output_dist(self, local: Tensor, dist_input: DistInput) -> Awaitable[Tensor]:
        return NoWait(local)


class DataParallelSequence(_Replicated):
    """Replicated tables: a local lookup (gradients as for pooled data_parallel)."""

    def __init__(self, args: StrategyArgs) -> None:
        super().__init__(args, PoolingType.SUM)

    def input_dist(self, batch: LocalBatch) -> Awaitable[SequenceInput]:
        key_index = tuple(batch.feature_pos[s.feature] for s in self.segments)
        lengths = batch.features.length_per_key()
        counts = tuple(lengths[k] for k in key_index)
        return NoWait(
            SequenceInput(features=batch.features, key_index=key_index, layout=None, counts=counts)
        )

    def compute(self, dist_input: SequenceInput) -> Tensor:
        kjt = dist_input.features
        self._note_ids(kjt, dist_input.key_index)
        rows = self.lookup.rows(kjt.values(), kjt.offset_per_key(), dist_input.key_index)
        if not rows:
            return torch.zeros(0, 0)
        return torch.cat(rows)

    def output_dist(self, local: Tensor, dist_input: SequenceInput) -> Awaitable[dict[int, Tensor]]:
        parts = torch.split(local, list(dist_input.counts))
        return NoWait({s.index: p for s, p in zip(self.segments, parts, strict=True)})
