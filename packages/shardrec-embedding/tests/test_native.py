"""Native CPU kernels: parity with the torch path, fallback, build cache, the torch ops."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import shardrec_embedding.embedding_bag_collection as ebc_module
from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    FeatureProcessedEmbeddingBagCollection,
    PoolingType,
    PositionWeightedModule,
)
from shardrec_embedding._native import (
    MAX_DIM,
    AdagradWorkspace,
    native_applies,
    native_available,
    native_pooled_lookup,
    native_rowwise_adagrad,
    native_sgd,
)
from shardrec_embedding._native.updates import bucket_shift
from shardrec_embedding.fused import lookup as lookup_module
from shardrec_embedding.fused.kernels import NATIVE_KERNEL
from shardrec_embedding.fused.lookup import fused_update
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import (
    EmbOptimType,
    FusedOptimSpec,
    PooledGrad,
    PooledKernel,
    WeightDecayMode,
    init_state,
    pooled_update,
)
from shardrec_testing import assert_close, seeded_generator

needs_native = pytest.mark.skipif(
    not native_available(), reason="native kernels unavailable (no compiler or SHARDREC_NATIVE=0)"
)


def _table(name: str, rows: int, dim: int, features: list[str], **kw: Any) -> EmbeddingBagConfig:
    return EmbeddingBagConfig(
        name=name, num_embeddings=rows, embedding_dim=dim, feature_names=features, **kw
    )


def _tables(pooling: PoolingType = PoolingType.SUM) -> list[EmbeddingBagConfig]:
    # Widths: the specialized kernels (16, 32, 64, 128) and the generic one (8, 24, 40);
    # "shared" is read by two tables; one table has two features.
    return [
        _table("a", 50, 16, ["shared", "f1"], pooling=pooling),
        _table("b", 7, 24, ["f2"], pooling=pooling),
        _table("c", 30, 64, ["shared"], pooling=pooling),
        _table("d", 9, 8, ["f3"], pooling=pooling),
        _table("e", 40, 128, ["f4"], pooling=pooling),
        _table("f", 11, 32, ["f5"], pooling=pooling),
        _table("g", 13, 40, ["f6"], pooling=pooling),
    ]


def _torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ebc_module, "native_applies", lambda *args: False)


def _run(
    ebc: torch.nn.Module, kjt: KeyedJaggedTensor, seed: str
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    out = ebc(kjt).values()
    grad_out = torch.randn(out.shape, generator=seeded_generator("grad", seed))
    params = [p for p in ebc.parameters() if p.requires_grad]
    grads = torch.autograd.grad((out * grad_out).sum(), params, allow_unused=True)
    filled = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads, strict=True)]
    return out.detach(), filled


@needs_native
@pytest.mark.parametrize("pooling", [PoolingType.SUM, PoolingType.MEAN])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("batch", [0, 1, 5, 130])
def test_native_matches_torch_path_and_reference(
    helpers: Any,
    monkeypatch: pytest.MonkeyPatch,
    pooling: PoolingType,
    weighted: bool,
    index_dtype: torch.dtype,
    batch: int,
) -> None:
    if weighted and pooling is PoolingType.MEAN:
        pytest.skip("weights need SUM pooling")
    tables = _tables(pooling)
    torch.manual_seed(0)
    ebc = EmbeddingBagCollection(tables, is_weighted=weighted)
    seed = f"{pooling}-{weighted}-{batch}"
    kjt = helpers.random_kjt(tables, batch, seed, max_length=5, weighted=weighted)
    kjt = KeyedJaggedTensor(
        keys=kjt.keys(),
        values=kjt.values().to(index_dtype),
        lengths=kjt.lengths(),
        weights=kjt.weights_or_none(),
        stride=batch,
    )
    calls: list[int] = []
    real = ebc_module.native_pooled_lookup
    monkeypatch.setattr(
        ebc_module, "native_pooled_lookup", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    native_out, native_grads = _run(ebc, kjt, seed)
    assert calls, "the native kernel did not run"
    expected = helpers.naive_pooled(
        tables, {t.name: ebc.embedding_bags[t.name].weight.detach() for t in tables}, kjt
    )
    assert_close(native_out, torch.cat(list(expected.values()), 1))
    _torch_path(monkeypatch)
    torch_out, torch_grads = _run(ebc, kjt, seed)
    assert_close(native_out, torch_out)
    for a, b in zip(native_grads, torch_grads, strict=True):
        assert_close(a, b)


@needs_native
def test_learnable_per_sample_weights_get_the_same_gradient(
    helpers: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tables = _tables()[:3]
    features = {f for t in tables for f in t.feature_names}
    torch.manual_seed(1)
    fp = FeatureProcessedEmbeddingBagCollection(
        EmbeddingBagCollection(tables, is_weighted=True),
        {f: PositionWeightedModule(max_feature_length=6) for f in sorted(features)},
    )
    with torch.no_grad():
        for p in fp.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
    kjt = helpers.random_kjt(tables, 6, "psw", max_length=5)
    native = _run(fp, kjt, "psw")
    _torch_path(monkeypatch)
    reference = _run(fp, kjt, "psw")
    assert_close(native[0], reference[0])
    for a, b in zip(native[1], reference[1], strict=True):
        assert_close(a, b)


@needs_native
@pytest.mark.parametrize("bad", [10, 4096, -1])
@pytest.mark.parametrize("check_ids", [True, False])
def test_out_of_range_message_is_the_torch_paths(bad: int, check_ids: bool) -> None:
    # The native kernel checks every id it reads (for free), even with check_ids=False: an
    # out-of-range id would otherwise read outside its table's storage.
    tables = [_table("big", 5000, 4, ["user"]), _table("user_table", 10, 4, ["item"])]
    ebc = EmbeddingBagCollection(tables, check_ids=check_ids)
    kjt = KeyedJaggedTensor(
        keys=["user", "item"],
        values=torch.tensor([3, 4999, 1, bad]),
        lengths=torch.tensor([2, 0, 1, 1]),
    )
    with pytest.raises(IndexError) as err:
        ebc(kjt)
    assert str(err.value) == (
        f"feature 'item' id {bad} is out of range for table 'user_table' with 10 rows "
        "(valid ids: [0, 10)); pass check_ids=False only for pipelines whose ids are known "
        "to be in range"
    )


@needs_native
def test_first_bad_segment_in_output_order_is_reported() -> None:
    tables = [_table("t0", 5, 4, ["f0"]), _table("t1", 5, 4, ["f1"])]
    ebc = EmbeddingBagCollection(tables)
    # f1 comes first in the KJT, but t0 (f0) comes first in the output: f0's id is reported.
    kjt = KeyedJaggedTensor(
        keys=["f1", "f0"], values=torch.tensor([7, 0, 6]), lengths=torch.tensor([1, 0, 1, 1])
    )
    with pytest.raises(IndexError, match="feature 'f0' id 6 is out of range for table 't0'"):
        ebc(kjt)


def test_wide_tables_use_the_torch_path(helpers: Any) -> None:
    tables = [_table("t", 6, MAX_DIM + 8, ["f"])]
    ebc = EmbeddingBagCollection(tables)
    assert not native_applies([ebc.embedding_bags["t"].weight], torch.zeros(1, dtype=torch.int64))
    kjt = helpers.random_kjt(tables, 3, "wide")
    expected = helpers.naive_pooled(tables, {"t": ebc.embedding_bags["t"].weight.detach()}, kjt)
    assert_close(ebc(kjt).values().detach(), expected["f"])


def test_half_tables_are_not_taken() -> None:
    # fp16 / bf16 groups keep the torch path (test_half_precision_tables checks its values).
    half = torch.zeros(4, 8, dtype=torch.float16)
    assert not native_applies([half], torch.zeros(1, dtype=torch.int64))


@needs_native
def test_negative_lengths_of_an_unvalidated_kjt_are_refused() -> None:
    # The kernel trusts offsets; an unvalidated KJT with a negative length must not reach it.
    ebc = EmbeddingBagCollection([_table("t", 10, 4, ["f"])])
    kjt = KeyedJaggedTensor(keys=["f"], values=torch.tensor([1, 2]), lengths=torch.tensor([3, -1]))
    with pytest.raises(ValueError, match=r"lengths\[1\] < 0: lengths must be >= 0"):
        ebc(kjt)


@needs_native
def test_ops_pass_opcheck() -> None:
    gen = seeded_generator("opcheck")
    weights = [torch.randn(6, 8, generator=gen), torch.randn(4, 16, generator=gen)]
    values = torch.tensor([0, 3, 2, 3, 1, 1, 0, 3])
    offsets = torch.tensor([0, 2, 3, 3, 6, 8])  # F = 2 keys, B = 2 (+ an unused key)
    psw = torch.rand(8, generator=gen)
    for w in weights:
        w.requires_grad_(True)
    args = (
        weights,
        values,
        offsets,
        psw,
        [0, 1, 0],
        [1, 0, 0],
        [0, 0, 0],
        2,
        "a\x1fx\x1fb\x1fy\x1fc\x1fz",
    )
    torch.library.opcheck(torch.ops.shardrec.pooled_lookup.default, args)
    psw.requires_grad_(True)
    torch.library.opcheck(torch.ops.shardrec.pooled_lookup.default, args)


@needs_native
def test_torch_compile_and_export_see_one_op() -> None:
    weights = [torch.randn(6, 8), torch.randn(4, 16)]

    class Lookup(torch.nn.Module):
        def forward(self, values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
            return native_pooled_lookup(
                weights,
                values,
                offsets,
                None,
                segment_tables=[0, 1],
                segment_keys=[1, 0],
                segment_means=[1, 0],
                batch_size=2,
                names="a\x1fx\x1fb\x1fy",
            )

    values = torch.tensor([0, 3, 2, 3, 1])
    offsets = torch.tensor([0, 2, 3, 3, 5])
    eager = Lookup()(values, offsets)
    exported = torch.export.export(Lookup(), (values, offsets), strict=False)
    assert "shardrec.pooled_lookup" in str(exported.graph)
    assert_close(exported.module()(values, offsets), eager)


_SCRIPT = textwrap.dedent(
    """
    import warnings, torch
    from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
    from shardrec_embedding._native import NativeUnavailableWarning, native_available
    from shardrec_jagged import KeyedJaggedTensor
    torch.manual_seed(0)
    tables = [EmbeddingBagConfig(name="t", num_embeddings=20, embedding_dim=8,
                                 feature_names=["f"])]
    ebc = EmbeddingBagCollection(tables)
    kjt = KeyedJaggedTensor(keys=["f"], values=torch.tensor([1, 2, 19, 4]),
                            lengths=torch.tensor([2, 0, 2]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = [ebc(kjt).values() for _ in range(3)][0]
    found = [str(w.message) for w in caught if w.category is NativeUnavailableWarning]
    print(native_available(), len(found), found[0] if found else "")
    torch.save(out, {path!r})
    """
)


def _subprocess(tmp_path: Path, name: str, **env: str) -> tuple[str, torch.Tensor]:
    path = tmp_path / f"{name}.pt"
    # Only what the test sets: a SHARDREC_NATIVE=0 / CC of the calling shell must not leak in.
    inherited = {k: v for k, v in os.environ.items() if k not in ("SHARDREC_NATIVE", "CC")}
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(path=str(path))],
        capture_output=True,
        text=True,
        env={**inherited, "XDG_CACHE_HOME": str(tmp_path / "cache"), **env},
        timeout=240,
        check=True,
    )
    out: torch.Tensor = torch.load(path)
    return result.stdout.strip(), out


def test_fallback_warns_once_and_matches(tmp_path: Path) -> None:
    off, off_out = _subprocess(tmp_path, "off", SHARDREC_NATIVE="0")
    assert off.startswith("False 1 ") and "SHARDREC_NATIVE=0" in off
    broken, broken_out = _subprocess(tmp_path, "broken", CC=str(tmp_path / "no-such-cc"))
    assert broken.startswith("False 1 ") and "no C compiler" in broken
    assert_close(off_out, broken_out)
    # Built here, or turned off here only by the caller's SHARDREC_NATIVE=0 (not inherited).
    turned_off = os.environ.get("SHARDREC_NATIVE") == "0" and shutil.which("cc") is not None
    if native_available() or turned_off:
        on, on_out = _subprocess(tmp_path, "on")
        assert on == "True 0"
        assert_close(on_out, off_out)
        built = list((tmp_path / "cache" / "shardrec" / "native").iterdir())
        assert len(built) == 1 and built[0].suffix == ".so", built
        # A second process loads the cached build instead of compiling again.
        stamp = built[0].stat().st_mtime_ns
        _subprocess(tmp_path, "again")
        assert [p.stat().st_mtime_ns for p in built] == [stamp]


# ---- fused backward ------------------------------------------------------------------------

NATIVE_SPECS = [
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.3),
    FusedOptimSpec(optimizer=EmbOptimType.SGD, learning_rate=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.2, eps=1e-6),
    FusedOptimSpec(optimizer=EmbOptimType.ROWWISE_ADAGRAD, learning_rate=0.05),
    # Elementwise Adagrad's first step is lr * g / (|g| + eps): where |g| is near eps an ulp of
    # g (the torch path sums duplicates with embedding_bag's FMA kernel, ours adds them in input
    # order without FMA) moves w by up to lr * ulp(g) / (4 eps). With eps 1e-5 one element of
    # 5760 differed by 2.1e-5 (the tolerance is 1e-5); 1e-3 keeps every element within it.
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_ADAGRAD, learning_rate=0.1, eps=1e-3),
]


@needs_native
@pytest.mark.parametrize("spec", NATIVE_SPECS, ids=lambda s: s.optimizer.name)
@pytest.mark.parametrize("dim", [8, 32, 64, 20])
def test_native_and_torch_fused_updates_agree_over_steps(
    helpers: Any, spec: FusedOptimSpec, pooled_case: tuple[PoolingType, bool], dim: int
) -> None:
    pooling, weighted = pooled_case
    helpers.backend_matches_torch_over_steps(
        "native", spec, pooling, weighted, rows=90, dim=dim, bags=40, max_length=6
    )


def _hot_batch(
    seed: int, rows: int, dim: int, bags: int, weighted: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Ids over all `rows` (many 64-row buckets, more touched rows than one chunk holds), a
    quarter of them one hot row, every fifth bag empty."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 13, (bags,), generator=gen)
    lengths[::5] = 0
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    n = int(offsets[-1])
    ids = torch.randint(0, rows, (n,), generator=gen)
    ids[torch.rand(n, generator=gen) < 0.25] = 7
    psw = torch.rand(n, generator=gen) + 0.5 if weighted else None
    return ids, offsets, psw, torch.randn(bags, dim, generator=gen)


@needs_native
@pytest.mark.parametrize("spec", NATIVE_SPECS[::2], ids=lambda s: s.optimizer.name)
@pytest.mark.parametrize("threads", [1, 2])
def test_native_update_over_many_buckets_chunks_and_threads(
    spec: FusedOptimSpec, threads: int, pooled_case: tuple[PoolingType, bool]
) -> None:
    pooling, weighted = pooled_case
    # 3000 rows = 47 buckets; ~2000 touched rows of dim 32 overflow a chunk (512 rows)
    rows, dim = 3000, 32
    weight = torch.randn(rows, dim, generator=torch.Generator().manual_seed(3))
    got, want = weight.clone(), weight.clone()
    st_got, st_want = init_state(spec.optimizer, rows, dim), init_state(spec.optimizer, rows, dim)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for step in range(1, 4):
            ids, offsets, psw, grad_out = _hot_batch(step, rows, dim, 600, weighted)
            args = (spec, ids, offsets, psw, pooling, grad_out, spec.learning_rate, step)
            fused_update(got, st_got, *args, backend="native")
            fused_update(want, st_want, *args, backend="torch")
            # The hot row's ~900 gradients a step are summed in another order than torch's
            # (input order without FMA here; torch sorts and sums with embedding_bag's FMA
            # kernel; SGD adds each id's step to the row in turn): float32 sums of n terms
            # differ by ~sqrt(n) ulps, 3.6e-5 relative measured, hence 1e-4 instead of 1.3e-5.
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            for name in st_want:
                torch.testing.assert_close(st_got[name], st_want[name], rtol=1e-4, atol=1e-4)
    finally:
        torch.set_num_threads(before)
    assert not torch.equal(got, weight)


def _has_avx512f() -> bool:
    try:
        return " avx512f " in Path("/proc/cpuinfo").read_text().replace("\n", " ")
    except OSError:
        return False


@needs_native
@pytest.mark.skipif(not _has_avx512f(), reason="the 16-row block is the AVX-512 path")
@pytest.mark.parametrize("rows", [16, 1000, 3001])
def test_rowwise_adagrad_at_dim_32_sums_squares_in_its_fixed_order(rows: int) -> None:
    """kernels.c's dim-32 rowwise Adagrad (16 rows a block, then the rest one by one) sums a
    row's squares as lanes g[l]^2 + g[l + 16]^2 added l = 0..15 in turn (the order the
    inlined `omp simd` loop had until session 12): bitwise a float32 reference in that order,
    once-seen rows (their gradient is the bag's row times its per-sample weight)."""
    gen = torch.Generator().manual_seed(rows)
    dim, lr, eps = 32, 0.2, 1e-6
    ids = torch.randperm(rows, generator=gen)
    grad_out = torch.randn(rows, dim, generator=gen) * 3
    psw = torch.rand(rows, generator=gen) + 0.5
    weight = torch.randn(rows, dim, generator=gen)
    momentum = torch.rand(rows, generator=gen)
    w_ref, m_ref = weight.numpy().copy(), momentum.numpy().copy()
    spec = NATIVE_SPECS[2]
    grad = PooledGrad(
        spec=spec, weight=weight, state={"momentum1": momentum}, ids=ids,
        offsets=torch.arange(rows + 1), per_sample_weights=psw, mean=False,
        grad_out=grad_out, learning_rate=lr, step=1,
    )  # fmt: skip
    native_rowwise_adagrad(grad, AdagradWorkspace())
    f32 = np.float32
    g = grad_out.numpy()
    sq = g[:, :16] * g[:, :16] + g[:, 16:] * g[:, 16:]
    total = sq[:, 0].copy()
    for lane in range(1, 16):
        total = (total + sq[:, lane]).astype(f32)
    scale = psw.numpy()
    rows_of = ids.numpy()
    acc = (m_ref[rows_of] + scale * scale * total / f32(dim)).astype(f32)
    mult = (f32(lr) / (np.sqrt(acc) + f32(eps)) * scale).astype(f32)
    m_ref[rows_of] = acc
    w_ref[rows_of] -= mult[:, None] * g
    assert spec.eps == eps
    assert np.array_equal(momentum.numpy(), m_ref)
    assert np.array_equal(weight.numpy(), w_ref)


def test_bucket_shift_widens_buckets_only_for_huge_tables() -> None:
    assert [bucket_shift(r) for r in (0, 1, 128, 100_000, 2**29)] == [7] * 5
    assert bucket_shift(2**29 + 1) == 8
    assert bucket_shift(2**31) == 9


@needs_native
def test_native_update_of_an_empty_batch_changes_nothing() -> None:
    weight, momentum = torch.ones(10, 4), torch.zeros(10)
    spec = NATIVE_SPECS[2]
    for offsets in (torch.zeros(1, dtype=torch.int64), torch.zeros(4, dtype=torch.int64)):
        grad = PooledGrad(
            spec=spec, weight=weight, state={"momentum1": momentum},
            ids=torch.zeros(0, dtype=torch.int64), offsets=offsets, per_sample_weights=None,
            mean=False, grad_out=torch.ones(offsets.numel() - 1, 4), learning_rate=0.1, step=1,
        )  # fmt: skip
        native_rowwise_adagrad(grad, AdagradWorkspace())
        native_sgd(grad)
    assert torch.equal(weight, torch.ones(10, 4)) and torch.equal(momentum, torch.zeros(10))


@needs_native
def test_auto_backend_takes_native_and_batches_grow_the_scratch(
    helpers: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    native = lookup_module.KERNELS["native"]
    counting = dataclasses.replace(native, update=lambda *a: calls.append(1) or native.update(*a))
    monkeypatch.setitem(lookup_module.KERNELS, "native", counting)
    monkeypatch.delitem(lookup_module.KERNELS, "fbgemm")
    spec = NATIVE_SPECS[2]
    weight, reference = torch.zeros(30, 4), torch.zeros(30, 4)
    state, ref_state = init_state(spec.optimizer, 30, 4), init_state(spec.optimizer, 30, 4)
    for step, bags in enumerate([3, 50, 7], start=1):  # the second batch outgrows the first's
        ids, offsets, psw, grad_out = helpers.fused_batch(
            step, 30, 4, bags=bags, weighted=False, max_length=6
        )
        args = (spec, ids, offsets, psw, PoolingType.SUM, grad_out, 0.2, step)
        fused_update(weight, state, *args)
        fused_update(reference, ref_state, *args, backend="torch")
    assert len(calls) == 3
    assert_close(weight, reference)


@needs_native
def test_auto_prefers_native_for_rowwise_adagrad_even_where_fbgemm_runs(
    helpers: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken: list[str] = []
    fbgemm = PooledKernel(unsupported=lambda *a: None, update=lambda *a: taken.append("fbgemm"))
    native = lookup_module.KERNELS["native"]
    monkeypatch.setitem(lookup_module.KERNELS, "fbgemm", fbgemm)
    monkeypatch.setitem(
        lookup_module.KERNELS,
        "native",
        dataclasses.replace(native, update=lambda *a: taken.append("native")),
    )
    for optimizer in (EmbOptimType.EXACT_ROWWISE_ADAGRAD, EmbOptimType.EXACT_SGD):
        spec = FusedOptimSpec(optimizer=optimizer, learning_rate=0.1)
        ids, offsets, psw, grad_out = helpers.fused_batch(
            1, 10, 4, bags=5, weighted=False, max_length=6
        )
        state = init_state(optimizer, 10, 4)
        fused_update(
            torch.zeros(10, 4), state, spec, ids, offsets, psw, PoolingType.SUM, grad_out, 0.1, 1
        )
    assert taken == ["native", "native"]  # issue 28: native first for rowwise Adagrad too


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (FusedOptimSpec(optimizer=EmbOptimType.ADAM, learning_rate=0.1), "not ADAM"),
        (
            FusedOptimSpec(
                optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD,
                learning_rate=0.1,
                weight_decay=0.1,
                weight_decay_mode=WeightDecayMode.L2,
            ),
            "no weight decay",
        ),
    ],
)
def test_native_backend_refuses_what_it_cannot_run(
    helpers: Any, spec: FusedOptimSpec, match: str
) -> None:
    ids, offsets, psw, grad_out = helpers.fused_batch(
        0, 10, 4, bags=5, weighted=False, max_length=6
    )
    state = init_state(spec.optimizer, 10, 4)
    with pytest.raises(ValueError, match=f"native backend cannot run this update: .*{match}"):
        fused_update(
            torch.zeros(10, 4),
            state,
            spec,
            ids,
            offsets,
            psw,
            PoolingType.SUM,
            grad_out,
            0.1,
            1,
            backend="native",
        )


def test_native_backend_refuses_a_half_weight(helpers: Any) -> None:
    spec = NATIVE_SPECS[0]
    ids, offsets, psw, grad_out = helpers.fused_batch(
        0, 10, 4, bags=5, weighted=False, max_length=6
    )
    with pytest.raises(ValueError, match=r"float32 CPU weight, got torch\.float16"):
        fused_update(
            torch.zeros(10, 4, dtype=torch.float16),
            {},
            spec,
            ids,
            offsets,
            psw,
            PoolingType.SUM,
            grad_out.half(),
            0.1,
            1,
            backend="native",
        )


@needs_native
def test_native_backend_refuses_a_batch_beyond_int32_entries() -> None:
    spec = NATIVE_SPECS[2]
    huge = 2**31
    grad = PooledGrad(
        spec=spec, weight=torch.zeros(10, 4), state=init_state(spec.optimizer, 10, 4),
        ids=torch.zeros(1, dtype=torch.int64).expand(huge), offsets=torch.tensor([0, huge]),
        per_sample_weights=None, mean=False, grad_out=torch.zeros(1, 4), learning_rate=0.1,
        step=1,
    )  # fmt: skip
    reason = NATIVE_KERNEL.unsupported(grad)
    assert reason is not None and f"at most {huge - 1} ids and bags" in reason
    with pytest.raises(ValueError, match="at most"):
        pooled_update(grad, kernels={"native": NATIVE_KERNEL}, backend="native")
