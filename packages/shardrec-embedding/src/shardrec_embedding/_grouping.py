"""How a collection's tables are grouped for batched lookups, and how a KJT feeds each group.

A *segment* is one (table, feature) pair: one output block of a pooled collection (table order,
then feature order, as TorchRec). Tables sharing (dim, dtype, pooling) form one *group*; a
group's segments are looked up together by one `batched_lookup` call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from shardrec_embedding.batched_lookup import out_of_range_segments, shift_ids
from shardrec_embedding.configs import BaseEmbeddingConfig, DataType, PoolingType, module_dtype
from shardrec_jagged import KeyedJaggedTensor

__all__ = ["Group", "KJTInput", "Segment", "TablePlan", "embedding_names_by_table"]


@dataclass(frozen=True)
class Segment:
    """One (table, feature) pair in output order."""

    table: str
    table_index: int
    feature: str
    embedding_name: str  # `feature`, or `feature@table` when several tables read the feature
    rows: int
    dim: int
    group: int
    row_offset: int  # first row of the table in its group's packed buffer


@dataclass(frozen=True)
class Group:
    """Tables looked up by one kernel call, and the segments that read them (output order)."""

    dim: int
    dtype: torch.dtype
    pooling: PoolingType
    tables: tuple[int, ...]
    segments: tuple[int, ...]


@dataclass(frozen=True)
class GroupInput:
    """One group's lookup input built from a KJT.

    ids: `(N_g,)` int64 group rows. offsets: `(S_g * B + 1,)` bag offsets, segment-major.
    weights: `(N_g,)` per-id weights or None. lengths: `(S_g, B)` ids per bag.
    """

    ids: torch.Tensor
    offsets: torch.Tensor
    lengths: torch.Tensor
    weights: torch.Tensor | None


@dataclass(frozen=True)
class KJTInput:
    """A KJT as the groups' lookups read it (`TablePlan.read_kjt`).

    values: `(N,)` ids. weights: `(N,)` or None. lengths: `(F * B,)`. offset_per_key: F + 1
    ints. feature_index: the KJT key of each segment. num_keys: F. batch: B.
    """

    values: torch.Tensor
    weights: torch.Tensor | None
    lengths: torch.Tensor
    offset_per_key: list[int]
    feature_index: list[int]
    num_keys: int
    batch: int


def embedding_names_by_table(tables: Sequence[BaseEmbeddingConfig]) -> list[list[str]]:
    """TorchRec's output names: a feature read by several tables is `feature@table`."""
    count: dict[str, int] = {}
    for t in tables:
        for f in t.feature_names:
            count[f] = count.get(f, 0) + 1
    return [[f if count[f] == 1 else f"{f}@{t.name}" for f in t.feature_names] for t in tables]


class TablePlan:
    """Segments and groups of a list of table configs (pure Python, built once per module)."""

    def __init__(self, tables: Sequence[BaseEmbeddingConfig], poolings: Sequence[PoolingType]):
        keys: dict[tuple[int, DataType, PoolingType], list[int]] = {}
        for i, (t, pooling) in enumerate(zip(tables, poolings, strict=True)):
            key = (t.embedding_dim, DataType(t.data_type), pooling)
            keys.setdefault(key, []).append(i)
        group_of_table: dict[int, int] = {}
        row_offset: dict[int, int] = {}
        for g, members in enumerate(keys.values()):
            start = 0
            for i in members:
                group_of_table[i] = g
                row_offset[i] = start
                start += tables[i].num_embeddings
        names = embedding_names_by_table(tables)
        self.segments: list[Segment] = [
            Segment(
                table=t.name,
                table_index=i,
                feature=f,
                embedding_name=names[i][j],
                rows=t.num_embeddings,
                dim=t.embedding_dim,
                group=group_of_table[i],
                row_offset=row_offset[i],
            )
            for i, t in enumerate(tables)
            for j, f in enumerate(t.feature_names)
        ]
        self.groups: list[Group] = [
            Group(
                dim=dim,
                dtype=module_dtype(data_type),
                pooling=pooling,
                tables=tuple(members),
                segments=tuple(s for s, seg in enumerate(self.segments) if seg.group == g),
            )
            for g, ((dim, data_type, pooling), members) in enumerate(keys.items())
        ]
        self.features: list[str] = list(dict.fromkeys(s.feature for s in self.segments))
        self.min_rows = min((t.num_embeddings for t in tables), default=0)
        self.runs = _output_runs(self.segments, self.groups)
        self._feature_index_cache: dict[tuple[str, ...], list[int]] = {}

    def assemble_pooled(
        self, pooled: Sequence[torch.Tensor], batch: int, device: torch.device
    ) -> torch.Tensor:
        """The pooled output `(B, sum of dims)` in segment order from each group's lookup
        output `(S_g * B, D_g)` (segment-major, as `group_input` lays the bags out).

        Segments that are consecutive both in the output and in one group ("runs") move as one
        block, so a single group costs one permuting copy and no `cat`.
        """
        per_group: list[list[torch.Tensor]] = []
        for g, group in enumerate(self.groups):
            # One `split` (one backward node); indexing each block instead would allocate a
            # zero gradient of the whole group output per block in backward.
            by_segment = pooled[g].view(len(group.segments), batch, group.dim)
            lengths = [r.length for r in self.runs if r.group == g]
            per_group.append(list(torch.split_with_sizes(by_segment, lengths)))
        blocks = [_sample_major(per_group[r.group][r.index], batch) for r in self.runs]
        if len(blocks) == 1:
            return blocks[0]
        if blocks:
            return torch.cat(blocks, dim=1)
        return torch.zeros(batch, 0, device=device)

    def feature_indices(self, keys: Sequence[str]) -> list[int]:
        """Index into `keys` of each segment's feature; `ValueError` naming a missing one.
        Features of `keys` that no table reads are ignored."""
        cache_key = tuple(keys)
        found = self._feature_index_cache.get(cache_key)
        if found is None:
            position = {k: i for i, k in enumerate(keys)}
            missing = [f for f in self.features if f not in position]
            if missing:
                raise ValueError(
                    f"the KeyedJaggedTensor lacks feature(s) {missing} that tables "
                    f"{sorted({s.table for s in self.segments if s.feature in missing})} read; "
                    f"it has keys {list(keys)}"
                )
            found = [position[s.feature] for s in self.segments]
            self._feature_index_cache[cache_key] = found
        return found

    def check_ids(
        self, values: torch.Tensor, offset_per_key: Sequence[int], feature_index: Sequence[int]
    ) -> None:
        """`IndexError` naming feature, table, id and valid range for the first bad id.

        One `aminmax` over all ids decides when every id fits the smallest table; otherwise
        one `aminmax` per segment finds the offender.
        """
        if values.numel() == 0:
            return
        low, high = (int(x) for x in torch.stack(torch.aminmax(values)).tolist())
        if low >= 0 and high < self.min_rows:
            return
        segs = [values[offset_per_key[k] : offset_per_key[k + 1]] for k in feature_index]
        bad = out_of_range_segments(segs, [s.rows for s in self.segments])
        if bad:
            index, value = bad[0]
            s = self.segments[index]
            raise IndexError(
                f"feature {s.feature!r} id {value} is out of range for table {s.table!r} "
                f"with {s.rows} rows (valid ids: [0, {s.rows})); pass check_ids=False only "
                "for pipelines whose ids are known to be in range"
            )

    def read_kjt(
        self,
        features: KeyedJaggedTensor,
        values: torch.Tensor,
        weights: torch.Tensor | None,
        check_ids: bool,
    ) -> KJTInput:
        """What the groups' lookups read off `features` (its checked `values` and `weights`),
        after the id check when `check_ids`."""
        keys = features.keys()
        feature_index = self.feature_indices(keys)
        offset_per_key = features.offset_per_key()
        if check_ids:
            self.check_ids(values, offset_per_key, feature_index)
        return KJTInput(
            values=values,
            weights=weights,
            lengths=features.lengths(),
            offset_per_key=offset_per_key,
            feature_index=feature_index,
            num_keys=len(keys),
            batch=features.stride(),
        )

    def group_input(self, group: Group, kjt: KJTInput) -> GroupInput:
        """Gather one group's ids (shifted to group rows), bag offsets and weights."""
        values, offset_per_key = kjt.values, kjt.offset_per_key
        keys = [kjt.feature_index[s] for s in group.segments]
        segs = [values[offset_per_key[k] : offset_per_key[k + 1]] for k in keys]
        ids = shift_ids(segs, [self.segments[s].row_offset for s in group.segments])
        per_key = kjt.lengths.view(kjt.num_keys, kjt.batch)
        if keys == list(range(keys[0], keys[0] + len(keys))):
            group_lengths = per_key[keys[0] : keys[0] + len(keys)]
        else:
            group_lengths = per_key[torch.tensor(keys, device=kjt.lengths.device)]
        offsets = torch.zeros(group_lengths.numel() + 1, dtype=torch.int64, device=ids.device)
        torch.cumsum(group_lengths.reshape(-1), 0, out=offsets[1:])
        group_weights = None
        if kjt.weights is not None:
            weights = kjt.weights
            group_weights = torch.cat(
                [weights[offset_per_key[k] : offset_per_key[k + 1]] for k in keys]
            )
        return GroupInput(ids=ids, offsets=offsets, lengths=group_lengths, weights=group_weights)


@dataclass(frozen=True)
class Run:
    """Consecutive output segments that are also consecutive in one group's lookup output:
    copied to the pooled output as one `(B, length * D)` block."""

    group: int
    index: int  # position among the group's runs
    length: int
    dim: int


def _output_runs(segments: Sequence[Segment], groups: Sequence[Group]) -> list[Run]:
    position = {s: (g, i) for g, group in enumerate(groups) for i, s in enumerate(group.segments)}
    runs: list[Run] = []
    per_group = [0] * len(groups)
    previous: tuple[int, int] | None = None
    for s in range(len(segments)):
        g, i = position[s]
        if previous is not None and previous == (g, i - 1):
            last = runs[-1]
            runs[-1] = Run(group=g, index=last.index, length=last.length + 1, dim=last.dim)
        else:
            runs.append(Run(group=g, index=per_group[g], length=1, dim=groups[g].dim))
            per_group[g] += 1
        previous = (g, i)
    return runs


def _sample_major(run: torch.Tensor, batch: int) -> torch.Tensor:
    """`(length, B, D)` -> `(B, length * D)`: a view for one segment, else one copy.

    `stack(unbind)` measured up to 16x faster than `transpose(0, 1).reshape` for small batches
    (torch 2.13 CPU), and its backward is one cheap `unbind`.
    """
    if run.shape[0] == 1:
        return run[0]
    return torch.stack(run.unbind(0), dim=1).view(batch, run.shape[0] * run.shape[2])
