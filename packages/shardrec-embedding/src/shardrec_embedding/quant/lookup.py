"""TorchScript-compatible lookups over quantized storage, shared by the quantized collections,
their scripted forms and the sharded quantized modules.

One `QuantGroup` holds the tables of one (dim, data type, pooling) group packed in one buffer
(rows of table 0, then table 1, ...), in the layout the kernel reads:

```
INT8   (R, D + 8)  uint8   codes, fp32 scale, fp32 bias   torch's embedding_bag_byte_* layout
INT4   (R, D/2 + 4) uint8  codes, fp16 scale, fp16 bias   torch's embedding_bag_4bit_* layout
INT2   (R, D/4 + 4) uint8  codes, fp16 scale, fp16 bias   torch's embedding_bag_2bit_* layout
FP32/FP16/BF16 (R, D)      plain rows                     aten embedding_bag
```

INT8 differs from TorchRec's stored row (fp16 scale/bias) only in the width of scale and bias:
they are converted at load (exactly: the values are fp16 numbers) because torch's byte kernel
measured fastest (docs/design/quant-kernels.md). Kernels read only the looked-up rows.
"""

import torch
from torch import nn

from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, TorchScriptable

__all__ = [
    "KIND_FLOAT",
    "PooledLookup",
    "QuantGroup",
    "SegmentMeta",
    "SequenceLookup",
    "check_kjt_input",
    "check_segment_ids",
    "eager_lookup_args",
    "keyed_sequence_index",
    "kjt_lookup_args",
    "kjt_segment_index",
    "kjt_sequence_index",
    "sequence_forward",
    "sequence_outputs",
]

KIND_FLOAT = 0  # kind = bits per code for integer groups (8, 4, 2), 0 for float groups


class QuantGroup(nn.Module):
    """One packed buffer and its kernel call.

    weight: `(R, row bytes)` uint8 (kind 8/4/2) or `(R, D)` float (kind 0); a buffer that is
    not saved by `state_dict` (the owning collection writes TorchRec's per-table keys).
    """

    weight: torch.Tensor

    def __init__(self, weight: torch.Tensor, kind: int, dim: int, mode: int) -> None:
        super().__init__()
        self.register_buffer("weight", weight, persistent=False)
        self.kind = kind
        self.dim = dim
        self.mode = mode  # 0 sum, 1 mean

    def forward(
        self, ids: torch.Tensor, offsets: torch.Tensor, per_sample_weights: torch.Tensor | None
    ) -> torch.Tensor:
        """ids: `(N,)` int64 group rows; offsets: `(bags + 1,)`; per_sample_weights: `(N,)`.

        Returns `(bags, D)`: fp32, except SUM groups of FP16/BF16 rows, which return the
        kernel's half-precision sums as they are, so that the caller's one copy into its output
        converts them (no extra fp32 pass over `(bags, D)`; the values are the same).
        """
        w = self.weight
        if self.kind != 0 and _tracing():
            return self._traceable(ids, offsets, per_sample_weights)
        if self.kind == 8:
            out: torch.Tensor = torch.ops.quantized.embedding_bag_byte_rowwise_offsets(
                w, ids, offsets, False, 0, False, per_sample_weights, None, True
            )
        elif self.kind == 4:
            out = torch.ops.quantized.embedding_bag_4bit_rowwise_offsets(
                w, ids, offsets, False, 0, False, per_sample_weights, None, True
            )
        elif self.kind == 2:
            out = torch.ops.quantized.embedding_bag_2bit_rowwise_offsets(
                w, ids, offsets, False, 0, False, per_sample_weights, None, True
            )
        else:
            psw = per_sample_weights
            if psw is not None:
                psw = psw.to(w.dtype)
            out = torch.ops.aten._embedding_bag_forward_only(
                w, ids, offsets, False, 0, False, psw, True, -1
            )[0]
        if out.shape[1] != self.dim:  # INT4/INT2 rows padded to whole bytes
            out = out[:, : self.dim]
        if self.mode != 1:
            return out
        return self._mean(out.float(), offsets)

    def _mean(self, summed: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        # torch's quantized bag kernels ignore mode=1 (measured: they return the sum), so
        # every group pools with SUM and MEAN divides here; empty bags stay zero.
        if self.mode != 1:
            return summed
        counts = (offsets[1:] - offsets[:-1]).clamp(min=1).to(summed.dtype)
        return summed / counts.unsqueeze(1)

    def _traceable(
        self, ids: torch.Tensor, offsets: torch.Tensor, per_sample_weights: torch.Tensor | None
    ) -> torch.Tensor:
        """aten-only form for `torch.export` (torch's quantized kernels have no fake kernels):
        dequantize only the looked-up rows, then pool them."""
        rows = self.weight.index_select(0, ids)
        if self.kind == 8:
            codes = rows[:, :-8].float()
            sb = rows[:, -8:].clone(memory_format=torch.contiguous_format).view(torch.float32)
        else:
            shifts = torch.arange(0, 8, self.kind, dtype=torch.uint8, device=rows.device)
            packed = rows[:, :-4].unsqueeze(2)
            codes = ((packed >> shifts) & ((1 << self.kind) - 1)).reshape(rows.shape[0], -1)
            codes = codes[:, : self.dim].float()
            sb = (
                rows[:, -4:]
                .clone(memory_format=torch.contiguous_format)
                .view(torch.float16)
                .float()
            )
        dense = codes * sb[:, 0:1] + sb[:, 1:2]
        positions = torch.arange(ids.numel(), dtype=torch.long, device=ids.device)
        pooled = torch.ops.aten._embedding_bag_forward_only(
            dense, positions, offsets, False, 0, False, per_sample_weights, True, -1
        )[0]
        return self._mean(pooled, offsets)


def check_segment_ids(
    values: torch.Tensor,
    offset_per_key: list[int],
    feature_index: list[int],
    rows: list[int],
    min_rows: int,
    features: list[str],
    tables: list[str],
) -> None:
    """`IndexError` naming feature, table and id for the first id outside its table.

    Skipped while `torch.export` / `torch.compile` trace (the check reads ids on the host)."""
    if values.numel() == 0 or _tracing():
        return
    bounds = torch.aminmax(values)
    if int(bounds[0]) >= 0 and int(bounds[1]) < min_rows:
        return
    for s in range(len(feature_index)):
        k = feature_index[s]
        seg = values[offset_per_key[k] : offset_per_key[k + 1]]
        if seg.numel() == 0:
            continue
        bad = seg[(seg < 0) | (seg >= rows[s])]
        if bad.numel() > 0:
            raise IndexError(
                "feature '"
                + features[s]
                + "' id "
                + str(int(bad[0]))
                + " is out of range for table '"
                + tables[s]
                + "' with "
                + str(rows[s])
                + " rows (valid ids: [0, "
                + str(rows[s])
                + "))"
            )


def check_kjt_input(
    values: torch.Tensor, weights: torch.Tensor | None, weighted: bool, owner: str
) -> None:
    """The scripted forwards' input checks (the eager forwards run `check_features`)."""
    if values.is_floating_point():
        raise TypeError(
            owner + ": ids must be an integer tensor, got floating-point values; cast them with "
            ".long() if they are whole numbers"
        )
    if weighted and weights is None:
        raise ValueError(
            owner + " is weighted (is_weighted=True) but the KeyedJaggedTensor has no weights"
        )
    if not weighted and weights is not None:
        raise ValueError(owner + " is unweighted but the KeyedJaggedTensor carries weights")


def kjt_segment_index(keys: list[str], features: list[str], tables: list[str]) -> list[int]:
    """Index into `keys` of each segment's feature (scripted forwards; the eager ones cache
    this per key list). `ValueError` naming a missing feature and the table reading it."""
    out: list[int] = []
    for s in range(len(features)):
        found = -1
        for i in range(len(keys)):
            if keys[i] == features[s]:
                found = i
                break
        if found < 0:
            raise ValueError(
                "the KeyedJaggedTensor lacks feature '"
                + features[s]
                + "' that table '"
                + tables[s]
                + "' reads; it has keys "
                + str(keys)
            )
        out.append(found)
    return out


def kjt_lookup_args(
    features: KeyedJaggedTensor,
    weighted: bool,
    owner: str,
    segment_features: list[str],
    segment_tables: list[str],
    keys: list[str] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, list[int], list[int], int]:
    """A scripted pooled forward's checks and `PooledLookup` arguments from the KJT.

    keys: the KJT's keys when the caller has read them already (the fx-traced forwards read
    them first, as TorchRec's graph does); None: `features.keys()`.
    """
    key_list = features.keys() if keys is None else keys
    values = features.values()
    weights = features.weights_or_none()
    check_kjt_input(values, weights, weighted, owner)
    index = kjt_segment_index(key_list, segment_features, segment_tables)
    return values, features.lengths(), weights, features.offset_per_key(), index, features.stride()


def eager_lookup_args(
    features: KeyedJaggedTensor, weights: torch.Tensor | None, feature_index: list[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, list[int], list[int], int]:
    """An eager pooled forward's `PooledLookup` arguments from the (checked) KJT."""
    offset_per_key = list(features.offset_per_key())
    return (
        features.values(),
        features.lengths(),
        weights,
        offset_per_key,
        feature_index,
        features.stride(),
    )


def kjt_sequence_index(
    features: KeyedJaggedTensor, owner: str, segment_features: list[str], segment_tables: list[str]
) -> list[int]:
    """A scripted unpooled forward's checks; the KJT key of each segment."""
    keys = features.keys()
    return keyed_sequence_index(features, keys, owner, segment_features, segment_tables)


def keyed_sequence_index(
    features: KeyedJaggedTensor,
    keys: list[str],
    owner: str,
    segment_features: list[str],
    segment_tables: list[str],
) -> list[int]:
    """`kjt_sequence_index` given the KJT's `keys`."""
    check_kjt_input(features.values(), features.weights_or_none(), False, owner)
    return kjt_segment_index(keys, segment_features, segment_tables)


def sequence_forward(
    rows: list[torch.Tensor],
    features: KeyedJaggedTensor,
    feature_index: list[int],
    names: list[str],
    need_indices: bool,
    output_dtype: torch.dtype,
) -> dict[str, JaggedTensor]:
    """The per-segment rows of a (sharded or not) sequence lookup as the collection's
    `{name: JaggedTensor}` (the KJT's lengths; its ids as weights with `need_indices`).

    Shared by the eager and scripted forwards of `QuantEmbeddingCollection` and of its sharded
    form; `rows` is the lookup's output for `features` and `feature_index`."""
    offset_per_key = features.offset_per_key()
    per_key = features.lengths().view(len(offset_per_key) - 1, features.stride())
    values = features.values()
    return sequence_outputs(
        rows, values, offset_per_key, per_key, feature_index, names, need_indices, output_dtype
    )


def sequence_outputs(
    rows: list[torch.Tensor],
    values: torch.Tensor,
    offset_per_key: list[int],
    per_key: torch.Tensor,
    feature_index: list[int],
    names: list[str],
    need_indices: bool,
    output_dtype: torch.dtype,
) -> dict[str, JaggedTensor]:
    """`sequence_forward` from the KJT's parts: ids `values`, `offset_per_key` and the `(F, B)`
    lengths `per_key`."""
    out: dict[str, JaggedTensor] = {}
    for s in range(len(feature_index)):
        k = feature_index[s]
        ids: torch.Tensor | None = None
        if need_indices:
            ids = values[offset_per_key[k] : offset_per_key[k + 1]]
        out[names[s]] = JaggedTensor(
            values=rows[s].to(output_dtype), lengths=per_key[k], weights=ids
        )
    return out


def _tracing() -> bool:
    if torch._jit_internal.is_scripting():
        return False
    return torch.compiler.is_compiling()


class SegmentMeta(nn.Module):
    """Per-segment metadata of a collection as TorchScript-typed lists (segment order).

    Also precomputes where each group's lookup output goes in the pooled output: `group_runs[g]`
    holds, for every run of segments consecutive both in group `g` and in the output, the
    triple (first position in the group, number of segments, first output column), flattened.
    A collection whose tables all share (dim, dtype, pooling) is one run: one copy.
    """

    def __init__(
        self,
        features: list[str],
        tables: list[str],
        rows: list[int],
        groups: list[int],
        row_offsets: list[int],
        group_segments: list[list[int]],
        dims: list[int],
    ) -> None:
        super().__init__()
        self.features = features
        self.tables = tables
        self.rows = rows
        self.seg_groups = groups
        self.row_offsets = row_offsets
        self.group_segments = group_segments
        self.dims = dims
        assert all(members for members in group_segments), "every group reads a segment"
        self.min_rows = min(rows) if rows else 0
        # position of each segment inside its group's lookup output
        position = [0] * len(rows)
        for members in group_segments:
            for j, s in enumerate(members):
                position[s] = j
        self.positions = position
        columns = [0] * len(rows)
        for s in range(1, len(rows)):
            columns[s] = columns[s - 1] + dims[s - 1]
        self.total_dim = sum(dims)
        runs: list[list[int]] = [[] for _ in group_segments]
        for s in range(len(rows)):
            g = groups[s]
            run = runs[g]
            if s > 0 and groups[s - 1] == g and run and run[-3] + run[-2] == position[s]:
                run[-2] += 1
            else:
                run.extend([position[s], 1, columns[s]])
        self.group_runs = runs
        # identity shifts: a group of one table whose rows start at 0 reads the KJT ids as is
        self.no_shift = [all(row_offsets[s] == 0 for s in members) for members in group_segments]

    def bag_lengths(
        self,
        check_ids: bool,
        values: torch.Tensor,
        lengths: torch.Tensor,
        offset_per_key: list[int],
        feature_index: list[int],
        batch: int,
    ) -> torch.Tensor:
        """The pooled lookups' first step: the id check (when `check_ids`), then the KJT's
        `(F * B,)` lengths as `(F, B)`."""
        if check_ids:
            self.check_ids(values, offset_per_key, feature_index)
        return lengths.view(len(offset_per_key) - 1, batch)

    def check_ids(
        self, values: torch.Tensor, offset_per_key: list[int], feature_index: list[int]
    ) -> None:
        """`check_segment_ids` against these segments' tables (every lookup's id check)."""
        check_segment_ids(
            values,
            offset_per_key,
            feature_index,
            self.rows,
            self.min_rows,
            self.features,
            self.tables,
        )


def _group_ids(
    values: torch.Tensor,
    offset_per_key: list[int],
    keys: list[int],
    row_offsets: list[int],
    no_shift: bool,
) -> torch.Tensor:
    """The group's ids `(N_g,)` int64 shifted to its packed rows, written in one pass (one
    fused add per segment into a preallocated tensor; no `cat`). Keys consecutive in the KJT
    with no shift need no copy at all (a slice of `values`)."""
    contiguous = True
    for j in range(1, len(keys)):
        if keys[j] != keys[0] + j:
            contiguous = False
    if contiguous and no_shift and values.dtype == torch.int64:
        return values[offset_per_key[keys[0]] : offset_per_key[keys[-1] + 1]]
    if _tracing():  # `out=` into slices of data-dependent size does not trace
        return torch.cat(
            [
                values[offset_per_key[keys[j]] : offset_per_key[keys[j] + 1]].long()
                + row_offsets[j]
                for j in range(len(keys))
            ]
        )
    total = 0
    for k in keys:
        total += offset_per_key[k + 1] - offset_per_key[k]
    ids = torch.empty(total, dtype=torch.int64, device=values.device)
    start = 0
    for j in range(len(keys)):
        k = keys[j]
        end = start + offset_per_key[k + 1] - offset_per_key[k]
        torch.add(
            values[offset_per_key[k] : offset_per_key[k + 1]], row_offsets[j], out=ids[start:end]
        )
        start = end
    return ids


class PooledLookup(TorchScriptable, nn.Module):
    """Pooled lookup of all groups of a collection; scriptable.

    forward(values `(N,)`, lengths `(F * B,)`, weights `(N,)` or None, offset_per_key
    `F + 1` ints, feature_index (KJT key of each segment), batch B) -> `(B, sum of dims)` in
    fp32, or fp16 with `half_output`.

    Per group: its ids (one shifted copy, or a slice of `values`), its bag offsets (one
    `cumsum`), one kernel call over the packed buffer, and one copy of each run of segments
    into the preallocated output (which also converts to the output dtype).
    """

    def __init__(
        self,
        groups: list[QuantGroup],
        segments: SegmentMeta,
        check_ids: bool,
        half_output: bool = False,
    ) -> None:
        super().__init__()
        self.groups = nn.ModuleList(groups)
        self.segments = segments
        self.check_ids = check_ids
        self.half_output = half_output

    def forward(
        self,
        values: torch.Tensor,
        lengths: torch.Tensor,
        weights: torch.Tensor | None,
        offset_per_key: list[int],
        feature_index: list[int],
        batch: int,
    ) -> torch.Tensor:
        meta = self.segments
        per_key = meta.bag_lengths(
            self.check_ids, values, lengths, offset_per_key, feature_index, batch
        )
        dtype = torch.float16 if self.half_output else torch.float32
        out = torch.empty(batch, meta.total_dim, dtype=dtype, device=values.device)
        for g, group in enumerate(self.groups):
            members = meta.group_segments[g]
            keys = [feature_index[s] for s in members]
            shifts = [meta.row_offsets[s] for s in members]
            ids = _group_ids(values, offset_per_key, keys, shifts, meta.no_shift[g])
            consecutive = True
            for j in range(1, len(keys)):
                if keys[j] != keys[0] + j:
                    consecutive = False
            if consecutive:
                group_lengths = per_key[keys[0] : keys[0] + len(keys)]
            else:
                group_lengths = per_key[torch.tensor(keys, dtype=torch.long, device=lengths.device)]
            offsets = torch.zeros(group_lengths.numel() + 1, dtype=torch.long, device=ids.device)
            torch.cumsum(group_lengths.reshape(-1), 0, out=offsets[1:])
            psw: torch.Tensor | None = None
            if weights is not None:
                if consecutive:
                    group_weights = weights[offset_per_key[keys[0]] : offset_per_key[keys[-1] + 1]]
                else:
                    group_weights = torch.cat(
                        [weights[offset_per_key[k] : offset_per_key[k + 1]] for k in keys]
                    )
                psw = group_weights.float()
            dim = meta.dims[members[0]]
            pooled = group(ids, offsets, psw).view(len(members), batch, dim)
            runs = meta.group_runs[g]
            for r in range(0, len(runs), 3):
                first, count, column = runs[r], runs[r + 1], runs[r + 2]
                block = out[:, column : column + count * dim]
                block.view(batch, count, dim).copy_(pooled[first : first + count].transpose(0, 1))
        return out


class SequenceLookup(TorchScriptable, nn.Module):
    """Per-id lookup of all groups of a collection; scriptable.

    Same inputs as `PooledLookup`; returns per segment the `(N_s, D)` rows of its ids.
    """

    def __init__(self, groups: list[QuantGroup], segments: SegmentMeta, check_ids: bool) -> None:
        super().__init__()
        self.groups = nn.ModuleList(groups)
        self.segments = segments
        self.check_ids = check_ids

    def forward(
        self, values: torch.Tensor, offset_per_key: list[int], feature_index: list[int]
    ) -> list[torch.Tensor]:
        meta = self.segments
        if self.check_ids:
            meta.check_ids(values, offset_per_key, feature_index)
        out: list[torch.Tensor] = [values.new_empty(0)] * len(meta.rows)
        for g, group in enumerate(self.groups):
            members = meta.group_segments[g]
            ids_parts: list[torch.Tensor] = []
            sizes: list[int] = []
            for s in members:
                k = feature_index[s]
                ids_parts.append(
                    values[offset_per_key[k] : offset_per_key[k + 1]].long() + meta.row_offsets[s]
                )
                sizes.append(offset_per_key[k + 1] - offset_per_key[k])
            ids = torch.cat(ids_parts)
            # one id per bag: the pooled kernels return each id's row
            offsets = torch.arange(ids.numel() + 1, dtype=torch.long, device=ids.device)
            rows = group(ids, offsets, None)
            parts = torch.split_with_sizes(rows, sizes)
            for j, s in enumerate(members):
                out[s] = parts[j]
        return out
