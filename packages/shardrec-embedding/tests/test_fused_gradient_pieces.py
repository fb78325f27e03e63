"""The one-pass update reading its gradient in two row pieces (session 12, s12-rowwise).

Reference: the same update from the whole gradient in one tensor: weights and optimizer state
must be bitwise equal (the kernel reads the same floats, only from two places). And
`segment_lookup`'s backward taking a gradient through `GradientPieces` (what the row-wise
reduce-scatter hands it) against the same lookup's backward from the whole gradient.
"""

from __future__ import annotations

import copy

import pytest
import torch
from test_fused_segments import BATCH, NAMES, READS, WIDTH, _batch, _groups, _segment_batch

import shardrec_embedding.fused.segments as segments_module
from shardrec_embedding._native import (
    AdagradWorkspace,
    GradientPiece,
    native_available,
    native_presorted_update,
    native_segment_presort,
    native_segment_update,
)
from shardrec_embedding.fused import (
    KERNELS,
    BatchedFusedEmbeddingBag,
    GradientPieces,
    gradient_pieces,
    segment_lookup,
)

needs_native = pytest.mark.skipif(not native_available(), reason="no C compiler")


def _apart(grad: torch.Tensor, split: int) -> tuple[torch.Tensor, GradientPiece]:
    """`grad`'s rows in two separate allocations."""
    return grad[:split].clone(), GradientPiece(split=split, rows=grad[split:].clone())


@needs_native
@pytest.mark.parametrize("presorted", [False, True])
@pytest.mark.parametrize("split", [0, 1, 17, 39, 40])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("rule", ["rowwise_adagrad", "adagrad"])
def test_two_pieces_update_as_one(
    rule: str, dtype: torch.dtype, split: int, presorted: bool
) -> None:
    gen = torch.Generator().manual_seed(6)
    weight = torch.randn(3200, 32, generator=gen)
    state = torch.zeros(3200) if rule == "rowwise_adagrad" else torch.zeros(3200, 32)
    got, got_state = weight.clone(), state.clone()
    space, ref_space = AdagradWorkspace(), AdagradWorkspace()
    for step in range(3):
        values, offsets, grad, segments = _segment_batch(step, dtype)
        n = int(offsets[40] - offsets[0]) + 2 * int(offsets[80] - offsets[40])
        args = (segments, values, offsets, 40)
        first, second = _apart(grad, split)
        if presorted:
            pre = native_segment_presort(3200, *args, grad.stride(0), space, n, background=True)
            assert pre is not None
            native_presorted_update(
                rule, got, got_state, pre, first, 0.1, 1e-8, space, second=second
            )
        else:
            native_segment_update(
                rule, got, got_state, *args, first, 0.1, 1e-8, space, n, second=second
            )
        native_segment_update(rule, weight, state, *args, grad, 0.1, 1e-8, ref_space, n)
        assert torch.equal(got, weight) and torch.equal(got_state, state), step


@needs_native
def test_bad_pieces_are_refused() -> None:
    values, offsets, grad, segments = _segment_batch(0, torch.int64)
    n = int(offsets[-1])
    weight, state, space = torch.zeros(3200, 32), torch.zeros(3200), AdagradWorkspace()
    args = (segments, values, offsets, 40)
    first = grad[:10].clone()
    bad = {
        "a gradient piece split at row 50": GradientPiece(split=50, rows=grad[10:]),
        "needs rows \\[split, 40\\) in its second piece, got 29": GradientPiece(
            split=10, rows=grad[11:]
        ),
        "must match the first's dtype, width and row stride": GradientPiece(
            split=10, rows=grad[10:, :50]
        ),
        "float64": GradientPiece(split=10, rows=grad[10:].double()),
    }
    for message, second in bad.items():
        with pytest.raises(ValueError, match=message):
            native_segment_update(
                "rowwise_adagrad", weight, state, *args, first, 0.1, 1e-8, space, n,
                second=second,
            )  # fmt: skip
        pre = native_segment_presort(3200, *args, grad.stride(0), space, n, background=False)
        assert pre is not None
        with pytest.raises(ValueError, match=message):
            native_presorted_update(
                "rowwise_adagrad", weight, state, pre, first, 0.1, 1e-8, space, second=second
            )
        assert space._presort is not None  # the sort's buffers given back even so
    assert torch.equal(weight, torch.zeros(3200, 32)) and torch.equal(state, torch.zeros(3200))


def _zeros_marker() -> torch.Tensor:
    """What `reduce_scatter_pooled` gives autograd beside the pieces."""
    return torch.zeros(()).expand(BATCH, WIDTH)


@needs_native
@pytest.mark.parametrize("extra", [False, True])
@pytest.mark.parametrize("presort", [False, True])
@pytest.mark.parametrize("optimizer", ["exact_row_wise_adagrad", "exact_adagrad", "exact_sgd"])
def test_segment_lookup_takes_its_gradient_in_pieces(
    monkeypatch: pytest.MonkeyPatch, optimizer: str, presort: bool, extra: bool
) -> None:
    """Pieces beside autograd's zeros (the kernel reads them where they lie; SGD: added into
    one tensor) or beside a non-zero gradient (added to it): the same update as the whole."""
    monkeypatch.delitem(KERNELS, "fbgemm", raising=False)
    monkeypatch.setattr(segments_module, "PRESORT_MIN_IDS", 0)
    ours = _groups(optimizer, seed=1)
    ref = copy.deepcopy(ours)
    for step, split in enumerate([2, 0, BATCH]):
        values, lengths = _batch(step, torch.int64)
        gen = torch.Generator().manual_seed(20 + step)
        grad = torch.randn(BATCH, WIDTH, generator=gen)
        other = torch.randn(BATCH, WIDTH, generator=gen) if extra else None
        out = segment_lookup(ours, READS, values, lengths, BATCH, WIDTH, NAMES, presort=presort)
        pieces = gradient_pieces(out)
        assert pieces is not None
        pieces.put(split, grad[:split].clone(), grad[split:].clone())
        out.backward(_zeros_marker() if other is None else other)
        assert pieces.take() is None  # taken by the backward
        want = segment_lookup(ref, READS, values, lengths, BATCH, WIDTH, NAMES, presort=presort)
        want.backward(grad if other is None else other + grad)
        _assert_same(ours, ref, step)


def _assert_same(
    mine: list[BatchedFusedEmbeddingBag], theirs: list[BatchedFusedEmbeddingBag], step: int
) -> None:
    for a, b in zip(mine, theirs, strict=True):
        assert torch.equal(a.packed_weight(), b.packed_weight()), step
        for name, state in a.optimizer_state().items():
            assert torch.equal(state, b.optimizer_state()[name]), (step, name)


@needs_native
def test_gradient_pieces_slot() -> None:
    group = _groups("exact_row_wise_adagrad", seed=2)
    values, lengths = _batch(0, torch.int64)
    with torch.no_grad():
        pooled = segment_lookup(group, READS, values, lengths, BATCH, WIDTH, NAMES)
    assert gradient_pieces(pooled) is None  # no autograd: nothing to hand a gradient to
    assert gradient_pieces(torch.zeros(2)) is None
    slot = GradientPieces()
    slot.put(1, torch.zeros(1, 2), torch.zeros(1, 2))
    with pytest.raises(RuntimeError, match="already holds a gradient"):
        slot.put(1, torch.zeros(1, 2), torch.zeros(1, 2))
    assert slot.take() is not None and slot.take() is None


@needs_native
def test_pieces_that_do_not_make_the_output_are_refused() -> None:
    group = _groups("exact_row_wise_adagrad", seed=2)
    values, lengths = _batch(0, torch.int64)
    before = [m.packed_weight().clone() for m in group]
    for first, rest in [
        (torch.zeros(2, WIDTH), torch.zeros(BATCH - 3, WIDTH)),  # a row short
        (torch.zeros(2, WIDTH - 1), torch.zeros(BATCH - 2, WIDTH - 1)),  # narrower
        (torch.zeros(3, WIDTH), torch.zeros(BATCH - 3, WIDTH)),  # split elsewhere
    ]:
        out = segment_lookup(group, READS, values, lengths, BATCH, WIDTH, NAMES)
        pieces = gradient_pieces(out)
        assert pieces is not None
        pieces.put(2, first, rest)
        with pytest.raises(ValueError, match="do not make the lookup output's"):
            out.backward(_zeros_marker())
    for m, w in zip(group, before, strict=True):
        assert torch.equal(m.packed_weight(), w)  # nothing updated
