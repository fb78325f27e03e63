"""A tiered table's error in one rank's lookup raises on every rank, never a hang (2 gloo ranks).

The tiered table `disk` lives on rank 1 only, so its faults happen there; rank 0 would wait in
the output_dist's all-to-all. Both ranks must raise within the step: rank 1 its own error,
rank 0 a `PeerError` quoting it (the table and the sizes).
- a batch touching more distinct rows than rank 1's cache holds (`CacheTooSmallError`);
- the same batch prefetched first (the error is kept and raised by its compute);
- a failed write-back of an evicted dirty row (pwritev failing with ENOSPC, `StoreIOError`);
and a healthy step after the refused batch still trains (the refusal left nothing behind).
"""

from __future__ import annotations

import dataclasses
import errno
import os

import pytest
import torch

from shardrec_collectives import PeerError, ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    CacheParams,
    KeyValueParams,
    construct_module_sharding_plan,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext
from shardrec_tiered import store as tier_store
from shardrec_tiered.native_io import native_rows_io

SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ADAGRAD, learning_rate=0.1)
ROWS = 40
SLOTS = 4  # load_factor 0.1 of 40 rows


def build(ctx: RankContext, store: str) -> torch.nn.Module:
    torch.manual_seed(3)
    ebc = EmbeddingBagCollection(
        [
            EmbeddingBagConfig(
                name="disk", num_embeddings=ROWS, embedding_dim=4, feature_names=["a"]
            ),
            EmbeddingBagConfig(name="ram", num_embeddings=8, embedding_dim=4, feature_names=["b"]),
        ]
    )
    plan = construct_module_sharding_plan(
        ebc,
        {"disk": table_wise(rank=1, compute_kernel="key_value"), "ram": table_wise(rank=0)},
        world_size=ctx.world_size,
    )
    plan["disk"] = dataclasses.replace(
        plan["disk"],
        key_value_params=KeyValueParams(ssd_storage_directory=store),
        cache_params=CacheParams(load_factor=SLOTS / ROWS),
    )
    sharder = EmbeddingBagCollectionSharder(fused_params=SPEC.to_fused_params())
    return sharder.shard(ebc, plan, ShardingEnv.from_process_group(ctx.pg))


def batch(ids: list[int]) -> KeyedJaggedTensor:
    """The ids of `a` in one bag, one id of `b`."""
    return KeyedJaggedTensor(
        ["a", "b"], torch.tensor([*ids, 1]), lengths=torch.tensor([len(ids), 1])
    )


def step(model: torch.nn.Module, ids: list[int]) -> None:
    """One training step on `batch(ids)`."""
    model(batch(ids)).wait().values().sum().backward()


def refused(model: torch.nn.Module, ids: list[int]) -> tuple[str, str]:
    with pytest.raises(Exception) as raised:
        step(model, ids)
    return type(raised.value).__name__, str(raised.value)


def faults(ctx: RankContext, root: str) -> dict[str, tuple[str, str]]:
    model = build(ctx, os.path.join(root, "store"))
    out: dict[str, tuple[str, str]] = {}
    step(model, [0, 1])  # healthy
    # Rank 0 sends 10 distinct rows of `disk` (rank 0 only: rank 1 sends few), to 4 slots.
    out["too_small"] = refused(model, list(range(10)) if ctx.rank == 0 else [2])
    step(model, [3, 4])  # healthy again, on both ranks
    # The same batch, prefetched first (a train pipeline's stage): its compute raises.
    with pytest.raises(Exception) as raised:
        kjt = batch(list(range(10)) if ctx.rank == 0 else [2])
        dist_input = model.input_dist(kjt).wait()
        model.prefetch(dist_input)
        model.compute(dist_input)
    out["prefetched"] = type(raised.value).__name__, str(raised.value)
    step(model, [3, 4])
    real = os.pwritev

    def full(fd: int, buffers: list[object], offset: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    if ctx.rank == 1:  # the disk of the rank holding `disk` fills up
        tier_store.os.pwritev = full  # type: ignore[assignment]
        tier_store.native_rows_io = _python_io  # the failure is injected on the Python path
    try:
        # Dirty rows 0..4 must be evicted for rows 10..13: the write-back fails.
        out["disk_full"] = refused(model, [10, 11, 12, 13])
    finally:
        tier_store.os.pwritev = real
        tier_store.native_rows_io = native_rows_io
    return out


def _python_io(*_: object, **__: object) -> bool:
    return False  # the store's native row I/O off: its Python path runs


@pytest.mark.parametrize("rank_pool", [2], indirect=True)
def test_tiered_faults_raise_on_every_rank(rank_pool, tmp_path) -> None:  # type: ignore[no-untyped-def]
    results = rank_pool.run(faults, str(tmp_path))
    (kind0, msg0), (kind1, msg1) = (r["too_small"] for r in results)
    assert kind1 == "CacheTooSmallError", msg1
    assert "table 'disk'" in msg1 and "10 distinct rows" in msg1 and f"holds {SLOTS} rows" in msg1
    assert kind0 == PeerError.__name__ and "rank 1: CacheTooSmallError: " + msg1 in msg0
    (kind0, msg0), (kind1, msg1) = (r["prefetched"] for r in results)
    assert kind1 == "CacheTooSmallError" and "10 distinct rows" in msg1, msg1
    assert kind0 == PeerError.__name__ and "rank 1: CacheTooSmallError: " + msg1 in msg0
    (kind0, msg0), (kind1, msg1) = (r["disk_full"] for r in results)
    assert kind1 == "StoreIOError", msg1
    assert "table 'disk'" in msg1 and "the disk holding the store is full" in msg1
    assert kind0 == PeerError.__name__ and "rank 1: StoreIOError: " + msg1 in msg0
