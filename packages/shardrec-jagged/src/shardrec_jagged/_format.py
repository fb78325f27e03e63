"""Readable, bounded text for the value types' ``repr`` (a batch of 512 bags stays one line)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from shardrec_jagged.keyed_jagged_tensor import KeyedJaggedTensor

MAX_BAGS = 6
MAX_IDS = 6


def _scalar(x: object) -> str:
    if isinstance(x, float):
        return repr(float(f"{x:.4g}"))
    if isinstance(x, list):
        return "[" + ", ".join(_scalar(v) for v in x) + "]"
    return str(x)


def jagged_rows(
    values: torch.Tensor, lengths: torch.Tensor, max_bags: int = MAX_BAGS, max_ids: int = MAX_IDS
) -> str:
    """``[[10, 11], [], [12]]``, eliding bags past ``max_bags`` and ids past ``max_ids``."""
    lens = [int(n) for n in lengths.tolist()]
    shown = lens[:max_bags]
    end = sum(shown)
    flat = values[:end].detach().cpu().tolist()
    bags: list[str] = []
    start = 0
    for n in shown:
        bag = flat[start : start + n]
        start += n
        text = ", ".join(_scalar(v) for v in bag[:max_ids])
        if n > max_ids:
            text += f", ... ({n} ids)"
        bags.append("[" + text + "]")
    if len(lens) > max_bags:
        bags.append(f"... ({len(lens)} bags)")
    return "[" + ", ".join(bags) + "]"


def dense_rows(values: torch.Tensor, max_rows: int = MAX_BAGS, max_cols: int = MAX_IDS) -> str:
    """A 2-D tensor as ``[[0.1, 0.2], ...]`` with elision; other ranks as their shape."""
    if values.dim() != 2:
        return f"<tensor of shape {tuple(values.shape)}>"
    rows: list[str] = []
    for row in values[:max_rows].detach().cpu().tolist():
        text = ", ".join(_scalar(v) for v in row[:max_cols])
        if len(row) > max_cols:
            text += f", ... ({len(row)} cols)"
        rows.append("[" + text + "]")
    if values.size(0) > max_rows:
        rows.append(f"... ({values.size(0)} rows)")
    return "[" + ", ".join(rows) + "]"


def kjt_repr(kjt: KeyedJaggedTensor) -> str:
    """One line per key with its bags (and weights), as ``repr(KeyedJaggedTensor)`` shows."""
    if not kjt._keys:
        return f"KeyedJaggedTensor(keys=[], stride={kjt._stride})"
    lopk = kjt.lengths_offset_per_key()
    opk = kjt.offset_per_key()
    lengths = kjt.lengths()
    lines = [f"KeyedJaggedTensor(stride={kjt._stride}, keys={len(kjt._keys)}) {{"]
    for i, k in enumerate(kjt._keys):
        seg = lengths[lopk[i] : lopk[i + 1]]
        text = jagged_rows(kjt._values[opk[i] : opk[i + 1]], seg)
        if kjt._weights is not None:
            text += "  weights=" + jagged_rows(kjt._weights[opk[i] : opk[i + 1]], seg)
        lines.append(f"  {k!r}: {text}")
    lines.append("}")
    return "\n".join(lines)
