"""Readable, bounded text for the value types' ``repr`` (a batch of 512 bags stays one line)."""

from __future__ import annotations

import itertools
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


# --- TorchRec's str() format: every value, JSON-like, one line per key -------------------------


def _bag_texts(values: torch.Tensor, bounds: list[int]) -> list[str]:
    """``str`` of each bag ``values[bounds[i]:bounds[i + 1]]`` as TorchRec prints it (1-D or 2-D
    values; one host copy of the data)."""
    if values.dim() > 2:
        raise ValueError(
            f"str() prints 1-D or 2-D values, got shape {tuple(values.shape)}; use repr()"
        )
    flat = values.detach().cpu().tolist()
    return [
        "[" + ", ".join(str(v) if values.dim() == 1 else _row(v) for v in flat[a:b]) + "]"
        for a, b in itertools.pairwise(bounds)
    ]


def _row(row: list[object]) -> str:
    return "[" + ", ".join(str(v) for v in row) + "]"


def jt_str(values: torch.Tensor, weights: torch.Tensor | None, offsets: torch.Tensor) -> str:
    """TorchRec's ``str(JaggedTensor)``."""
    bounds = [int(o) for o in offsets.tolist()]
    vals = "[" + ", ".join(_bag_texts(values, bounds)) + "]"
    if weights is None:
        return "JaggedTensor({\n    " + vals + "\n})\n"
    wts = "[" + ", ".join(_bag_texts(weights, bounds)) + "]"
    return 'JaggedTensor({\n    "values": ' + vals + ',\n    "weights": ' + wts + "\n})\n"


def kjt_str(kjt: KeyedJaggedTensor) -> str:
    """TorchRec's ``str(KeyedJaggedTensor)``: one entry per key, each key's bags."""
    if not kjt._keys:
        return "KeyedJaggedTensor()\n"
    bounds = [int(o) for o in kjt.offsets().tolist()]
    vals = _bag_texts(kjt._values, bounds)
    w = kjt._weights
    wts = None if w is None else _bag_texts(w, bounds)
    lopk = kjt.lengths_offset_per_key()
    entries = []
    for i, key in enumerate(kjt._keys):
        v = "[" + ", ".join(vals[lopk[i] : lopk[i + 1]]) + "]"
        if wts is None:
            entries.append(f'    "{key}": {v}')
        else:
            ws = "[" + ", ".join(wts[lopk[i] : lopk[i + 1]]) + "]"
            entries.append(
                f'    "{key}": {{\n        "values": {v},\n        "weights": {ws}\n    }}'
            )
    return "KeyedJaggedTensor({\n" + ",\n".join(entries) + "\n})\n"


def kt_str(keys: list[str], per_key: list[torch.Tensor]) -> str:
    """TorchRec's ``str(KeyedTensor)``: each key's block, row by row."""
    if not keys:
        return "KeyedTensor()\n"
    entries = []
    for key, block in zip(keys, per_key, strict=True):
        if block.dim() != 2:
            raise ValueError(f"str() prints 2-D KeyedTensors, got shape {tuple(block.shape)}")
        rows = ", ".join(_row(r) for r in block.detach().cpu().tolist())
        entries.append(f'    "{key}": [{rows}]')
    return "KeyedTensor({\n" + ",\n".join(entries) + "\n})\n"
