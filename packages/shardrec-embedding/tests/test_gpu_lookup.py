"""Lookups on CUDA equal the same lookups on CPU, and the steady-state lookup path makes no
host sync (checked with `torch.cuda.set_sync_debug_mode("error")`, which raises on any call
that synchronizes the host with the device).

Marked `gpu`: skipped without CUDA (`nox -s gpu` runs them on a machine with a GPU).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch

from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig, batched_embedding_bag
from shardrec_embedding.configs import PoolingType
from shardrec_embedding.fused import FusedEmbeddingBagCollection
from shardrec_embedding.fused.lookup import fused_update
from shardrec_embedding.triton import backward_applies, triton_available
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec, init_state
from shardrec_testing import random_lengths, seeded_generator

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CUDA = torch.device("cuda")
TABLES = [("t0", 50, 16, ["f0"]), ("t1", 30, 16, ["f1"]), ("t2", 20, 8, ["f2", "f3"])]
FEATURES = ["f0", "f1", "f2", "f3"]


@contextlib.contextmanager
def no_host_sync() -> Iterator[None]:
    """Raise on any host-device synchronization inside the block."""
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def configs(pooling: str) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name=n, num_embeddings=r, embedding_dim=d, feature_names=f, pooling=pooling
        )
        for n, r, d, f in TABLES
    ]


def kjt(seed: object, batch: int = 6) -> KeyedJaggedTensor:
    g = seeded_generator("gpu-kjt", seed)
    lengths = random_lengths(len(FEATURES) * batch, 4, g)
    per_key = lengths.view(len(FEATURES), batch).sum(1).tolist()
    limits = {"f0": 50, "f1": 30, "f2": 20, "f3": 20}
    values = torch.cat(
        [
            torch.randint(0, limits[f], (n,), generator=g)
            for f, n in zip(FEATURES, per_key, strict=True)
        ]
    )
    return KeyedJaggedTensor(FEATURES, values, lengths=lengths, stride=batch)


@pytest.mark.parametrize("pooling", ["SUM", "MEAN"])
def test_ebc_on_cuda_equals_cpu(pooling: str) -> None:
    cpu = EmbeddingBagCollection(configs(pooling))
    gpu = EmbeddingBagCollection(configs(pooling), device=CUDA)
    gpu.load_state_dict(cpu.state_dict())
    features = kjt(pooling)
    expected = cpu(features)
    got = gpu(features.to(CUDA))
    assert got.keys() == expected.keys()
    torch.testing.assert_close(got.values().cpu(), expected.values(), rtol=1e-5, atol=1e-5)
    got.values().sum().backward()
    expected.values().sum().backward()
    for name, p in gpu.named_parameters():
        q = dict(cpu.named_parameters())[name]
        assert p.grad is not None and q.grad is not None
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("optimizer", ["exact_row_wise_adagrad", "exact_sgd", "adam"])
def test_fused_training_on_cuda_equals_cpu(optimizer: str) -> None:
    spec = {"optimizer": optimizer, "learning_rate": 0.1}
    cpu = FusedEmbeddingBagCollection(configs("SUM"), spec)
    gpu = FusedEmbeddingBagCollection(configs("SUM"), spec, device=CUDA)
    gpu.load_state_dict(cpu.state_dict())
    for step in range(3):
        features = kjt((optimizer, step))
        cpu(features).values().square().sum().backward()
        gpu(features.to(CUDA)).values().square().sum().backward()
    for key, value in cpu.state_dict().items():
        torch.testing.assert_close(gpu.state_dict()[key].cpu(), value, rtol=1e-4, atol=1e-5)


def test_batched_lookup_forward_makes_no_host_sync() -> None:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(100, 32, generator=gen).to(CUDA)
    lengths = torch.randint(0, 6, (64,), generator=gen)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]).to(CUDA)
    ids = torch.randint(0, 100, (int(lengths.sum()),), generator=gen).to(CUDA)
    expected = torch.nn.functional.embedding_bag(
        ids, weight, offsets, mode="sum", include_last_offset=True
    )
    batched_embedding_bag([weight], ids, offsets)  # warm-up: kernel compilation may sync
    with no_host_sync():
        got = batched_embedding_bag([weight], ids, offsets, pooling=PoolingType.SUM)
    torch.testing.assert_close(got, expected)


def test_fused_rowwise_adagrad_backward_makes_no_host_sync() -> None:
    if not triton_available():
        pytest.skip("the sync-free fused backward is the Triton one")
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(100, 32, generator=gen).to(CUDA)
    assert backward_applies(spec, weight)
    state = init_state(spec.optimizer, 100, 32, device=CUDA)
    lengths = torch.randint(0, 6, (64,), generator=gen)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]).to(CUDA)
    ids = torch.randint(0, 30, (int(lengths.sum()),), generator=gen).to(CUDA)
    grad_out = torch.randn(64, 32, generator=gen).to(CUDA)
    reference_w, reference_st = weight.cpu(), {k: v.cpu() for k, v in state.items()}
    args = (spec, ids, offsets, None, PoolingType.SUM, grad_out, 0.1, 1)
    fused_update(weight.clone(), {k: v.clone() for k, v in state.items()}, *args)  # warm-up
    with no_host_sync():
        fused_update(weight, state, *args)
    cpu_args = (spec, ids.cpu(), offsets.cpu(), None, PoolingType.SUM, grad_out.cpu(), 0.1, 1)
    fused_update(reference_w, reference_st, *cpu_args, backend="torch")
    torch.testing.assert_close(weight.cpu(), reference_w, rtol=1e-5, atol=1e-6)
