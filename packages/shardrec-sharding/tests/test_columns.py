"""`ColumnPlacement` against the column gather it replaces (values and gradients, bitwise)."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from shardrec_sharding._columns import ColumnPlacement


def _layout(
    rng: random.Random,
) -> tuple[list[list[int]], list[dict[int, list[int]]], list[tuple[int, int]]]:
    """Random segments split into column pieces spread over parts and their blocks."""
    n_parts = rng.randint(1, 3)
    n_segments = rng.randint(1, 7)
    dims = [rng.choice([1, 2, 3, 4, 8]) for _ in range(n_segments)]
    # pieces: (segment, first column, width) given to (part, block)
    placed: list[list[list[tuple[int, int, int]]]] = [
        [[] for _ in range(rng.randint(1, 3))] for _ in range(n_parts)
    ]
    for seg, dim in enumerate(dims):
        cuts = sorted(rng.sample(range(1, dim), rng.randint(0, dim - 1))) if dim > 1 else []
        bounds = [0, *cuts, dim]
        for a, b in itertools.pairwise(bounds):
            part = rng.randrange(n_parts)
            rng.choice(placed[part]).append((seg, a, b - a))
    for blocks in placed:
        for block in blocks:
            rng.shuffle(block)
    part_blocks = [[sum(w for _, _, w in block) for block in blocks] for blocks in placed]
    part_columns: list[dict[int, list[int]]] = []
    for blocks in placed:
        where: dict[tuple[int, int], int] = {}
        col = 0
        for block in blocks:
            for seg, a, w in block:
                for c in range(w):
                    where[(seg, a + c)] = col
                    col += 1
        segs = {seg for (seg, _) in where}
        part_columns.append(
            {s: [where[(s, c)] for c in range(dims[s]) if (s, c) in where] for s in segs}
        )
    order = list(range(n_segments))
    rng.shuffle(order)
    return part_blocks, part_columns, [(s, dims[s]) for s in order]


def _reference(
    part_blocks: list[list[int]],
    part_columns: list[dict[int, list[int]]],
    order: list[tuple[int, int]],
    parts: list[torch.Tensor],
    batch: int,
) -> torch.Tensor:
    """The old assembly: each part's blocks side by side, parts side by side, one gather."""
    wide = []
    for k, flat in enumerate(parts):
        off = 0
        for w in part_blocks[k]:
            wide.append(flat[off : off + batch * w].view(batch, w))
            off += batch * w
    cat = torch.cat(wide, 1)
    starts = [sum(sum(b) for b in part_blocks[:k]) for k in range(len(part_blocks))]
    index: list[int] = []
    for seg, _ in order:
        for k, cols in enumerate(part_columns):
            if seg in cols:
                index.extend(starts[k] + c for c in cols[seg])
    return cat.index_select(1, torch.tensor(index, dtype=torch.int64))


@pytest.mark.parametrize("seed", range(40))
def test_matches_gather_bitwise(seed: int) -> None:
    rng = random.Random(seed)
    part_blocks, part_columns, order = _layout(rng)
    batch = rng.choice([0, 1, 3, 5])
    g = torch.Generator().manual_seed(seed)
    parts = [torch.randn(batch * sum(b), generator=g).requires_grad_() for b in part_blocks]
    ref_parts = [p.detach().clone().requires_grad_() for p in parts]
    placement = ColumnPlacement(part_blocks, part_columns, order)
    out = placement(parts, batch)
    ref = _reference(part_blocks, part_columns, order, ref_parts, batch)
    assert torch.equal(out, ref)
    grad = torch.randn(ref.shape, generator=g)
    out.backward(grad)  # type: ignore[no-untyped-call]  # untyped in torch's stubs
    ref.backward(grad)  # type: ignore[no-untyped-call]  # same
    for p, r in zip(parts, ref_parts, strict=True):
        assert p.grad is not None and r.grad is not None
        assert torch.equal(p.grad, r.grad)


def test_expanded_gradient() -> None:
    """The gradient of `.sum()` is an expanded scalar (stride 0): read in place."""
    placement = ColumnPlacement([[2, 2]], [{0: [0, 2], 1: [1, 3]}], [(0, 2), (1, 2)])
    part = torch.arange(12.0).requires_grad_()
    out = placement([part], 3)
    assert torch.equal(
        out, part.detach().view(2, 3, 2).permute(1, 0, 2).reshape(3, 4)[:, [0, 2, 1, 3]]
    )
    out.sum().backward()  # type: ignore[no-untyped-call]  # untyped in torch's stubs
    assert part.grad is not None and torch.equal(part.grad, torch.ones(12))


def test_strided_moves_merge() -> None:
    """Two ranks holding alternate tables: one strided copy per rank."""
    dim = 4
    blocks = [[3 * dim, 3 * dim]]
    cols = {t: [(t % 2) * 3 * dim + (t // 2) * dim + c for c in range(dim)] for t in range(6)}
    placement = ColumnPlacement(blocks, [cols], [(t, dim) for t in range(6)])
    assert len(placement.moves) == 2
    assert placement.complete and not placement.identity


def test_identity_is_the_part_itself() -> None:
    placement = ColumnPlacement([[3]], [{0: [0, 1], 1: [2]}], [(0, 2), (1, 1)])
    assert placement.identity
    part = torch.randn(6)
    assert placement([part], 2).data_ptr() == part.data_ptr()
