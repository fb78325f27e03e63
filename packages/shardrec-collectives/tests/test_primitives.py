"""The segment reordering every collective relies on, against a Python loop (no communication),
and the order of a linked all-to-all's backward."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from shardrec_collectives import ShardingEnv
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


class _Record(torch.autograd.Function):
    """Identity; its backward appends "between" to `events`."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor, events: list[str]
    ) -> torch.Tensor:
        ctx.events = events  # type: ignore[attr-defined]  # ctx is a free-form namespace
        return x.clone()

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor
    ) -> tuple[torch.Tensor, None]:
        ctx.events.append("between")  # type: ignore[attr-defined]  # set in forward
        return grad, None


def test_linked_all_to_all_overlaps_the_reverse_with_what_ran_in_between(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reverse all-to-all is launched by the received tensor's backward and waited for
    after the backward of what the forward computed between launch and wait; the gradients
    are those of the one-node link."""
    events: list[str] = []
    launch = prim.all_to_all

    class Recorded(prim.Pending):
        def wait(self) -> torch.Tensor:
            events.append("wait")
            return super().wait()

    def recorded(
        env: ShardingEnv, input: torch.Tensor, ins: Sequence[int], outs: Sequence[int]
    ) -> prim.Pending:
        events.append("launch")
        pending = launch(env, input, ins, outs)
        return Recorded(pending.output, pending.work)

    monkeypatch.setattr(prim, "all_to_all", recorded)
    env = ShardingEnv(world_size=1, rank=0)
    x = torch.arange(6.0, requires_grad=True)
    other = torch.ones(3, requires_grad=True)
    finish = prim.linked_all_to_all(env, x * 2, [6], [6])
    middle = _Record.apply(other * 3, events)  # type: ignore[no-untyped-call]  # Function.apply is untyped
    out = finish()
    assert finish() is out  # one result per launch
    out.mul_(0.5)  # the received tensor may be modified in place
    weights = torch.arange(6.0) + 1
    ((out * weights).sum() + middle.sum()).backward()
    assert events == ["launch", "wait", "launch", "between", "wait"]
    assert x.grad is not None and other.grad is not None
    assert x.grad.tolist() == (weights * 0.5 * 2).tolist()
    assert other.grad.tolist() == [3.0, 3.0, 3.0]
