"""`_kt_regroup_arguments` (TorchRec's private helper at `torchrec.sparse.jagged_tensor`): the
permute rows it returns rebuild every group by slicing (a naive regroup), and the jump column
chains the rows of a key named in several groups, as TorchRec documents it."""

from __future__ import annotations

import random

import pytest
import torch

from shardrec_jagged import KeyedTensor, UnknownKeyError, regroup_kts
from shardrec_jagged.torchrec_private import _kt_regroup_arguments


def _case(rng: random.Random) -> tuple[list[list[str]], list[list[int]], list[list[str]]]:
    names = [f"f{i}" for i in range(rng.randrange(1, 7))]
    rng.shuffle(names)
    cuts = sorted(rng.sample(range(1, len(names)), rng.randrange(0, len(names))))
    keys = [names[a:b] for a, b in zip([0, *cuts], [*cuts, len(names)], strict=True)]
    widths = [[rng.randrange(1, 5) for _ in k] for k in keys]
    groups = [rng.choices(names, k=rng.randrange(0, 4)) for _ in range(rng.randrange(1, 5))]
    return keys, widths, groups


def _jumps(groups: list[list[str]]) -> list[int]:
    """The documented jump column, from the rows' keys alone."""
    order = [name for group in groups for name in group]
    out = []
    for i, name in enumerate(order):
        uses = [j for j, n in enumerate(order) if n == name]
        if len(uses) == 1:
            out.append(0)
        elif i == uses[-1]:
            out.append(-len(order))
        else:
            after = uses[uses.index(i) + 1]
            out.append(after if i == uses[0] else -after)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_rows_rebuild_a_naive_regroup(seed: int) -> None:
    rng = random.Random(seed)
    keys, widths, groups = _case(rng)
    batch = 3
    values = [
        torch.randn(batch, sum(w), generator=torch.Generator().manual_seed(seed)) for w in widths
    ]
    permutes, in_shapes, out_shapes, out_lengths = _kt_regroup_arguments(
        values[0], keys, widths, groups
    )
    assert permutes.dtype == in_shapes.dtype == out_shapes.dtype == torch.int32
    assert permutes.shape == (sum(len(g) for g in groups), 6)
    assert in_shapes.tolist() == [sum(w) for w in widths]
    assert out_shapes.tolist() == out_lengths
    pieces: list[list[torch.Tensor]] = [[] for _ in groups]
    for t, g, in_start, out_start, width, _ in permutes.tolist():
        assert out_start == sum(p.size(1) for p in pieces[g])
        pieces[g].append(values[t][:, in_start : in_start + width])
    got = [torch.cat(p, dim=1) if p else torch.zeros(batch, 0) for p in pieces]
    kts = [
        KeyedTensor(keys=k, length_per_key=w, values=v)
        for k, w, v in zip(keys, widths, values, strict=True)
    ]
    for group, out, want in zip(groups, got, regroup_kts(kts, groups), strict=True):
        assert out.size(1) == out_lengths[groups.index(group)]
        assert torch.equal(out, want)
    assert permutes[:, 5].tolist() == _jumps(groups)


def test_torchrecs_documented_example_and_meta() -> None:
    keys = [["f1", "f2"], ["f3", "f4", "f5"], ["f6"]]
    widths = [[3, 4], [5, 6, 7], [8]]
    groups = [["f1", "f3"], ["f2"], ["f4", "f1", "f6"], ["f1", "f5"]]
    permutes, in_shapes, out_shapes, out_lengths = _kt_regroup_arguments(
        torch.empty(0), keys, widths, groups
    )
    # f1 is used by rows 0, 4 and 6: row 0 starts the chain (4), row 4 continues it (-6),
    # row 6 ends it (minus the row count, 8).
    assert permutes[:, 5].tolist() == [4, 0, 0, 0, -6, 0, -8, 0]
    assert permutes[7].tolist() == [1, 3, 11, 3, 7, 0]  # f5: input 1 from 11, output 3 at 3
    assert in_shapes.tolist() == [7, 18, 8] and out_lengths == [8, 4, 17, 10]
    assert out_shapes.tolist() == out_lengths
    meta = _kt_regroup_arguments(torch.empty(0, device="meta"), keys, widths, groups)
    assert meta[0].device.type == "meta" and meta[0].shape == (8, 6) and meta[3] == out_lengths


def test_refusals_name_the_key() -> None:
    with pytest.raises(UnknownKeyError, match=r"group 1 names key 'zz', held by no input"):
        _kt_regroup_arguments(torch.empty(0), [["a"]], [[2]], [["a"], ["zz"]])
    with pytest.raises(ValueError, match=r"key 'a' is held by inputs 0 and 1"):
        _kt_regroup_arguments(torch.empty(0), [["a"], ["a"]], [[2], [2]], [["a"]])
    with pytest.raises(ValueError, match=r"key_lengths \[\[2, 3\]\] must give one width per key"):
        _kt_regroup_arguments(torch.empty(0), [["a"]], [[2, 3]], [["a"]])
