"""The table-batched kernels against torch's own per-call embedding_bag on a concatenated table."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import shardrec_embedding.batched_lookup as bl
from shardrec_embedding import PoolingType
from shardrec_testing import assert_close, random_lengths, seeded_generator


def _packed_params(rows: list[int], dim: int, gen: torch.Generator) -> list[torch.nn.Parameter]:
    params = [torch.nn.Parameter(v) for v in bl.allocate_packed(rows, dim, dtype=torch.float32)]
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn(p.shape, generator=gen))
    return params


def _case(rows: list[int], batch: int, seed: object) -> tuple[torch.Tensor, torch.Tensor]:
    """Group ids over `rows` tables (one segment each) and `(len(rows) * batch + 1,)` offsets."""
    gen = seeded_generator("case", seed)
    lengths = torch.cat([random_lengths(batch, 5, gen) for _ in rows])
    counts = lengths.view(len(rows), batch).sum(1).tolist()
    segs = [torch.randint(0, r, (n,), generator=gen) for r, n in zip(rows, counts, strict=True)]
    starts = torch.tensor([0, *rows[:-1]]).cumsum(0).tolist()
    ids = bl.shift_ids(segs, starts)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    return ids, offsets


@settings(max_examples=25, deadline=None)
@given(
    rows=st.lists(st.integers(1, 30), min_size=1, max_size=5),
    dim=st.integers(1, 9),
    batch=st.integers(0, 6),
    pooling=st.sampled_from([PoolingType.SUM, PoolingType.MEAN]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_pooled_matches_torch_on_concatenated_weights(
    rows: list[int], dim: int, batch: int, pooling: PoolingType, weighted: bool, seed: int
) -> None:
    weighted = weighted and pooling is PoolingType.SUM
    gen = seeded_generator("pooled", seed)
    params = _packed_params(rows, dim, gen)
    ids, offsets = _case(rows, batch, seed)
    psw = torch.rand(ids.numel(), generator=gen).requires_grad_() if weighted else None
    out = bl.batched_embedding_bag(
        params, ids, offsets, pooling=pooling, per_sample_weights=psw, workspace=bl.GradWorkspace()
    )
    grad = torch.randn(out.shape, generator=gen)
    (out * grad).sum().backward()

    ref_params = [p.detach().clone().requires_grad_() for p in params]
    ref_psw = None if psw is None else psw.detach().clone().requires_grad_()
    ref = torch.nn.functional.embedding_bag(
        ids,
        torch.cat(ref_params),
        offsets,
        mode=pooling.value.lower(),
        per_sample_weights=ref_psw,
        include_last_offset=True,
    )
    (ref * grad).sum().backward()
    assert_close(out, ref)
    for p, r in zip(params, ref_params, strict=True):
        assert p.grad is not None and r.grad is not None
        assert_close(p.grad, r.grad)
    if psw is not None:
        assert psw.grad is not None and ref_psw is not None and ref_psw.grad is not None
        assert_close(psw.grad, ref_psw.grad)


def test_sequence_lookup_and_duplicate_ids() -> None:
    gen = seeded_generator("seq")
    params = _packed_params([4, 6], 3, gen)
    ids = torch.tensor([0, 0, 3, 4, 9, 9, 9])
    out = bl.batched_embedding(params, ids)
    assert_close(out, torch.cat([p.detach() for p in params])[ids])
    out.sum().backward()
    assert params[0].grad is not None and params[1].grad is not None
    assert params[0].grad[0].tolist() == [2.0, 2.0, 2.0]
    assert params[1].grad[5].tolist() == [3.0, 3.0, 3.0]
    assert float(params[1].grad[1].abs().sum()) == 0.0


def test_unpacked_weights_fall_back_to_a_copy() -> None:
    gen = seeded_generator("unpacked")
    params = [torch.nn.Parameter(torch.randn(5, 2, generator=gen)) for _ in range(3)]
    assert bl.packed_weight(params) is None
    ids = torch.tensor([0, 7, 14, 3])
    offsets = torch.tensor([0, 2, 4])
    out = bl.batched_embedding_bag(params, ids, offsets)
    full = torch.cat([p.detach() for p in params])
    assert_close(out, torch.stack([full[0] + full[7], full[14] + full[3]]))
    out.sum().backward()
    assert params[2].grad is not None and params[2].grad[4].tolist() == [1.0, 1.0]


def test_repack_keeps_parameter_identity_and_values() -> None:
    gen = seeded_generator("repack")
    params = [torch.nn.Parameter(torch.randn(n, 3, generator=gen)) for n in (2, 5, 1)]
    before = [p.detach().clone() for p in params]
    ids_before = [id(p) for p in params]
    bl.repack_(params)
    full = bl.packed_weight(params)
    assert full is not None and full.shape == (8, 3)
    assert [id(p) for p in params] == ids_before
    for p, b in zip(params, before, strict=True):
        assert torch.equal(p.detach(), b)
    assert torch.equal(full, torch.cat(before))


def test_workspace_reused_only_when_gradients_were_dropped() -> None:
    gen = seeded_generator("workspace")
    params = _packed_params([3, 3], 2, gen)
    ws = bl.GradWorkspace()
    ids, offsets = torch.tensor([0, 4]), torch.tensor([0, 1, 2])

    bl.batched_embedding_bag(params, ids, offsets, workspace=ws).sum().backward()
    kept = params[0].grad
    assert kept is not None
    kept_copy = kept.clone()
    # A second backward while the first gradients are held must not overwrite them.
    bl.batched_embedding_bag(params, torch.tensor([1, 5]), offsets, workspace=ws).sum().backward()
    assert params[0].grad is not None
    assert params[0].grad.tolist() == [[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]
    assert torch.equal(kept_copy, torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]))

    for p in params:
        p.grad = None
    del kept
    bl.batched_embedding_bag(params, torch.tensor([2, 3]), offsets, workspace=ws).sum().backward()
    assert params[0].grad is not None and params[1].grad is not None
    assert params[0].grad.tolist() == [[0.0, 0.0], [0.0, 0.0], [1.0, 1.0]]
    assert params[1].grad.tolist() == [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]


def test_no_grad_path_and_empty_input() -> None:
    gen = seeded_generator("nograd")
    params = _packed_params([3], 4, gen)
    with torch.no_grad():
        out = bl.batched_embedding_bag(
            params, torch.zeros(0, dtype=torch.int64), torch.zeros(3, dtype=torch.int64)
        )
    assert out.shape == (2, 4) and float(out.abs().sum()) == 0.0
    assert bl.batched_embedding(params, torch.zeros(0, dtype=torch.int64)).shape == (0, 4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_tables(dtype: torch.dtype) -> None:
    gen = seeded_generator("half", str(dtype))
    params = [torch.nn.Parameter(v) for v in bl.allocate_packed([6, 4], 8, dtype=dtype)]
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn(p.shape, generator=gen))
    ids, offsets = torch.tensor([0, 1, 7, 9, 9]), torch.tensor([0, 3, 3, 5])
    out = bl.batched_embedding_bag(params, ids, offsets, pooling=PoolingType.MEAN)
    assert out.dtype == dtype
    full = torch.cat([p.detach().float() for p in params])
    expected = torch.stack([full[[0, 1, 7]].mean(0), torch.zeros(8), full[[9, 9]].mean(0)])
    assert_close(out, expected.to(dtype), scale=4)
    out.float().sum().backward()
    assert params[1].grad is not None and params[1].grad.dtype == dtype
    assert_close(params[1].grad[3].float(), torch.full((8,), 1.0))


def test_bag_pooling_rejects_none_and_weighted_mean() -> None:
    params = _packed_params([3], 2, seeded_generator("bad"))
    ids, offsets = torch.tensor([0]), torch.tensor([0, 1])
    with pytest.raises(ValueError, match="NONE"):
        bl.batched_embedding_bag(params, ids, offsets, pooling=PoolingType.NONE)
    with pytest.raises(ValueError, match="MEAN"):
        bl.batched_embedding_bag(
            params, ids, offsets, pooling=PoolingType.MEAN, per_sample_weights=torch.ones(1)
        )


def test_shift_ids_and_range_report() -> None:
    segs = [
        torch.tensor([0, 2], dtype=torch.int32),
        torch.tensor([], dtype=torch.int32),
        torch.tensor([1]),
    ]
    assert bl.shift_ids(segs, [0, 3, 10]).tolist() == [0, 2, 11]
    assert bl.shift_ids(segs, [0, 3, 10]).dtype == torch.int64
    bad = bl.out_of_range_segments(
        [torch.tensor([0, 3, 1]), torch.tensor([-2, 0]), torch.tensor([4])], [3, 5, 5]
    )
    assert bad == [(0, 3), (1, -2)]
