"""Packed quantized storage of a collection: building the groups, filling them from float
tables, and TorchRec's per-table state dict (`<prefix><table>.weight`, `...weight_qscaleshift`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from shardrec_embedding._grouping import TablePlan
from shardrec_embedding.configs import BaseEmbeddingConfig, DataType, PoolingType
from shardrec_embedding.quant.lookup import KIND_FLOAT, QuantGroup, SegmentMeta
from shardrec_embedding.quant.rowwise import (
    QUANT_DATA_TYPES,
    bits_of,
    check_data_type,
    float_dtype_of,
    quantize,
    row_bytes,
)

__all__ = ["QuantStorage"]

_MODE = {PoolingType.SUM: 0, PoolingType.MEAN: 1, PoolingType.NONE: 0}


def _kernel_row_bytes(dim: int, dt: DataType) -> int:
    # INT8 rows carry fp32 scale/bias for torch's byte kernel (see lookup.py)
    return dim + 8 if dt is DataType.INT8 else row_bytes(dim, dt)


def _recast(raw: torch.Tensor, src: torch.dtype, dst: torch.dtype) -> torch.Tensor:
    """Byte columns `(R, k)` holding `src` floats -> byte columns holding them as `dst`."""
    floats = raw.clone(memory_format=torch.contiguous_format).view(src)
    return floats.to(dst).view(torch.uint8)


def to_kernel_rows(stored: torch.Tensor, dt: DataType) -> torch.Tensor:
    """TorchRec-layout rows (`quantize` output) -> the kernel's layout (INT8: fp32 scale/bias)."""
    if dt is not DataType.INT8:
        return stored
    return torch.cat([stored[:, :-4], _recast(stored[:, -4:], torch.float16, torch.float32)], 1)


def from_kernel_rows(rows: torch.Tensor, dt: DataType) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Kernel-layout rows -> TorchRec's `(weight, weight_qscaleshift)`; exact for INT8 because
    the fp32 scale/bias hold fp16 values."""
    if dt not in QUANT_DATA_TYPES:
        return rows, None
    if dt is DataType.INT8:
        return rows[:, :-8], _recast(rows[:, -8:], torch.float32, torch.float16)
    return rows[:, :-4], rows[:, -4:]


class QuantStorage:
    """Groups, segment metadata and per-table row ranges of one quantized collection."""

    def __init__(
        self,
        tables: Sequence[BaseEmbeddingConfig],
        poolings: Sequence[PoolingType],
        device: torch.device | str | None,
        owner: str,
    ) -> None:
        for t in tables:
            check_data_type(t.data_type, f"{owner}: table {t.name!r}")
        self.tables = list(tables)
        self.plan = TablePlan(tables, poolings)
        self.groups: list[QuantGroup] = []
        self.table_group: dict[str, tuple[int, int]] = {}  # name -> (group, first row)
        for g, group in enumerate(self.plan.groups):
            dt = tables[group.tables[0]].data_type
            total = sum(tables[i].num_embeddings for i in group.tables)
            if dt in QUANT_DATA_TYPES:
                weight = torch.zeros(
                    total, _kernel_row_bytes(group.dim, dt), dtype=torch.uint8, device=device
                )
                kind = bits_of(dt)
            else:
                weight = torch.zeros(total, group.dim, dtype=float_dtype_of(dt), device=device)
                kind = KIND_FLOAT
            self.groups.append(QuantGroup(weight, kind, group.dim, _MODE[group.pooling]))
            start = 0
            for i in group.tables:
                self.table_group[tables[i].name] = (g, start)
                start += tables[i].num_embeddings
        segs = self.plan.segments
        self.segments = SegmentMeta(
            features=[s.feature for s in segs],
            tables=[s.table for s in segs],
            rows=[s.rows for s in segs],
            groups=[s.group for s in segs],
            row_offsets=[s.row_offset for s in segs],
            group_segments=[list(g.segments) for g in self.plan.groups],
            dims=[s.dim for s in segs],
        )

    def rows_of(self, table: BaseEmbeddingConfig) -> torch.Tensor:
        """The table's rows (a view) in its group's kernel buffer."""
        g, start = self.table_group[table.name]
        weight = self.groups[g].weight
        assert isinstance(weight, torch.Tensor)
        return weight.narrow(0, start, table.num_embeddings)

    def load_float(self, table: BaseEmbeddingConfig, weight: torch.Tensor) -> None:
        """Quantize a float `(R, D)` table into its rows."""
        rows = self.rows_of(table)
        if (
            rows.is_meta or weight.is_meta
        ):  # shapes only (checked by the caller): no data to quantize
            return
        dt = DataType(table.data_type)
        with torch.no_grad():
            rows.copy_(to_kernel_rows(quantize(weight.to(rows.device), dt), dt))

    def save(
        self, destination: dict[str, torch.Tensor], prefix: str, split_scale_bias: bool = False
    ) -> None:
        for t in self.tables:
            weight, qscaleshift = from_kernel_rows(self.rows_of(t), DataType(t.data_type))
            destination[f"{prefix}{t.name}.weight"] = weight.detach().clone()
            if qscaleshift is None:
                continue
            if split_scale_bias:
                halves = qscaleshift.detach().clone().view(torch.float16)  # (R, 2): scale, bias
                destination[f"{prefix}{t.name}.weight_qscale"] = halves[:, :1].clone()
                destination[f"{prefix}{t.name}.weight_qbias"] = halves[:, 1:].clone()
            else:
                destination[f"{prefix}{t.name}.weight_qscaleshift"] = qscaleshift.detach().clone()

    def load(
        self,
        state_dict: Mapping[str, torch.Tensor],
        prefix: str,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
        strict: bool,
        split_scale_bias: bool = False,
    ) -> None:
        """Load the keys `save` writes (with the same `split_scale_bias`)."""
        expected: set[str] = set()
        for t in self.tables:
            dt = DataType(t.data_type)
            rows = self.rows_of(t)
            ref_weight, ref_sb = from_kernel_rows(rows, dt)
            refs: list[tuple[str, torch.Tensor]] = [(f"{prefix}{t.name}.weight", ref_weight)]
            if ref_sb is not None and split_scale_bias:
                half = ref_sb.clone().view(torch.float16)[:, :1]
                refs += [(f"{prefix}{t.name}.weight_qscale", half)]
                refs += [(f"{prefix}{t.name}.weight_qbias", half)]
            elif ref_sb is not None:
                refs.append((f"{prefix}{t.name}.weight_qscaleshift", ref_sb))
            parts: list[torch.Tensor] = []
            for key, ref in refs:
                expected.add(key)
                if key not in state_dict:
                    missing_keys.append(key)
                    continue
                given = state_dict[key]
                if given.shape != ref.shape or given.dtype != ref.dtype:
                    error_msgs.append(
                        f"{key}: expected {tuple(ref.shape)} {ref.dtype} ({dt.value}), "
                        f"got {tuple(given.shape)} {given.dtype}"
                    )
                    continue
                parts.append(given.to(rows.device))
            if len(parts) != len(refs):
                continue
            if len(parts) == 3:  # weight, scale, bias: the fp16 pair as 4 bytes a row
                parts = [parts[0], torch.cat(parts[1:], dim=1).view(torch.uint8)]
            stored = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
            with torch.no_grad():
                rows.copy_(to_kernel_rows(stored, dt))
        if strict:
            for key in state_dict:
                if key.startswith(prefix) and key not in expected:
                    unexpected_keys.append(key)

    def nbytes(self) -> int:
        total = 0
        for g in self.groups:
            weight = g.weight
            assert isinstance(weight, torch.Tensor)
            total += weight.numel() * weight.element_size()
        return total
