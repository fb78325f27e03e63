"""Fused backward backends: fbgemm's CPU TBE kernels and the torch-native path agree.

Parity tests are marked `fbgemm` and skip when fbgemm_gpu does not import (`nox -s fbgemm` runs
them with fbgemm-gpu-cpu installed). The fallback and bad-input tests run everywhere.
"""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Any

import pytest
import torch

from shardrec_embedding.configs import PoolingType
from shardrec_embedding.fused import lookup as lookup_module
from shardrec_embedding.fused.lookup import fused_update
from shardrec_optim import EmbOptimType, FusedOptimSpec, WeightDecayMode, init_state
from shardrec_optim import fbgemm_kernels as fbgemm_backward


def _fbgemm_or_skip() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fbgemm_backward.FbgemmUnavailableWarning)
        if not fbgemm_backward.fbgemm_tbe_available():
            pytest.skip("fbgemm_gpu TBE kernels do not import here")


SPECS = [
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.3),
    FusedOptimSpec(optimizer=EmbOptimType.SGD, learning_rate=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.2, eps=1e-6),
    FusedOptimSpec(optimizer=EmbOptimType.ROWWISE_ADAGRAD, learning_rate=0.05),
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_ADAGRAD, learning_rate=0.1, eps=1e-5),
]

# fbgemm 1.8's CPU kernel applies rowwise weight decay differently: these stay on torch.
WEIGHT_DECAY_SPECS = [
    FusedOptimSpec(
        optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD,
        learning_rate=0.2,
        weight_decay=0.1,
        weight_decay_mode=WeightDecayMode.L2,
    ),
    FusedOptimSpec(
        optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD,
        learning_rate=0.2,
        weight_decay=0.1,
        weight_decay_mode=WeightDecayMode.DECOUPLE,
    ),
]


@pytest.mark.fbgemm
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.optimizer.name}-{s.weight_decay_mode}")
def test_fbgemm_and_torch_backends_agree_over_steps(
    helpers: Any, spec: FusedOptimSpec, pooled_case: tuple[PoolingType, bool]
) -> None:
    pooling, weighted = pooled_case
    _fbgemm_or_skip()
    helpers.backend_matches_torch_over_steps(
        "fbgemm", spec, pooling, weighted, rows=40, dim=8, bags=12, tol=(1e-5, 1e-6)
    )


@pytest.mark.fbgemm
def test_auto_backend_uses_fbgemm_where_it_applies() -> None:
    _fbgemm_or_skip()
    spec = SPECS[2]
    assert fbgemm_backward.fbgemm_applies(spec, torch.zeros(3, 2), torch.zeros(1, 2), None)
    for wd_spec in WEIGHT_DECAY_SPECS:
        assert not fbgemm_backward.fbgemm_applies(
            wd_spec, torch.zeros(3, 2), torch.zeros(1, 2), None
        )
    adam = FusedOptimSpec(optimizer=EmbOptimType.ADAM)
    assert not fbgemm_backward.fbgemm_applies(adam, torch.zeros(3, 2), torch.zeros(1, 2), None)
    double = torch.zeros(3, 2, dtype=torch.float64)
    assert not fbgemm_backward.fbgemm_applies(spec, double, torch.zeros(1, 2), None)


def _one_id_update(
    weight: torch.Tensor, state: dict[str, torch.Tensor], spec: FusedOptimSpec, backend: str
) -> None:
    """Step 1 of `spec` on `weight` by `backend`: one bag of id 1, gradient of ones."""
    fused_update(
        weight,
        state,
        spec,
        torch.tensor([1]),
        torch.tensor([0, 1]),
        None,
        PoolingType.SUM,
        torch.ones(1, 2),
        0.1,
        1,
        backend=backend,  # type: ignore[arg-type]  # also bad names, under test
    )


def test_fbgemm_backend_refuses_an_optimizer_it_has_no_kernel_for() -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.ADAM)
    weight = torch.zeros(4, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", fbgemm_backward.FbgemmUnavailableWarning)
        with pytest.raises(ValueError, match="ADAM"):
            _one_id_update(weight, init_state(spec.optimizer, 4, 2), spec, "fbgemm")


def test_unknown_backend_is_rejected() -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD)
    with pytest.raises(ValueError, match="'cuda_magic'"):
        _one_id_update(torch.zeros(4, 2), {}, spec, "cuda_magic")


def test_without_fbgemm_auto_falls_back_to_torch_and_logs_once(
    helpers: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "fbgemm_gpu", None)  # makes `import fbgemm_gpu` fail
    # "auto" prefers the native kernels where they apply; take them out to reach fbgemm.
    monkeypatch.delitem(lookup_module.KERNELS, "native")
    fbgemm_backward.fbgemm_tbe_available.cache_clear()
    try:
        spec = SPECS[0]
        ids, offsets, _, grad_out = helpers.fused_batch(0, 10, 4, bags=5, weighted=False)
        want, got = torch.ones(10, 4), torch.ones(10, 4)
        args = (spec, ids, offsets, None, PoolingType.SUM, grad_out, 0.5, 1)
        with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.DEBUG):
            warnings.simplefilter("always")
            fused_update(got, {}, *args)
            fused_update(torch.ones(10, 4), {}, *args)
        fused_update(want, {}, *args, backend="torch")
        torch.testing.assert_close(got, want)
        unavailable = [
            w for w in caught if issubclass(w.category, fbgemm_backward.FbgemmUnavailableWarning)
        ]
        assert unavailable == []  # an optional backend: a DEBUG record, not a warning
        records = [r for r in caplog.records if r.name == fbgemm_backward.__name__]
        assert len(records) == 1 and records[0].levelno == logging.DEBUG
        assert "fbgemm-gpu-cpu" in records[0].getMessage()
    finally:
        fbgemm_backward.fbgemm_tbe_available.cache_clear()
