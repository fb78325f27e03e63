"""Checkpoints of tiered tables (rows on disk behind a cache) through `save` / `load`,
against the same tables held in memory as the reference.

A model with a tiered table ("big", kernel key_value, a cache of a quarter of its rows: ids
drift every step, so rows are evicted every step) and an in-memory one ("small"). Saved
tiered and loaded in memory, saved in memory and loaded tiered, saved tiered and resumed
tiered: training continues bit for bit as the uninterrupted in-memory run (one rank), and as
close as the summation order allows across world sizes (2 -> 1, 1 -> 2 gloo ranks).

Crash safety and faults:
- A real process, SIGKILLed inside a save or between training steps, leaves its last
  checkpoint complete: it verifies, and loaded (into in-memory tables, or tiered over the
  interrupted run's own store directory) training continues exactly as an uninterrupted run.
- The store of the interrupted run is refused as a checkpoint, naming it; a checkpoint path
  overlapping a store directory is refused; a restart whose table layout differs from the
  store's is refused naming the field.
- A full disk during write-back (pwritev failing with ENOSPC): a clear error naming the table,
  the bytes and the store file, in training and at save; the last checkpoint stays intact.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
import torch
from torch import Tensor, nn

from shardrec_collectives import PeerError, ShardingEnv
from shardrec_dmp import (
    CheckpointError,
    DistributedModelParallel,
    full_state_dict,
    load,
    save,
    verify,
)
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec
from shardrec_planner import (
    CacheParams,
    EmbeddingComputeKernel,
    KeyValueParams,
    ShardingPlan,
    column_wise,
    construct_module_sharding_plan,
    row_wise,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, assert_close, random_lengths, seeded_generator
from shardrec_tiered import StoreIOError, StoreLayoutError
from shardrec_tiered import store as tier_store

FEATURES = ["f", "g"]
ROWS = {"big": 48, "small": 20}
DIM = 4
STEPS = 6
RANKS = 2  # the global batch of a step is the two ranks' batches


def configs(big_dim: int = DIM) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name=n,
            num_embeddings=r,
            embedding_dim=big_dim if n == "big" else DIM,
            feature_names=[f],
        )
        for (n, r), f in zip(ROWS.items(), FEATURES, strict=True)
    ]


class Model(nn.Module):
    def __init__(self, big_dim: int = DIM) -> None:
        super().__init__()
        torch.manual_seed(7)  # the same initial tables for every kind and world size
        self.sparse = EmbeddingBagCollection(configs(big_dim))

    def forward(self, kjt: KeyedJaggedTensor) -> Tensor:
        out = self.sparse(kjt).values()  # the same coefficients for every sample, any world
        return (out * torch.linspace(-1, 1, out.shape[1])).sum()


def part(rank: int, step: int) -> tuple[Tensor, Tensor]:
    """(lengths, values) of one rank's batch: 2 samples, ids drifting with the step."""
    g = seeded_generator("tiered-dmp", rank, step)
    lengths = random_lengths(2 * len(FEATURES), 3, g)
    per_feature = lengths.view(len(FEATURES), 2).sum(1).tolist()
    values = [
        (torch.randint(0, 5, (n,), generator=g) + step * 7 + rank * 3) % ROWS[name]
        for n, name in zip(per_feature, ROWS, strict=True)
    ]
    return lengths, torch.cat(values)


def batch(ctx: RankContext, step: int) -> KeyedJaggedTensor:
    """This rank's batch: its part on 2 ranks; both parts, feature by feature, on one."""
    ranks = [ctx.rank] if ctx.world_size == RANKS else list(range(RANKS))
    parts = [part(r, step) for r in ranks]
    lengths, values = [], []
    for f in range(len(FEATURES)):
        for ls, vs in parts:
            per = ls.view(len(FEATURES), 2)
            start = int(per[:f].sum())
            lengths.append(per[f])
            values.append(vs[start : start + int(per[f].sum())])
    return KeyedJaggedTensor(FEATURES, torch.cat(values), lengths=torch.cat(lengths))


def big_generator(big: str, kernel: str | None, world: int) -> object:
    if big == "row_wise":
        return row_wise(compute_kernel=kernel)
    if big == "column_wise":  # two column blocks; both on rank 0 of one rank
        return column_wise(ranks=[0, world - 1], compute_kernel=kernel)
    return table_wise(rank=world - 1, compute_kernel=kernel)


@contextlib.contextmanager
def tier_any_sharding() -> Iterator[None]:
    """Run key_value tables tiered under every sharding type while a model is built, where
    this shardrec runs only table_wise ones tiered (the tiered state_dict is placed per local
    shard, generic over the sharding type: these tests hold it to that)."""
    import shardrec_sharding.tiering as tiering

    original = tiering.runs_tiered
    tiering.runs_tiered = lambda ps: ps.compute_kernel is EmbeddingComputeKernel.KEY_VALUE
    try:
        yield
    finally:
        tiering.runs_tiered = original


def wrap(
    ctx: RankContext,
    kind: str,
    store: str,
    optimizer: EmbOptimType,
    big_dim: int = DIM,
    big: str = "table_wise",
) -> DistributedModelParallel:
    """kind: "tiered" (big on key_value) or "memory"; big placed `big` (table_wise: on the
    last rank), small row_wise."""
    model = Model(big_dim)
    kernel = "key_value" if kind == "tiered" else None
    module_plan = construct_module_sharding_plan(
        model.sparse,
        {"big": big_generator(big, kernel, ctx.world_size), "small": row_wise()},
        world_size=ctx.world_size,
    )
    if kind == "tiered":
        module_plan["big"] = dataclasses.replace(
            module_plan["big"],
            key_value_params=KeyValueParams(ssd_storage_directory=store),
            cache_params=CacheParams(load_factor=0.25),
        )
    spec = FusedOptimSpec(optimizer=optimizer, learning_rate=0.05)
    forced = tier_any_sharding() if big != "table_wise" else contextlib.nullcontext()
    with forced:
        return DistributedModelParallel(
            model,
            env=ShardingEnv.from_process_group(ctx.pg),
            plan=ShardingPlan(plan={"sparse": module_plan}),
            sharders=[EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())],
        )


def train(ctx: RankContext, dmp: DistributedModelParallel, first: int, last: int) -> None:
    for step in range(first, last):
        dmp(batch(ctx, step)).backward()
        dmp.fused_optimizer.step()


def tables(dmp: DistributedModelParallel) -> dict[str, Tensor]:
    return {k: v.clone() for k, v in full_state_dict(dmp).items()}


def round_trips(ctx: RankContext, root: str, optimizer: EmbOptimType) -> dict[str, object]:
    """One rank: reference, and three save / load / continue paths."""
    store = os.path.join(root, f"store-{optimizer.name}")
    reference = wrap(ctx, "memory", store, optimizer)
    train(ctx, reference, 0, STEPS)
    out: dict[str, object] = {"reference": tables(reference)}
    half = STEPS // 2
    for saved, loaded in [("tiered", "memory"), ("memory", "tiered"), ("tiered", "tiered")]:
        path = os.path.join(root, f"ckpt-{optimizer.name}-{saved}-{loaded}")
        first = wrap(ctx, saved, store + "-a", optimizer)
        train(ctx, first, 0, half)
        save(path, first, {"fused": first.fused_optimizer})
        again = wrap(ctx, loaded, store + "-b", optimizer)
        train(ctx, again, 0, 1)  # state (and dirty cached rows) the load must replace
        load(path, again, {"fused": again.fused_optimizer})
        train(ctx, again, half, STEPS)
        out[f"{saved}->{loaded}"] = tables(again)
    return out


@pytest.mark.parametrize(
    "optimizer",
    [EmbOptimType.EXACT_ROWWISE_ADAGRAD, EmbOptimType.ADAM, EmbOptimType.EXACT_ADAGRAD],
    ids=lambda o: o.name,
)
def test_tiered_and_in_memory_checkpoints_interchange_bit_for_bit(
    pool_factory, tmp_path, optimizer
):  # type: ignore[no-untyped-def]
    (result,) = pool_factory(1).run(round_trips, str(tmp_path), optimizer)
    reference = result.pop("reference")
    assert set(result) == {"tiered->memory", "memory->tiered", "tiered->tiered"}
    for case, got in result.items():
        assert got.keys() == reference.keys()
        for key in reference:
            assert torch.equal(got[key], reference[key]), (case, key)


def save_half(ctx: RankContext, root: str, kind: str, big: str = "table_wise") -> bool:
    store = os.path.join(root, "store-save")
    dmp = wrap(ctx, kind, store, EmbOptimType.EXACT_ROWWISE_ADAGRAD, big=big)
    train(ctx, dmp, 0, STEPS // 2)
    save(os.path.join(root, "ckpt"), dmp, {"fused": dmp.fused_optimizer})
    return True


def load_and_finish(
    ctx: RankContext, root: str, kind: str, big: str = "table_wise"
) -> dict[str, Tensor]:
    store = os.path.join(root, "store-load")
    dmp = wrap(ctx, kind, store, EmbOptimType.EXACT_ROWWISE_ADAGRAD, big=big)
    load(os.path.join(root, "ckpt"), dmp, {"fused": dmp.fused_optimizer})
    train(ctx, dmp, STEPS // 2, STEPS)
    return tables(dmp)


def straight(ctx: RankContext, root: str, big: str = "table_wise") -> dict[str, Tensor]:
    """The uninterrupted in-memory run (big placed `big`)."""
    store = os.path.join(root, "unused")
    dmp = wrap(ctx, "memory", store, EmbOptimType.EXACT_ROWWISE_ADAGRAD, big=big)
    train(ctx, dmp, 0, STEPS)
    return tables(dmp)


@pytest.mark.parametrize(
    ("saved_world", "saved", "loaded_world", "loaded"),
    [(2, "tiered", 1, "memory"), (2, "tiered", 1, "tiered"), (1, "tiered", 2, "tiered"),
     (1, "memory", 2, "tiered")],
)  # fmt: skip
def test_tiered_checkpoints_reshard_across_world_sizes(
    pool_factory, tmp_path, saved_world, saved, loaded_world, loaded
):  # type: ignore[no-untyped-def]
    root = str(tmp_path)
    assert all(pool_factory(saved_world).run(save_half, root, saved))
    assert verify(os.path.join(root, "ckpt")) > 0
    got = pool_factory(loaded_world).run(load_and_finish, root, loaded)
    (want,) = pool_factory(1).run(straight, root)
    for per_rank in got:
        assert per_rank.keys() == want.keys()
        for key in want:
            assert_close(per_rank[key], want[key], msg=key)


@pytest.mark.parametrize(
    ("saved_world", "saved", "loaded_world", "loaded"),
    [(2, ("tiered", "row_wise"), 1, ("memory", "table_wise")),
     (1, ("memory", "table_wise"), 2, ("tiered", "row_wise")),
     # a column-split table's row-wise state restores under the same plan (as in memory)
     (2, ("tiered", "column_wise"), 2, ("memory", "column_wise")),
     (2, ("memory", "column_wise"), 2, ("tiered", "column_wise"))],
)  # fmt: skip
def test_tiered_shards_of_any_sharding_type_checkpoint(
    pool_factory, tmp_path, saved_world, saved, loaded_world, loaded
):  # type: ignore[no-untyped-def]
    """Tiered row_wise / column_wise shards (forced tiered here, see `tier_any_sharding`):
    their state_dict is placed per local shard, so they save, load and reshard too."""
    root = str(tmp_path)
    assert all(pool_factory(saved_world).run(save_half, root, *saved))
    got = pool_factory(loaded_world).run(load_and_finish, root, *loaded)
    # the reference: in memory under the loaded plan (row-wise state of a column-split table
    # is per column block, so a column_wise run is its own reference)
    want = pool_factory(loaded_world).run(straight, root, loaded[1])
    for mine, theirs in zip(got, want, strict=True):
        for key in theirs:
            assert_close(mine[key], theirs[key], msg=key)


# -- crash safety and faults -------------------------------------------------------------

HERE = os.path.dirname(__file__)
ADAGRAD = EmbOptimType.EXACT_ROWWISE_ADAGRAD


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def run_until_killed(root: str, where: str) -> None:
    """Start the child, wait for its marker (at most 5 min), SIGKILL it."""
    child = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "_tiered_crash_child.py"), root, where, free_port()],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    marker = os.path.join(root, "marker")
    try:
        for _ in range(3000):
            if os.path.exists(marker) or child.poll() is not None:
                break
            time.sleep(0.1)
        assert child.poll() is None, child.stderr.read().decode()[-3000:] if child.stderr else ""
        assert os.path.exists(marker), "the child never reached the kill point"
        child.send_signal(signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL


def resume(ctx: RankContext, root: str, kind: str, store: str) -> dict[str, torch.Tensor]:
    dmp = wrap(ctx, kind, store, ADAGRAD)
    load(os.path.join(root, "ckpt"), dmp, {"fused": dmp.fused_optimizer})
    train(ctx, dmp, STEPS // 2, STEPS)
    return tables(dmp)


def refusals(ctx: RankContext, root: str) -> list[str]:
    """What loading the store, saving into it and a restart of another layout say."""
    out = []
    dmp = wrap(ctx, "tiered", os.path.join(root, "store"), ADAGRAD)
    for path in (os.path.join(root, "store"), os.path.join(root, "store", "rank-0")):
        with pytest.raises(CheckpointError) as err:
            load(path, dmp, {"fused": dmp.fused_optimizer})
        out.append(str(err.value))
    with pytest.raises(ValueError, match="overlap") as overlap:
        save(os.path.join(root, "store", "rank-0", "ckpt"), dmp)
    out.append(str(overlap.value))
    with pytest.raises(StoreLayoutError) as layout:
        wrap(ctx, "tiered", os.path.join(root, "store"), ADAGRAD, big_dim=8)
    out.append(str(layout.value))
    return out


@pytest.mark.parametrize("where", ["save", "train"])
def test_sigkill_leaves_the_last_checkpoint_loadable(pool_factory, tmp_path, where):  # type: ignore[no-untyped-def]
    root = str(tmp_path)
    run_until_killed(root, where)
    ckpt = os.path.join(root, "ckpt")
    assert verify(ckpt) > 0  # complete: every file against its checksum
    assert sorted(os.listdir(os.path.join(root, "store", "rank-0"))) == ["big.tier"]
    pool = pool_factory(1)
    (want,) = pool.run(straight, root)
    # in memory, and tiered over the interrupted run's store (re-initialized, then loaded)
    for kind, store in [("memory", "unused"), ("tiered", "store")]:
        (got,) = pool.run(resume, root, kind, os.path.join(root, store))
        for key in want:
            assert torch.equal(got[key], want[key]), (where, kind, key)
    store_dir, rank_dir, overlap, layout = pool.run(refusals, root)[0]
    for message, path in [(store_dir, "store"), (rank_dir, "store/rank-0")]:
        assert f"'{os.path.join(root, path)}' is not a checkpoint" in message
        assert "tiered backing store" in message and "big.tier" in message
    assert "store" in overlap and "rank-0" in overlap
    assert "table 'big'" in layout and "dim: this table has 8, the store has 4" in layout


def disk_full(ctx: RankContext, root: str) -> list[str]:
    """Train, save; then every pwritev fails with ENOSPC: a step that evicts dirty rows and a
    save both raise naming the table, bytes and file; the first checkpoint stays whole."""
    dmp = wrap(ctx, "tiered", os.path.join(root, "store"), ADAGRAD)
    ckpt = os.path.join(root, "ckpt")
    train(ctx, dmp, 0, STEPS // 2)
    save(ckpt, dmp, {"fused": dmp.fused_optimizer})
    real = os.pwritev

    def full(fd: int, buffers: list[object], offset: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    messages = []
    tier_store.os.pwritev = full  # type: ignore[assignment]  # a disk with no space left
    try:
        with pytest.raises(StoreIOError) as in_training:
            train(ctx, dmp, STEPS // 2, 10 * STEPS)  # until a dirty row is evicted
        messages.append(str(in_training.value))
        assert in_training.value.errno == errno.ENOSPC
        with pytest.raises(StoreIOError) as in_save:
            save(ckpt, dmp, {"fused": dmp.fused_optimizer})
        messages.append(str(in_save.value))
    finally:
        tier_store.os.pwritev = real
    assert not os.path.exists(ckpt + ".partial")  # nothing of the failed save was begun
    return messages


def test_disk_full_during_write_back(pool_factory, tmp_path):  # type: ignore[no-untyped-def]
    root = str(tmp_path)
    pool = pool_factory(1)
    for message in pool.run(disk_full, root)[0]:
        assert message.startswith("[Errno 28] table 'big': cannot write back "), message
        assert " bytes at byte " in message and "big.tier" in message
        assert "the disk holding the store is full" in message
    assert verify(os.path.join(root, "ckpt")) > 0
    (want,) = pool.run(straight, root)
    (got,) = pool.run(resume, root, "memory", os.path.join(root, "unused"))
    for key in want:
        assert torch.equal(got[key], want[key]), key


def damaged(ctx: RankContext, root: str) -> tuple[str, bool]:
    """A tiered checkpoint with a flipped byte: refused before anything reaches the store."""
    dmp = wrap(ctx, "tiered", os.path.join(root, "store"), ADAGRAD)
    ckpt = os.path.join(root, "ckpt")
    train(ctx, dmp, 0, STEPS // 2)
    save(ckpt, dmp, {"fused": dmp.fused_optimizer})
    data = sorted(n for n in os.listdir(ckpt) if n.endswith(".distcp"))[0]
    with open(os.path.join(ckpt, data), "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    fresh = wrap(ctx, "tiered", os.path.join(root, "store-fresh"), ADAGRAD)
    before = tables(fresh)
    with pytest.raises(CheckpointError) as err:
        load(ckpt, fresh, {"fused": fresh.fused_optimizer})
    after = tables(fresh)
    return str(err.value), all(torch.equal(before[k], after[k]) for k in before)


def test_damaged_tiered_checkpoint_is_refused_before_the_store_is_touched(pool_factory, tmp_path):  # type: ignore[no-untyped-def]
    message, untouched = pool_factory(1).run(damaged, str(tmp_path))[0]
    assert "is damaged" in message and ".distcp" in message
    assert untouched


def disk_full_at_save(ctx: RankContext, root: str) -> str:
    """Two ranks; the one holding the tiered table finds its disk full when `save` writes its
    dirty rows back: it raises its StoreIOError, the other a PeerError naming it, and the
    previous checkpoint is untouched."""
    dmp = wrap(ctx, "tiered", os.path.join(root, "store"), ADAGRAD)
    ckpt = os.path.join(root, "ckpt")
    train(ctx, dmp, 0, STEPS // 2)
    save(ckpt, dmp, {"fused": dmp.fused_optimizer})
    train(ctx, dmp, STEPS // 2, STEPS)  # dirty rows in the cache again
    real = os.pwritev

    def full(fd: int, buffers: list[object], offset: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    holder = ctx.rank == ctx.world_size - 1  # big is table_wise on the last rank
    if holder:
        tier_store.os.pwritev = full  # type: ignore[assignment]  # this rank's disk is full
    try:
        with pytest.raises((StoreIOError, PeerError)) as err:
            save(ckpt, dmp, {"fused": dmp.fused_optimizer})
    finally:
        tier_store.os.pwritev = real
    assert isinstance(err.value, StoreIOError if holder else PeerError)
    return str(err.value)


def test_disk_full_at_save_stops_every_rank(pool_factory, tmp_path):  # type: ignore[no-untyped-def]
    root = str(tmp_path)
    first, second = pool_factory(2).run(disk_full_at_save, root)
    assert "rank 1" in first and "No space left on device" in first
    assert second.startswith("[Errno 28] table 'big': cannot write back ")
    assert verify(os.path.join(root, "ckpt")) > 0
    assert not os.path.exists(os.path.join(root, "ckpt.partial"))
