"""The torch fused update does not depend on how rows are numbered, bit for bit.

A tiered table updates cache slots where the same table in memory updates row ids; both must
end with the same floats. Renumbering the rows by a permutation must give the original run's
rows, permuted, exactly (duplicate ids' gradients summed in the same order).
"""

from __future__ import annotations

import pytest
import torch

from shardrec_optim import (
    TORCH_KERNEL,
    EmbOptimType,
    FusedOptimSpec,
    PooledGrad,
    init_state,
    pooled,
    pooled_update,
)

R, D = 300, 8
OPTIMIZERS = [
    EmbOptimType.EXACT_ROWWISE_ADAGRAD,
    EmbOptimType.EXACT_ADAGRAD,
    EmbOptimType.EXACT_SGD,
    EmbOptimType.ADAM,
]


def _train(
    spec: FusedOptimSpec,
    weight: torch.Tensor,
    ids: torch.Tensor,
    offsets: torch.Tensor,
    psw: torch.Tensor | None,
    mean: bool,
    grad_out: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Two torch-backend steps on a copy of `weight`; return it and its state."""
    weight = weight.clone()
    state = init_state(spec.optimizer, R, D)
    for step in (1, 2):
        grad = PooledGrad(
            spec, weight, state, ids, offsets, psw, mean, grad_out, spec.learning_rate, step
        )
        assert pooled_update(grad, kernels={"torch": TORCH_KERNEL}, backend="torch") == "torch"
    return weight, state


@pytest.mark.parametrize("optimizer", OPTIMIZERS, ids=lambda o: o.name)
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("mean", [False, True], ids=["sum", "mean"])
@pytest.mark.parametrize("chunk_rows", [None, 7], ids=["one_chunk", "chunks_of_7"])
def test_renumbered_rows_update_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch,
    optimizer: EmbOptimType,
    weighted: bool,
    mean: bool,
    chunk_rows: int | None,
) -> None:
    if chunk_rows is not None:
        monkeypatch.setattr(pooled, "CHUNK_BYTES", chunk_rows * D * 4)
    gen = torch.Generator().manual_seed(1234)
    n = 4000
    # Few distinct ids, many duplicates each, spread over bags of varying size (some empty).
    ids = torch.randint(0, 60, (n,), generator=gen) * 5
    cuts = torch.randint(0, n + 1, (n // 4,), generator=gen).sort().values
    offsets = torch.cat([torch.tensor([0]), cuts, torch.tensor([n])])
    num_bags = offsets.numel() - 1
    psw = torch.rand(n, generator=gen) if weighted else None
    grad_out = torch.randn(num_bags, D, generator=gen)
    weight = torch.randn(R, D, generator=gen)
    spec = FusedOptimSpec(optimizer=optimizer, learning_rate=0.05)

    base_w, base_state = _train(spec, weight, ids, offsets, psw, mean, grad_out)

    for seed in range(3):
        perm = torch.randperm(R, generator=torch.Generator().manual_seed(seed))
        renumbered = torch.empty_like(weight)
        renumbered[perm] = weight  # old row r lives at new row perm[r]
        w, state = _train(spec, renumbered, perm[ids], offsets, psw, mean, grad_out)
        assert torch.equal(w[perm], base_w), f"seed {seed}"
        for name, value in state.items():
            assert torch.equal(value[perm], base_state[name]), f"{name}, seed {seed}"
