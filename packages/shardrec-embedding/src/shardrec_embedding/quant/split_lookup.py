"""Lookups over tables split across the devices of one process: the core of the sharded
quantized collections (`shardrec_sharding.quant`), next to the unsplit lookups they combine.

Same signatures as `PooledLookup` / `SequenceLookup`, so the collections' forwards
(`kjt_lookup_args`, `eager_lookup_args`, `sequence_forward`) serve both. Per device `r`,
`inputs[r][j]` is the unsplit segment of its j-th sub-segment, which reads rows
`[row_lo, row_hi)` (`row_lo` -1: all rows).
"""

from collections.abc import Sequence

import torch
from torch import nn

from shardrec_embedding.quant.lookup import PooledLookup, SegmentMeta, SequenceLookup

__all__ = ["ShardedPooledLookup", "ShardedSequenceLookup"]


class _SplitLookup(nn.Module):
    """The per-device lookups and where each sub-segment reads (see the module docstring)."""

    def __init__(
        self,
        ranks: Sequence[nn.Module],
        devices: list[str],
        unsharded: SegmentMeta,
        inputs: list[list[int]],
        row_lo: list[list[int]],
        row_hi: list[list[int]],
        check_ids: bool,
    ) -> None:
        super().__init__()
        self.ranks = nn.ModuleList(ranks)
        self.devices = devices
        self.segments = unsharded
        self.inputs = inputs
        self.row_lo = row_lo
        self.row_hi = row_hi
        self.check_ids = check_ids


class ShardedPooledLookup(_SplitLookup):
    """Scriptable forward over the per-rank lookups; same signature as `PooledLookup`.

    Per device `r` also: `rank_dims[r]` the width of each sub-segment's output; per unsplit
    segment `s`: `parts[s]` its sub-segments' outputs in column order, `combine_sum[s]` whether
    they are summed (row blocks) rather than concatenated, and `divide[s]` whether the sum is
    then divided by the bag length (MEAN pooling).
    """

    def __init__(
        self,
        ranks: list[PooledLookup],
        devices: list[str],
        unsharded: SegmentMeta,
        inputs: list[list[int]],
        row_lo: list[list[int]],
        row_hi: list[list[int]],
        rank_dims: list[list[int]],
        parts: list[list[int]],
        combine_sum: list[bool],
        divide: list[bool],
        check_ids: bool,
    ) -> None:
        super().__init__(ranks, devices, unsharded, inputs, row_lo, row_hi, check_ids)
        self.rank_dims = rank_dims
        self.parts = parts
        self.combine_sum = combine_sum
        self.divide = divide

    def forward(
        self,
        values: torch.Tensor,
        lengths: torch.Tensor,
        weights: torch.Tensor | None,
        offset_per_key: list[int],
        feature_index: list[int],
        batch: int,
    ) -> torch.Tensor:
        per_key = self.segments.bag_lengths(
            self.check_ids, values, lengths, offset_per_key, feature_index, batch
        )
        all_weights = weights if weights is not None else torch.ones(values.numel())
        all_weights = all_weights.to(device=values.device, dtype=torch.float32)
        blocks: list[torch.Tensor] = []
        for r, lookup in enumerate(self.ranks):
            device = torch.device(self.devices[r])
            vals: list[torch.Tensor] = []
            lens: list[torch.Tensor] = []
            wts: list[torch.Tensor] = []
            opk = [0]
            for j, s in enumerate(self.inputs[r]):
                k = feature_index[s]
                ids = values[offset_per_key[k] : offset_per_key[k + 1]].long()
                w = all_weights[offset_per_key[k] : offset_per_key[k + 1]]
                lo = self.row_lo[r][j]
                if lo >= 0:
                    mask = (ids >= lo) & (ids < self.row_hi[r][j])
                    ids = torch.where(mask, ids - lo, torch.zeros_like(ids))
                    w = w * mask.to(w.dtype)
                vals.append(ids)
                wts.append(w)
                lens.append(per_key[k])
                opk.append(opk[-1] + offset_per_key[k + 1] - offset_per_key[k])
            identity = list(range(len(vals)))
            out = lookup(
                torch.cat(vals).to(device),
                torch.cat(lens).to(device),
                torch.cat(wts).to(device),
                opk,
                identity,
                batch,
            ).to(values.device)
            blocks.extend(torch.split_with_sizes(out, self.rank_dims[r], dim=1))
        pieces: list[torch.Tensor] = []
        for s, members in enumerate(self.parts):
            if self.combine_sum[s]:
                piece = blocks[members[0]]
                for i in members[1:]:
                    piece = piece + blocks[i]
            elif len(members) == 1:
                piece = blocks[members[0]]
            else:
                piece = torch.cat([blocks[i] for i in members], dim=1)
            if self.divide[s]:
                count = per_key[feature_index[s]].clamp(min=1).to(piece.dtype)
                piece = piece / count.unsqueeze(1)
            pieces.append(piece)
        if len(pieces) == 0:
            return torch.zeros(batch, 0, device=values.device)
        return torch.cat(pieces, dim=1)


class ShardedSequenceLookup(_SplitLookup):
    """Scriptable per-id lookup over the per-device lookups; same signature as `SequenceLookup`.

    forward(values `(N,)`, offset_per_key `F + 1` ints, feature_index (KJT key of each
    unsharded segment)) -> per unsharded segment `s` its `(N_s, D)` rows, in the dtype the
    unsharded `SequenceLookup` returns for that table.

    Per device `r`, `inputs[r][j]` is the unsharded segment of its j-th sub-segment, which
    reads rows `[row_lo, row_hi)` (`row_lo` -1: all rows) into columns `[col, col + width)`.
    """

    def __init__(
        self,
        ranks: list[SequenceLookup],
        devices: list[str],
        unsharded: SegmentMeta,
        inputs: list[list[int]],
        row_lo: list[list[int]],
        row_hi: list[list[int]],
        cols: list[list[int]],
        check_ids: bool,
    ) -> None:
        super().__init__(ranks, devices, unsharded, inputs, row_lo, row_hi, check_ids)
        # segments whose shards are row blocks (a mask per shard selects each id's row)
        # and the first column of each segment's shards, in the order the forward meets them
        masked = [False] * len(unsharded.rows)
        piece_cols: list[list[int]] = [[] for _ in unsharded.rows]
        for r in range(len(inputs)):
            for j, s in enumerate(inputs[r]):
                masked[s] = masked[s] or row_lo[r][j] >= 0
                piece_cols[s].append(cols[r][j])
        self.masked = masked
        self.piece_cols = piece_cols

    def forward(
        self, values: torch.Tensor, offset_per_key: list[int], feature_index: list[int]
    ) -> list[torch.Tensor]:
        meta = self.segments
        if self.check_ids:
            meta.check_ids(values, offset_per_key, feature_index)
        num_segments = len(meta.rows)
        pieces: list[list[torch.Tensor]] = [[] for _ in range(num_segments)]
        masks: list[list[torch.Tensor]] = [[] for _ in range(num_segments)]
        for r, lookup in enumerate(self.ranks):
            device = torch.device(self.devices[r])
            ids_parts: list[torch.Tensor] = []
            sub_offsets = [0]
            for j, s in enumerate(self.inputs[r]):
                k = feature_index[s]
                ids = values[offset_per_key[k] : offset_per_key[k + 1]].long()
                lo = self.row_lo[r][j]
                if lo >= 0:
                    owned = (ids >= lo) & (ids < self.row_hi[r][j])
                    ids = torch.where(owned, ids - lo, torch.zeros_like(ids))
                    masks[s].append(owned)
                ids_parts.append(ids)
                sub_offsets.append(sub_offsets[-1] + ids.numel())
            identity = list(range(len(ids_parts)))
            rows = lookup(torch.cat(ids_parts).to(device), sub_offsets, identity)
            for j, s in enumerate(self.inputs[r]):
                pieces[s].append(rows[j].to(values.device))
        out: list[torch.Tensor] = []
        for s in range(num_segments):
            parts = pieces[s]
            first = parts[0]
            if len(parts) == 1 and not self.masked[s] and first.shape[1] == meta.dims[s]:
                out.append(first)  # table_wise: the shard's rows as they are
                continue
            block = torch.zeros(
                first.shape[0], meta.dims[s], dtype=first.dtype, device=first.device
            )
            for i, part in enumerate(parts):
                c0 = self.piece_cols[s][i]
                target = block[:, c0 : c0 + part.shape[1]]
                if self.masked[s]:  # row_wise: a select, not a sum: the rows stay bit-exact
                    target.copy_(torch.where(masks[s][i].unsqueeze(1), part, target))
                else:
                    target.copy_(part)
            out.append(block)
        return out
