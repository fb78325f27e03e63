"""Triton kernels against the torch-native path: pooled forward and fused rowwise-Adagrad
backward.

Tests marked `triton` need Triton: on a machine without a GPU they run the kernels on CPU
tensors in Triton's interpreter (`TRITON_INTERPRET=1`, set here before the kernels are first
imported; `nox -s triton` sets it too), and skip when Triton does not import. Shapes are small:
the interpreter runs every program in Python. The dispatch and fallback tests run everywhere.
"""

from __future__ import annotations

import os
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    # Must precede the first import of the kernels: triton.jit reads it at decoration time.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from shardrec_embedding.configs import PoolingType
from shardrec_embedding.fused.lookup import fused_update
from shardrec_embedding.triton import (
    MAX_DIM,
    TritonUnavailableWarning,
    backward_applies,
    forward_applies,
    pooled_embedding_bag,
    triton_available,
)
from shardrec_embedding.triton import _loader as loader
from shardrec_optim import EmbOptimType, FusedOptimSpec, WeightDecayMode, init_state

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _triton_or_skip() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TritonUnavailableWarning)
        if not triton_available():
            pytest.skip("triton does not import here")
    if DEVICE.type == "cpu" and not loader.interpreting():
        pytest.skip("no GPU and TRITON_INTERPRET is not set")


def _bags(
    seed: int, rows: int, bags: int, max_len: int, weighted: bool, dup_range: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Random bags with some empty ones; ids from `[0, dup_range)` to force duplicates."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, max_len + 1, (bags,), generator=gen)
    lengths[::5] = 0
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    n = int(offsets[-1])
    ids = torch.randint(0, dup_range or rows, (n,), generator=gen)
    psw = torch.rand(n, generator=gen) * 2 - 0.5 if weighted else None
    return ids.to(DEVICE), offsets.to(DEVICE), None if psw is None else psw.to(DEVICE)


# -- pooled forward ---------------------------------------------------------------------------

FORWARD_CASES = [
    # (dim, pooling, weighted, max bag length, dtype)
    (8, "sum", False, 4, torch.float32),
    (12, "mean", False, 5, torch.float32),
    (16, "sum", True, 3, torch.float32),
    (130, "sum", False, 3, torch.float32),  # two column blocks, the second partial
    (4, "sum", False, 70, torch.float32),  # bags longer than one block of ids
    (8, "mean", False, 4, torch.float16),
    (8, "sum", True, 4, torch.float16),
]


@pytest.mark.triton
@pytest.mark.parametrize(("dim", "mode", "weighted", "max_len", "dtype"), FORWARD_CASES)
def test_pooled_forward_matches_embedding_bag(
    dim: int, mode: str, weighted: bool, max_len: int, dtype: torch.dtype
) -> None:
    _triton_or_skip()
    rows = 37
    gen = torch.Generator().manual_seed(dim)
    weight = torch.randn(rows, dim, generator=gen).to(dtype).to(DEVICE)
    ids, offsets, psw = _bags(dim + max_len, rows, bags=9, max_len=max_len, weighted=weighted)
    got = pooled_embedding_bag(
        weight,
        ids,
        offsets,
        mean=mode == "mean",
        per_sample_weights=None if psw is None else psw.to(dtype),
    )
    expected = F.embedding_bag(
        ids,
        weight.float(),
        offsets,
        mode=mode,
        per_sample_weights=None if psw is None else psw.to(dtype).float(),
        include_last_offset=True,
    )
    assert got.dtype == dtype and got.shape == (9, dim)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-3, "atol": 2e-3}
    torch.testing.assert_close(got.float(), expected, **tol)


@pytest.mark.triton
def test_pooled_forward_edge_cases() -> None:
    _triton_or_skip()
    weight = torch.randn(5, 3).to(DEVICE)
    # Zero bags.
    no_bags = torch.zeros(1, dtype=torch.int64, device=DEVICE)
    empty_ids = torch.zeros(0, dtype=torch.int64, device=DEVICE)
    assert pooled_embedding_bag(weight, empty_ids, no_bags).shape == (0, 3)
    # All bags empty: zeros, also for MEAN (no division by zero).
    offsets = torch.zeros(4, dtype=torch.int64, device=DEVICE)
    for mean in (False, True):
        out = pooled_embedding_bag(weight, empty_ids, offsets, mean=mean)
        assert torch.equal(out, torch.zeros(3, 3, device=DEVICE))
    # int32 ids and offsets, one id repeated in a bag.
    ids = torch.tensor([4, 4, 0], dtype=torch.int32, device=DEVICE)
    offsets32 = torch.tensor([0, 2, 3], dtype=torch.int32, device=DEVICE)
    expected = torch.stack([2 * weight[4], weight[0]])
    torch.testing.assert_close(pooled_embedding_bag(weight, ids, offsets32), expected)


def test_pooled_forward_rejects_weights_with_mean() -> None:
    weight = torch.zeros(3, 2)
    ids, offsets = torch.tensor([0]), torch.tensor([0, 1])
    with pytest.raises(ValueError, match="MEAN"):
        pooled_embedding_bag(weight, ids, offsets, mean=True, per_sample_weights=torch.ones(1))


# -- fused backward + rowwise Adagrad ---------------------------------------------------------

ROWWISE = [
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.2, eps=1e-6),
    FusedOptimSpec(optimizer=EmbOptimType.ROWWISE_ADAGRAD, learning_rate=0.05),
]


@pytest.mark.triton
@pytest.mark.parametrize("spec", ROWWISE, ids=lambda s: s.optimizer.name)
@pytest.mark.parametrize(
    ("pooling", "weighted", "dim"),
    [(PoolingType.SUM, False, 8), (PoolingType.SUM, True, 12), (PoolingType.MEAN, False, 5)],
    ids=["sum", "weighted-sum", "mean-odd-dim"],
)
def test_fused_backward_matches_torch_over_steps(
    spec: FusedOptimSpec, pooling: PoolingType, weighted: bool, dim: int
) -> None:
    _triton_or_skip()
    rows = 30
    weight = torch.randn(rows, dim, generator=torch.Generator().manual_seed(3)).to(DEVICE)
    w_torch, w_triton = weight.clone(), weight.clone()
    st_torch = init_state(spec.optimizer, rows, dim, device=DEVICE)
    st_triton = init_state(spec.optimizer, rows, dim, device=DEVICE)
    for step in range(1, 4):
        # Ids from a third of the rows: many duplicates within and across bags.
        ids, offsets, psw = _bags(step, rows, bags=10, max_len=5, weighted=weighted, dup_range=10)
        gen = torch.Generator().manual_seed(100 + step)
        grad_out = torch.randn(10, dim, generator=gen).to(DEVICE)
        args = (spec, ids, offsets, psw, pooling, grad_out, spec.learning_rate, step)
        fused_update(w_torch, st_torch, *args, backend="torch")
        fused_update(w_triton, st_triton, *args, backend="triton")
        torch.testing.assert_close(w_triton, w_torch, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(
            st_triton["momentum1"], st_torch["momentum1"], rtol=1e-5, atol=1e-6
        )
    assert not torch.equal(w_triton, weight)


@pytest.mark.triton
def test_fused_backward_one_hot_row_and_empty_batch() -> None:
    """All ids equal (one long segment), then a batch without ids (nothing changes)."""
    _triton_or_skip()
    spec = ROWWISE[0]
    weight = torch.randn(6, 4, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    w_torch, w_triton = weight.clone(), weight.clone()
    st_torch, st_triton = (init_state(spec.optimizer, 6, 4, device=DEVICE) for _ in range(2))
    ids = torch.full((9,), 2, dtype=torch.int64, device=DEVICE)
    offsets = torch.tensor([0, 4, 4, 9], device=DEVICE)
    grad_out = torch.randn(3, 4, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    args = (spec, ids, offsets, None, PoolingType.SUM, grad_out, 0.1, 1)
    fused_update(w_torch, st_torch, *args, backend="torch")
    fused_update(w_triton, st_triton, *args, backend="triton")
    torch.testing.assert_close(w_triton, w_torch)
    untouched = [0, 1, 3, 4, 5]
    assert torch.equal(w_triton[untouched], weight[untouched])
    before = w_triton.clone()
    empty = torch.zeros(0, dtype=torch.int64, device=DEVICE)
    zero_offsets = torch.zeros(3, dtype=torch.int64, device=DEVICE)
    fused_update(
        w_triton, st_triton, spec, empty, zero_offsets, None, PoolingType.SUM,
        torch.zeros(2, 4, device=DEVICE), 0.1, 2, backend="triton",
    )  # fmt: skip
    assert torch.equal(w_triton, before)


@pytest.mark.parametrize(
    ("spec", "weight", "match"),
    [
        (FusedOptimSpec(optimizer=EmbOptimType.ADAM), torch.zeros(4, 2), "ADAM"),
        (
            FusedOptimSpec(
                optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD,
                weight_decay=0.1,
                weight_decay_mode=WeightDecayMode.L2,
            ),
            torch.zeros(4, 2),
            "L2 0.1",
        ),
        (ROWWISE[0], torch.zeros(2, MAX_DIM + 1), str(MAX_DIM + 1)),
    ],
    ids=["adam", "weight-decay", "too-wide"],
)
def test_triton_backend_refuses_what_it_cannot_run(
    spec: FusedOptimSpec, weight: torch.Tensor, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        fused_update(
            weight,
            init_state(spec.optimizer, weight.shape[0], weight.shape[1]),
            spec,
            torch.tensor([1]),
            torch.tensor([0, 1]),
            None,
            PoolingType.SUM,
            torch.ones(1, weight.shape[1]),
            0.1,
            1,
            backend="triton",
        )


# -- dispatch and fallback --------------------------------------------------------------------


def test_auto_dispatch_uses_triton_only_on_cuda() -> None:
    spec = ROWWISE[0]
    cpu = torch.zeros(4, 8)
    # Never on CPU tensors, interpreter or not: "auto" keeps CPU lookups on torch / fbgemm.
    assert not forward_applies(cpu)
    assert not backward_applies(spec, cpu)
    if torch.cuda.is_available() and triton_available():
        gpu = cpu.to("cuda")
        assert forward_applies(gpu)
        assert backward_applies(spec, gpu)
        assert not backward_applies(FusedOptimSpec(optimizer=EmbOptimType.ADAM), gpu)


def test_missing_triton_warns_once_and_reports_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` raises ImportError
    monkeypatch.delitem(sys.modules, "shardrec_embedding.triton.kernels", raising=False)
    monkeypatch.delattr(sys.modules["shardrec_embedding.triton"], "kernels", raising=False)
    loader.triton_available.cache_clear()
    try:
        with pytest.warns(TritonUnavailableWarning, match="torch-native"):
            assert not loader.triton_available()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not loader.triton_available()  # cached: no second warning
        assert not forward_applies(torch.zeros(2, 2))
    finally:
        loader.triton_available.cache_clear()
