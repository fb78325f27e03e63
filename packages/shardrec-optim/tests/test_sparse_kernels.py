"""Row-sparse kernels against dense torch.optim and a per-row reference loop."""

from __future__ import annotations

import math

import pytest
import torch

from shardrec_optim import EmbOptimType, FusedOptimSpec, coalesce_rows, init_state, sparse_update

R, D = 12, 6


def _ref_step(
    spec: FusedOptimSpec,
    w: torch.Tensor,
    st: dict[str, torch.Tensor],
    rows: list[int],
    grads: torch.Tensor,
    t: int,
) -> None:
    """The documented formula, one row at a time in float64 Python arithmetic."""
    o, lr, eps, wd = spec.optimizer, spec.learning_rate, spec.eps, spec.weight_decay
    b1, b2 = spec.beta1, spec.beta2
    for i, r in enumerate(rows):
        g = grads[i].double()
        x = w[r].double()
        if o in (EmbOptimType.SGD, EmbOptimType.EXACT_SGD):
            new = x - lr * g
        elif o is EmbOptimType.EXACT_ADAGRAD:
            m = st["momentum1"][r].double() + g * g
            st["momentum1"][r] = m
            new = x - lr * g / (m.sqrt() + eps)
        elif o in (EmbOptimType.EXACT_ROWWISE_ADAGRAD, EmbOptimType.ROWWISE_ADAGRAD):
            mode = spec.weight_decay_mode.value
            gg = g + wd * x if mode == "l2" else g
            m = float(st["momentum1"][r]) + float((gg * gg).mean())
            st["momentum1"][r] = m
            mult = lr / (math.sqrt(m) + eps)
            c = {"l2": 1 - mult * wd, "decouple": 1 - lr * wd, "none": 1.0}[mode]
            new = c * x - mult * g
        elif o is EmbOptimType.LARS_SGD:
            wn, gn = float(x.norm()), float(g.norm())
            den = gn + wd * wn
            a = lr * spec.eta * wn / den if den > 0 else 0.0
            m = spec.momentum * st["momentum1"][r].double() + a * (g + wd * x)
            st["momentum1"][r] = m
            new = x - m
        else:
            m = b1 * st["momentum1"][r].double() + (1 - b1) * g
            st["momentum1"][r] = m
            rowwise = o in (EmbOptimType.PARTIAL_ROWWISE_ADAM, EmbOptimType.PARTIAL_ROWWISE_LAMB)
            if rowwise:
                v = b2 * float(st["momentum2"][r]) + (1 - b2) * float((g * g).mean())
                st["momentum2"][r] = v
                denom = math.sqrt(v / (1 - b2**t)) + eps
            else:
                v2 = b2 * st["momentum2"][r].double() + (1 - b2) * g * g
                st["momentum2"][r] = v2
                denom = (v2 / (1 - b2**t)).sqrt() + eps
            upd = (m / (1 - b1**t)) / denom + wd * x
            if o in (EmbOptimType.ADAM, EmbOptimType.PARTIAL_ROWWISE_ADAM):
                new = x - lr * upd
            else:
                ratio = float(x.norm()) / float(upd.norm()) if float(upd.norm()) > 0 else 0.0
                new = x - lr * ratio * upd
        w[r] = new.to(w.dtype)


SPECS = [
    FusedOptimSpec(optimizer=EmbOptimType.SGD, learning_rate=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_ADAGRAD, learning_rate=0.1, eps=1e-3),
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1, eps=1e-3),
    FusedOptimSpec(
        optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD,
        learning_rate=0.1,
        weight_decay=0.05,
        weight_decay_mode="l2",  # type: ignore[arg-type]  # plain string accepted
    ),
    FusedOptimSpec(
        optimizer=EmbOptimType.ROWWISE_ADAGRAD,
        learning_rate=0.1,
        weight_decay=0.05,
        weight_decay_mode="decouple",  # type: ignore[arg-type]  # plain string accepted
    ),
    FusedOptimSpec(optimizer=EmbOptimType.ADAM, learning_rate=0.05),
    FusedOptimSpec(optimizer=EmbOptimType.ADAM, learning_rate=0.05, weight_decay=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.PARTIAL_ROWWISE_ADAM, learning_rate=0.05, eps=1e-4),
    FusedOptimSpec(optimizer=EmbOptimType.LAMB, learning_rate=0.05, weight_decay=0.01),
    FusedOptimSpec(optimizer=EmbOptimType.PARTIAL_ROWWISE_LAMB, learning_rate=0.05),
    FusedOptimSpec(optimizer=EmbOptimType.LARS_SGD, learning_rate=0.5, eta=0.1, weight_decay=0.01),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.optimizer.name}-wd{s.weight_decay}")
def test_kernel_matches_reference_loop(spec: FusedOptimSpec) -> None:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(R, D, generator=gen)
    w_ref = w.clone()
    st = init_state(spec.optimizer, R, D)
    st_ref = {k: v.clone() for k, v in st.items()}
    for t in range(1, 6):
        rows = torch.randperm(R, generator=gen)[: 1 + t].sort().values
        grads = torch.randn(rows.numel(), D, generator=gen)
        _ref_step(spec, w_ref, st_ref, rows.tolist(), grads, t)
        sparse_update(spec, w, st, rows, grads.clone(), step=t)
    torch.testing.assert_close(w, w_ref, rtol=1e-5, atol=1e-6)
    for k in st:
        torch.testing.assert_close(st[k], st_ref[k], rtol=1e-5, atol=1e-6)


def _dense_vs_sparse(
    spec: FusedOptimSpec,
    make: type[torch.optim.Optimizer],
    kwargs: dict[str, object],
    all_rows: bool,
) -> None:
    gen = torch.Generator().manual_seed(1)
    w0 = torch.randn(R, D, generator=gen)
    dense = torch.nn.Parameter(w0.clone())
    opt = make([dense], **kwargs)
    w = w0.clone()
    st = init_state(spec.optimizer, R, D)
    for t in range(1, 5):
        rows = torch.arange(R) if all_rows else torch.randperm(R, generator=gen)[:4].sort().values
        g_rows = torch.randn(rows.numel(), D, generator=gen)
        g = torch.zeros(R, D).index_add_(0, rows, g_rows)
        dense.grad = g
        opt.step()
        sparse_update(spec, w, st, rows, g_rows.clone(), step=t)
    torch.testing.assert_close(w, dense.detach(), rtol=1e-5, atol=1e-6)


def test_sgd_equals_dense_torch_sgd() -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.3)
    _dense_vs_sparse(spec, torch.optim.SGD, {"lr": 0.3}, all_rows=False)


def test_adagrad_equals_dense_torch_adagrad() -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ADAGRAD, learning_rate=0.3, eps=1e-10)
    _dense_vs_sparse(spec, torch.optim.Adagrad, {"lr": 0.3}, all_rows=False)


def test_adam_equals_dense_torch_adam_when_every_row_is_touched() -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.ADAM, learning_rate=0.01)
    _dense_vs_sparse(spec, torch.optim.Adam, {"lr": 0.01}, all_rows=True)


def test_adam_weight_decay_equals_torch_adamw_when_every_row_is_touched() -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.ADAM, learning_rate=0.01, weight_decay=0.1)
    _dense_vs_sparse(spec, torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1}, all_rows=True)


def test_adam_equals_torch_sparse_adam_on_untouched_rows() -> None:
    """Lazy Adam: moments of rows a batch does not touch do not decay (torch.optim.SparseAdam)."""
    gen = torch.Generator().manual_seed(2)
    w0 = torch.randn(R, D, generator=gen)
    emb = torch.nn.Embedding.from_pretrained(w0.clone(), freeze=False, sparse=True)
    opt = torch.optim.SparseAdam(emb.parameters(), lr=0.01, eps=1e-12)
    spec = FusedOptimSpec(optimizer=EmbOptimType.ADAM, learning_rate=0.01, eps=1e-12)
    w, st = w0.clone(), init_state(spec.optimizer, R, D)
    for t in range(1, 6):
        ids = torch.randint(0, R, (7,), generator=gen)
        up = torch.randn(7, D, generator=gen)
        opt.zero_grad()
        (emb(ids) * up).sum().backward()
        opt.step()
        rows, g = coalesce_rows(ids, up)
        sparse_update(spec, w, st, rows, g, step=t)
    torch.testing.assert_close(w, emb.weight.detach(), rtol=1e-4, atol=1e-5)


def test_coalesce_rows_sums_duplicates() -> None:
    ids = torch.tensor([5, 1, 5, 5, 0])
    grads = torch.arange(10.0).view(5, 2)
    rows, summed = coalesce_rows(ids, grads)
    assert rows.tolist() == [0, 1, 5]
    assert summed.tolist() == [[8.0, 9.0], [2.0, 3.0], [0 + 4 + 6.0, 1 + 5 + 7.0]]


def test_empty_rows_is_a_no_op() -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.ADAM)
    w = torch.randn(R, D)
    st = init_state(spec.optimizer, R, D)
    before = w.clone()
    sparse_update(spec, w, st, torch.empty(0, dtype=torch.long), torch.empty(0, D), step=1)
    assert torch.equal(w, before) and all(int(v.count_nonzero()) == 0 for v in st.values())


def test_step_must_be_one_based() -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.ADAM)
    with pytest.raises(ValueError, match=r"step.*got 0"):
        sparse_update(
            spec,
            torch.zeros(2, 2),
            init_state("adam", 2, 2),
            torch.tensor([0]),
            torch.ones(1, 2),
            step=0,
        )


def test_state_shapes() -> None:
    st = init_state(EmbOptimType.PARTIAL_ROWWISE_LAMB, 7, 3)
    assert {k: tuple(v.shape) for k, v in st.items()} == {"momentum1": (7, 3), "momentum2": (7,)}
    assert init_state("exact_sgd", 7, 3) == {}
