"""`segment_lookup`: several fused groups read straight from a KJT into one output.

Reference: each group's own `BatchedFusedEmbeddingBag` call on its shifted ids (the per-group
path) with the native backend, whose update sums in the same order: trained weights and state
must be bitwise equal, outputs equal to float rounding (ATen's forward vs the native one).
"""

from __future__ import annotations

import copy

import pytest
import torch

import shardrec_embedding.fused.segments as segments_module
from shardrec_embedding import shift_ids
from shardrec_embedding._native import (
    AdagradWorkspace,
    native_available,
    native_presorted_update,
    native_segment_presort,
    native_segment_update,
)
from shardrec_embedding.configs import PoolingType
from shardrec_embedding.fused import (
    KERNELS,
    BatchedFusedEmbeddingBag,
    FusedTableSpec,
    SegmentRead,
    segment_lookup,
    segment_lookup_unsupported,
)
from shardrec_embedding.fused.kernels import native_workspace
from shardrec_testing import assert_close

needs_native = pytest.mark.skipif(not native_available(), reason="no C compiler")

OPTIMIZERS = ["exact_row_wise_adagrad", "exact_adagrad", "exact_sgd"]
KEYS, BATCH = 4, 5


def _groups(optimizer: str, seed: int) -> list[BatchedFusedEmbeddingBag]:
    gen = torch.Generator().manual_seed(seed)

    def spec(name: str, rows: int, dim: int, pooling: PoolingType) -> FusedTableSpec:
        w = torch.randn(rows, dim, generator=gen)
        return FusedTableSpec(name=name, num_rows=rows, dim=dim, pooling=pooling, weight=w)

    params = {"optimizer": optimizer, "learning_rate": 0.1}
    return [
        BatchedFusedEmbeddingBag(
            [spec("a", 7, 8, PoolingType.SUM), spec("b", 5, 8, PoolingType.SUM)], params
        ),
        BatchedFusedEmbeddingBag([spec("c", 9, 4, PoolingType.MEAN)], params),
    ]


# key 0 read by tables a and b (one group), table c read by keys 1 and 3, key 2 read by
# nobody, one output block with no table (zeros), blocks not in group order.
READS = [
    SegmentRead(group=1, table=0, key=3, col=0),
    SegmentRead(group=0, table=1, key=0, col=4),
    SegmentRead(group=0, table=0, key=0, col=12),
    SegmentRead(group=1, table=0, key=1, col=28),
]
WIDTH = 32  # columns [20, 28) belong to no read
NAMES = [("f3", "c"), ("f0", "b"), ("f0", "a"), ("f1", "c")]


def _batch(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (KEYS * BATCH,), generator=gen)
    lengths[1] = 0  # an empty bag in every batch
    values = torch.randint(0, 5, (int(lengths.sum()),), generator=gen)  # duplicates likely
    return values.to(dtype), lengths


def _reference(
    groups: list[BatchedFusedEmbeddingBag],
    values: torch.Tensor,
    lengths: torch.Tensor,
    grad: torch.Tensor,
) -> torch.Tensor:
    """The per-group path: shifted ids, one call per group, blocks placed by hand."""
    per_key = lengths.view(KEYS, BATCH)
    starts = [0, *torch.cumsum(per_key.sum(1), 0).tolist()]
    out = torch.zeros(BATCH, WIDTH)
    for g, module in enumerate(groups):
        reads = [r for r in READS if r.group == g]
        ids = shift_ids(
            [values[starts[r.key] : starts[r.key + 1]].long() for r in reads],
            [module.row_offsets[r.table] for r in reads],
        )
        group_lengths = torch.cat([per_key[r.key] for r in reads])
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(group_lengths, 0)])
        pooled = module(ids, offsets)
        pooled.backward(torch.cat([grad[:, r.col : r.col + module.dim] for r in reads]))
        for i, r in enumerate(reads):
            out[:, r.col : r.col + module.dim] = pooled[i * BATCH : (i + 1) * BATCH].detach()
    return out


@needs_native
@pytest.mark.parametrize("presort", [False, True])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_matches_the_per_group_lookup_and_update(
    monkeypatch: pytest.MonkeyPatch, optimizer: str, dtype: torch.dtype, presort: bool
) -> None:
    monkeypatch.delitem(KERNELS, "fbgemm", raising=False)  # the reference on the native kernel
    monkeypatch.setattr(segments_module, "PRESORT_MIN_IDS", 0)  # presort these small batches
    ours = _groups(optimizer, seed=0)
    ref = copy.deepcopy(ours)
    for step in range(3):
        values, lengths = _batch(step, dtype)
        grad = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(10 + step))
        assert all(segment_lookup_unsupported(m, values) is None for m in ours)
        out = segment_lookup(ours, READS, values, lengths, BATCH, WIDTH, NAMES, presort=presort)
        want = _reference(ref, values, lengths, grad)
        assert_close(out.detach(), want, msg=f"step {step}")
        assert torch.equal(out[:, 20:28], torch.zeros(BATCH, 8))
        out.backward(grad)
        for mine, theirs in zip(ours, ref, strict=True):
            assert torch.equal(mine.packed_weight(), theirs.packed_weight()), step
            for name, state in mine.optimizer_state().items():
                assert torch.equal(state, theirs.optimizer_state()[name]), (step, name)
            assert int(mine._step) == int(theirs._step) == step + 1


def _assert_same_groups(
    mine: list[BatchedFusedEmbeddingBag], theirs: list[BatchedFusedEmbeddingBag], msg: str
) -> None:
    for a, b in zip(mine, theirs, strict=True):
        assert torch.equal(a.packed_weight(), b.packed_weight()), msg
        for name, state in a.optimizer_state().items():
            assert torch.equal(state, b.optimizer_state()[name]), (msg, name)
        assert int(a._step) == int(b._step), msg


def _lookup(
    groups: list[BatchedFusedEmbeddingBag], step: int, presort: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    values, lengths = _batch(step, torch.int32)
    out = segment_lookup(groups, READS, values, lengths, BATCH, WIDTH, NAMES, presort=presort)
    grad = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(10 + step))
    return out, grad


@needs_native
def test_presort_dropped_or_shared_updates_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """The forward's sort is given back when its graph is freed without a backward; a second
    forward before the first one's backward (the sort buffers taken) sorts in its backward; a
    gradient of another row stride drops the sort: every case updates as without presort."""
    monkeypatch.setattr(segments_module, "PRESORT_MIN_IDS", 0)
    ours = _groups("exact_row_wise_adagrad", seed=3)
    ref = copy.deepcopy(ours)
    spaces = [native_workspace(m.packed_weight()) for m in ours]
    # 1. forward without backward: the graph is freed, the buffers come back
    out, _ = _lookup(ours, 0, presort=True)
    assert all(ws._presort is None for ws in spaces)  # leased by the pending sort
    pending = out.grad_fn.presorted  # type: ignore[union-attr]  # the backward node's ctx
    for pre in pending:
        pre.wait()  # the sort ended: only the graph holds the buffers now
    del pending, pre, out
    assert all(ws._presort is not None for ws in spaces)
    # 2. two forwards, then one backward through both (gradient accumulation)
    first, g1 = _lookup(ours, 1, presort=True)
    second, g2 = _lookup(ours, 2, presort=True)
    ((first * g1).sum() + (second * g2).sum()).backward()
    r1, _ = _lookup(ref, 1, presort=False)
    r2, _ = _lookup(ref, 2, presort=False)
    ((r1 * g1).sum() + (r2 * g2).sum()).backward()
    _assert_same_groups(ours, ref, "two forwards, one backward")
    assert all(ws._presort is not None for ws in spaces)
    # 3. the gradient is a view into wider rows (row stride != WIDTH): sorted again
    out, grad = _lookup(ours, 3, presort=True)
    wide = torch.zeros(BATCH, WIDTH + 8)
    wide[:, :WIDTH] = grad
    out.backward(wide[:, :WIDTH])
    ref_out, _ = _lookup(ref, 3, presort=False)
    ref_out.backward(grad)
    _assert_same_groups(ours, ref, "strided gradient")
    assert all(ws._presort is not None for ws in spaces)


@needs_native
def test_without_grad_only_pools() -> None:
    groups = _groups("exact_row_wise_adagrad", seed=1)
    before = [m.packed_weight().clone() for m in groups]
    values, lengths = _batch(0, torch.int64)
    with torch.no_grad():
        out = segment_lookup(groups, READS, values, lengths, BATCH, WIDTH, NAMES)
    assert out.shape == (BATCH, WIDTH) and not out.requires_grad
    assert all(torch.equal(m.packed_weight(), w) for m, w in zip(groups, before, strict=True))


@needs_native
def test_an_id_outside_its_table_raises() -> None:
    groups = _groups("exact_sgd", seed=2)
    values, lengths = _batch(0, torch.int64)
    values[0] = 6  # key 0 reads table b (5 rows): out of range there
    with pytest.raises(IndexError, match="out of range for table 'b'"):
        segment_lookup(groups, READS, values, lengths, BATCH, WIDTH, NAMES)


def test_refuses_what_it_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    values = torch.zeros(3, dtype=torch.int64)
    adam = _groups("adam", seed=3)[0]
    assert "ADAM" in str(segment_lookup_unsupported(adam, values))
    assert "BatchedFusedEmbeddingBag" in str(
        segment_lookup_unsupported(torch.nn.Linear(2, 2), values)
    )
    assert "CPU" in str(segment_lookup_unsupported(_groups("exact_sgd", 3)[0], values.to("meta")))
    monkeypatch.delitem(KERNELS, "native")
    reason = segment_lookup_unsupported(_groups("exact_sgd", seed=3)[0], values)
    assert reason is not None and "native" in reason


def _segment_batch(
    seed: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[tuple[int, int, int, int, int], ...]]:
    """3 keys x 40 bags over two tables of 1500 / 1700 rows (26 buckets, chunks overflow), hot
    rows repeated, MEAN on one segment; key 1 read by both tables."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 30, (3 * 40,), generator=gen)
    values = torch.randint(0, 1500, (int(lengths.sum()),), generator=gen)
    values[::7] = 3  # a hot row
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)])
    grad = torch.randn(40, 3 * 32 + 8, generator=gen)
    segments = ((0, 0, 1500, 0, 0), (1, 1500, 1700, 32, 1), (1, 0, 1500, 64, 0))
    return values.to(dtype), offsets, grad, segments


@needs_native
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("background", [False, True])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("rule", ["rowwise_adagrad", "adagrad"])
def test_presorted_update_is_the_one_pass_update(
    rule: str, dtype: torch.dtype, background: bool, threads: int
) -> None:
    gen = torch.Generator().manual_seed(5)
    weight = torch.randn(3200, 32, generator=gen)
    state = torch.zeros(3200) if rule == "rowwise_adagrad" else torch.zeros(3200, 32)
    got, got_state = weight.clone(), state.clone()
    space, ref_space = AdagradWorkspace(), AdagradWorkspace()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for step in range(3):
            values, offsets, grad, segments = _segment_batch(step, dtype)
            n = int(offsets[40] - offsets[0]) + 2 * int(offsets[80] - offsets[40])
            args = (segments, values, offsets, 40)
            pre = native_segment_presort(
                3200, *args, grad.stride(0), space, n, background=background
            )
            assert pre is not None
            native_presorted_update(rule, got, got_state, pre, grad, 0.1, 1e-8, space)
            native_segment_update(rule, weight, state, *args, grad, 0.1, 1e-8, ref_space, n)
            assert torch.equal(got, weight) and torch.equal(got_state, state), step
            assert space._presort is not None  # given back
    finally:
        torch.set_num_threads(before)


@needs_native
def test_presort_buffers_are_one_forward_s_and_checked() -> None:
    space = AdagradWorkspace()
    values, offsets, grad, segments = _segment_batch(0, torch.int64)
    n = int(offsets[-1])  # an upper bound is enough for the buffers
    pre = native_segment_presort(
        3200, segments, values, offsets, 40, grad.stride(0), space, n, background=True
    )
    assert pre is not None
    # taken: a second sort before the first one's update goes without
    again = native_segment_presort(
        3200, segments, values, offsets, 40, grad.stride(0), space, n, background=False
    )
    assert again is None
    with pytest.raises(ValueError, match="sorted for 3200 rows and gradient row stride 104"):
        native_presorted_update(
            "rowwise_adagrad", torch.zeros(3000, 32), torch.zeros(3000), pre, grad, 0.1, 1e-8,
            space,
        )  # fmt: skip
    assert space._presort is not None  # given back even so
    # nothing to sort
    assert (
        native_segment_presort(3200, (), values, offsets, 40, 104, space, 0, background=True)
        is None
    )


@needs_native
def test_a_group_keeps_one_workspace_across_steps() -> None:
    group = _groups("exact_row_wise_adagrad", seed=4)[0]
    first, second = group.packed_weight(), group.packed_weight()
    assert first is not second  # a fresh view each call ...
    assert native_workspace(first) is native_workspace(second)  # ... one workspace
