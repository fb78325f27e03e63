"""The segment reordering every collective relies on, against a Python loop (no communication)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shardrec_collectives import _primitives as prim


def reference(x: list[int], sizes: list[list[int]]) -> list[int]:
    segments, start = {}, 0
    for i, row in enumerate(sizes):
        for j, n in enumerate(row):
            segments[i, j] = x[start : start + n]
            start += n
    cols = len(sizes[0]) if sizes else 0
    return [v for j in range(cols) for i in range(len(sizes)) for v in segments[i, j]]


sizes_strategy = st.integers(1, 5).flatmap(
    lambda cols: st.lists(
        st.lists(st.integers(0, 4), min_size=cols, max_size=cols), min_size=1, max_size=5
    )
)


@settings(max_examples=60, deadline=None)
@given(sizes=sizes_strategy)
def test_transpose_segments_matches_loop(sizes: list[list[int]]) -> None:
    total = sum(map(sum, sizes))
    x = torch.arange(total) * 10
    expected = reference(x.tolist(), sizes)
    assert prim.transpose_segments(x, sizes).tolist() == expected
    index = prim.transpose_segments_index(sizes, x.device)
    assert (x if index is None else x[index]).tolist() == expected


def test_transpose_segments_many_segments_uses_index_path() -> None:
    sizes = [[(i * 7 + j) % 3 for j in range(60)] for i in range(40)]  # 2400 segments
    x = torch.arange(sum(map(sum, sizes)))
    assert prim.transpose_segments(x, sizes).tolist() == reference(x.tolist(), sizes)


def test_transpose_segments_of_rows_is_differentiable() -> None:
    x = torch.arange(12.0).view(6, 2).requires_grad_(True)
    out = prim.transpose_segments(x, [[1, 2], [3, 0]])
    assert out[:, 0].tolist() == [0.0, 6.0, 8.0, 10.0, 2.0, 4.0]
    (out * torch.arange(12.0).view(6, 2)).sum().backward()
    assert x.grad is not None
    # row k of the input went to row position[k] of the output
    position = [0, 4, 5, 1, 2, 3]
    assert x.grad[:, 0].tolist() == [2.0 * p for p in position]
