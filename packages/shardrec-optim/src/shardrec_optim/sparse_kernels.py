"""Row-sparse, in-place optimizer updates for embedding tables (torch-native, vectorized).

Each kernel takes the rows a batch touched and their *coalesced* gradients and updates the weight
rows and the optimizer-state rows in place; rows not listed are left alone (lazy updates, as
fbgemm's TBE does). Legend: `weight: (R, D)`, `rows: (U,)` unique int64 row ids,
`grads: (U, D)` the summed gradient of each listed row.

The state each optimizer keeps (names, shapes) is its rule in `rules.py`.

Formulas (`t` = 1-based step count of the state, `g` the coalesced row gradient, `w` the row):

- SGD: `w -= lr * g` (SGD and EXACT_SGD are the same update here: summing duplicates first and
  applying them one by one give the same result up to float rounding).
- EXACT_ADAGRAD: `m += g*g; w -= lr * g / (sqrt(m) + eps)` (torch.optim.Adagrad).
- ROWWISE_ADAGRAD: with `g' = g + wd*w` under L2, `m += mean(g'^2)` over the row,
  `mult = lr / (sqrt(m) + eps)`, `w = c*w - mult*g` where `c = 1 - mult*wd` (L2),
  `1 - lr*wd` (DECOUPLE) or 1 (NONE).
- ADAM: `m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
  w -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd*w)` — torch.optim.SparseAdam's lazy
  update (up to where eps enters), and with weight decay it is decoupled as in AdamW.
- PARTIAL_ROWWISE_ADAM: as ADAM with `v` one value per row fed by `mean(g^2)`.
- LAMB: `r = m_hat/(sqrt(v_hat) + eps) + wd*w; w -= lr * (|w| / |r|) * r` with row norms;
  where `|r| = 0` the step is zero (fbgemm would produce NaN).
- PARTIAL_ROWWISE_LAMB: as LAMB with rowwise `v`.
- LARS_SGD: `a = lr * eta * |w| / (|g| + wd*|w|)` (0 where the denominator is 0),
  `m = momentum*m + a*(g + wd*w); w -= m`.

These are fbgemm's documented TBE formulas (fbgemm_gpu codegen `optimizers.py`), which lets a
checkpoint move between the two backends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch
from torch import Tensor

from shardrec_optim.spec import FusedOptimSpec
from shardrec_optim.types import EmbOptimType, WeightDecayMode


def sparse_update(
    spec: FusedOptimSpec,
    weight: Tensor,
    state: Mapping[str, Tensor],
    rows: Tensor,
    grads: Tensor,
    *,
    step: int,
    learning_rate: float | None = None,
) -> None:
    """Apply one optimizer step of `spec` to `weight[rows]` and its state, in place.

    Args:
        spec: optimizer and hyper-parameters.
        weight: `(R, D)` table (or concatenation of tables); updated in place.
        state: from `rules.init_state(spec.optimizer, R, D)`; updated in place.
        rows: `(U,)` int64, *unique* row ids (the caller coalesces, see `coalesce_rows`).
        grads: `(U, D)` summed gradient per row. Used as scratch: its content is destroyed.
        step: 1-based count of steps taken with this state (bias correction of Adam/LAMB).
        learning_rate: overrides `spec.learning_rate` (learning-rate schedules).
    """
    if step < 1:
        raise ValueError(f"step must be >= 1 (1-based), got {step}")
    lr = spec.learning_rate if learning_rate is None else learning_rate
    if rows.numel() == 0:
        return
    _KERNELS[spec.optimizer](_Args(spec, weight, state, rows, grads, step, lr))


def coalesce_rows(ids: Tensor, grads: Tensor) -> tuple[Tensor, Tensor]:
    """Sum the gradient rows of duplicate ids.

    Args:
        ids: `(N,)` int64 row ids, duplicates allowed.
        grads: `(N, D)` one gradient row per id.

    Returns:
        `rows: (U,)` the sorted unique ids and `summed: (U, D)` their summed gradients.
    """
    rows, inverse = torch.unique(ids, sorted=True, return_inverse=True)
    summed = torch.zeros((rows.numel(), grads.shape[1]), dtype=grads.dtype, device=grads.device)
    summed.index_add_(0, inverse, grads)
    return rows, summed


class _Args(NamedTuple):
    """One kernel call: spec, weight `(R, D)`, state, rows `(U,)`, grads `(U, D)`, step, lr."""

    spec: FusedOptimSpec
    w: Tensor
    st: Mapping[str, Tensor]
    rows: Tensor
    g: Tensor
    t: int
    lr: float


_Kernel = Callable[[_Args], None]


def _add_rows(w: Tensor, rows: Tensor, delta: Tensor) -> None:
    """`w[rows] += delta` in place, for unique `rows`.

    `index_add_` reads and writes each row once. Best-of-9 CPU time for 65k rows x 64: 4.4 ms
    (1 thread) against 8.7 ms for `index_select` + `add_` + `index_copy_`, and 15 ms when
    `alpha` is passed (a slower path), so callers scale `delta` first.
    """
    w.index_add_(0, rows, delta)


def _sgd(a: _Args) -> None:
    w, rows, g, lr = a.w, a.rows, a.g, a.lr
    _add_rows(w, rows, g.mul_(-lr))


def _adagrad(a: _Args) -> None:
    spec, w, st, rows, g, lr = a.spec, a.w, a.st, a.rows, a.g, a.lr
    m1 = st["momentum1"]
    m = m1.index_select(0, rows).addcmul_(g, g)
    m1.index_copy_(0, rows, m)
    _add_rows(w, rows, g.div_(m.sqrt_().add_(spec.eps)).mul_(-lr))


def _row_sq_mean(g: Tensor) -> Tensor:
    norms: Tensor = torch.linalg.vector_norm(g, dim=1)
    return norms.square_().div_(g.shape[1])


def _rowwise_adagrad(a: _Args) -> None:
    spec, w, st, rows, g, lr = a.spec, a.w, a.st, a.rows, a.g, a.lr
    m1 = st["momentum1"]
    wd, mode = spec.weight_decay, spec.weight_decay_mode
    decay = wd > 0 and mode is not WeightDecayMode.NONE
    w_rows = w.index_select(0, rows) if decay else None
    if w_rows is not None and mode is WeightDecayMode.L2:
        g_sq = _row_sq_mean(g + wd * w_rows)
    else:
        g_sq = _row_sq_mean(g)
    m = m1.index_select(0, rows).add_(g_sq)
    m1.index_copy_(0, rows, m)
    mult = m.sqrt_().add_(spec.eps).reciprocal_().mul_(lr)
    if w_rows is None:
        _add_rows(w, rows, g.mul_(mult.neg_().unsqueeze(1)))
        return
    correction = (
        1.0 - mult * wd if mode is WeightDecayMode.L2 else torch.full_like(mult, 1.0 - lr * wd)
    )
    w_rows.mul_(correction.unsqueeze(1)).sub_(g.mul_(mult.unsqueeze(1)))
    w.index_copy_(0, rows, w_rows)


def _moments(
    spec: FusedOptimSpec, st: Mapping[str, Tensor], rows: Tensor, g: Tensor, t: int, rowwise_v: bool
) -> Tensor:
    """Update m (and v) rows; return `m_hat / (sqrt(v_hat) + eps)` of shape (U, D)."""
    m1, m2 = st["momentum1"], st["momentum2"]
    b1, b2 = spec.beta1, spec.beta2
    if rowwise_v:
        v = m2.index_select(0, rows).mul_(b2).add_(_row_sq_mean(g), alpha=1.0 - b2)
    else:
        v = m2.index_select(0, rows).mul_(b2).addcmul_(g, g, value=1.0 - b2)
    m2.index_copy_(0, rows, v)
    m = m1.index_select(0, rows).lerp_(g, 1.0 - b1)
    m1.index_copy_(0, rows, m)
    denom = v.div_(1.0 - b2**t).sqrt_().add_(spec.eps)
    if rowwise_v:
        denom = denom.unsqueeze(1)
    return m.div_(1.0 - b1**t).div_(denom)


def _adam(rowwise_v: bool) -> _Kernel:
    def kernel(a: _Args) -> None:
        spec, w, st, rows, g, t, lr = a.spec, a.w, a.st, a.rows, a.g, a.t, a.lr
        upd = _moments(spec, st, rows, g, t, rowwise_v)
        if spec.weight_decay > 0:
            upd.add_(w.index_select(0, rows), alpha=spec.weight_decay)
        _add_rows(w, rows, upd.mul_(-lr))

    return kernel


def _lamb(rowwise_v: bool) -> _Kernel:
    def kernel(a: _Args) -> None:
        spec, w, st, rows, g, t, lr = a.spec, a.w, a.st, a.rows, a.g, a.t, a.lr
        r = _moments(spec, st, rows, g, t, rowwise_v)
        w_rows = w.index_select(0, rows)
        if spec.weight_decay > 0:
            r.add_(w_rows, alpha=spec.weight_decay)
        r_norm = torch.linalg.vector_norm(r, dim=1)
        w_norm = torch.linalg.vector_norm(w_rows, dim=1)
        ratio = torch.where(r_norm > 0, w_norm / r_norm, torch.zeros_like(r_norm))
        w.index_copy_(0, rows, w_rows.addcmul_(r, ratio.mul_(-lr).unsqueeze(1)))

    return kernel


def _lars_sgd(a: _Args) -> None:
    spec, w, st, rows, g, lr = a.spec, a.w, a.st, a.rows, a.g, a.lr
    m1 = st["momentum1"]
    wd = spec.weight_decay
    w_rows = w.index_select(0, rows)
    w_norm = torch.linalg.vector_norm(w_rows, dim=1)
    denom = torch.linalg.vector_norm(g, dim=1).add_(w_norm, alpha=wd)
    adjusted = torch.where(denom > 0, lr * spec.eta * w_norm / denom, torch.zeros_like(denom))
    if wd > 0:
        g.add_(w_rows, alpha=wd)
    m = m1.index_select(0, rows).mul_(spec.momentum).addcmul_(g, adjusted.unsqueeze(1))
    m1.index_copy_(0, rows, m)
    w.index_copy_(0, rows, w_rows.sub_(m))


_KERNELS: Mapping[EmbOptimType, _Kernel] = {
    EmbOptimType.SGD: _sgd,
    EmbOptimType.EXACT_SGD: _sgd,
    EmbOptimType.EXACT_ADAGRAD: _adagrad,
    EmbOptimType.EXACT_ROWWISE_ADAGRAD: _rowwise_adagrad,
    EmbOptimType.ROWWISE_ADAGRAD: _rowwise_adagrad,
    EmbOptimType.ADAM: _adam(rowwise_v=False),
    EmbOptimType.PARTIAL_ROWWISE_ADAM: _adam(rowwise_v=True),
    EmbOptimType.LAMB: _lamb(rowwise_v=False),
    EmbOptimType.PARTIAL_ROWWISE_LAMB: _lamb(rowwise_v=True),
    EmbOptimType.LARS_SGD: _lars_sgd,
}
