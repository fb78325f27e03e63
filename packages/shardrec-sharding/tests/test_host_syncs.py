"""Host syncs per training step of a sharded EmbeddingBagCollection, counted on CPU.

On a GPU, a host sync is any call that makes the CPU wait for the device: reading a value
(`.item()`, `int(t)`, `bool(t)`, `.tolist()`, `.cpu()`), an op whose output shape depends on
the data (`nonzero`, `unique*`, `masked_select`, boolean indexing, `repeat_interleave`
without `output_size`), and a copy of Python data to the device (`torch.tensor(..., device=)`,
`new_tensor`: a pageable host-to-device copy synchronizes the stream). On CPU nothing waits,
but every one of these calls still happens, so `HostSyncCounter` records them with their call
site. It sees them through a `TorchDispatchMode` (ops) plus wrappers of the Python-level
methods that bypass the dispatcher (`tolist`, `cpu`, `numpy`, `torch.tensor`, `new_tensor`).

What it cannot see on CPU: `.to(device)` of a host tensor (a no-op here); the GPU session's
profiler count of `cudaStreamSynchronize` covers that (docs/gpu.md, "Host syncs").

The budget (docs/gpu.md) is asserted site by site, so a new sync fails with its location.
"""

from __future__ import annotations

import collections
import contextlib
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_embedding.fused import lookup as fused_lookup
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import (
    construct_module_sharding_plan,
    data_parallel,
    row_wise,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, random_lengths, seeded_generator

aten = torch.ops.aten

# Ops that read a device value on the host, or whose output size depends on the data.
_SYNC_OPS = {
    aten._local_scalar_dense.default: "item",
    aten.nonzero.default: "nonzero",
    aten.unique_consecutive.default: "unique",
    aten._unique2.default: "unique",
    aten._unique.default: "unique",
    aten.unique_dim.default: "unique",
    aten.masked_select.default: "masked_select",
    aten.equal.default: "equal",
}


def _site() -> str:
    """`package/module.py:function` of the innermost shardrec frame outside this file."""
    for frame in reversed(traceback.extract_stack()):
        name = frame.filename.replace("\\", "/")
        if "/shardrec_" in name and "/tests/" not in name:
            package = name.split("/src/")[-1]
            return f"{package}:{frame.name}"
    return "<test>"


class HostSyncCounter(TorchDispatchMode):
    """Records `(kind, site)` of every would-be host sync while active (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str]] = []

    def record(self, kind: str) -> None:
        self.events.append((kind, _site()))

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        kind = _SYNC_OPS.get(func)
        if kind is not None:
            self.record(kind)
        elif func is aten.repeat_interleave.Tensor and kwargs.get("output_size") is None:
            self.record("repeat_interleave")
        elif func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default):
            indices = args[1]
            if any(i is not None and i.dtype == torch.bool for i in indices):
                self.record("bool_index")
        return func(*args, **kwargs)

    def counts(self) -> collections.Counter[tuple[str, str]]:
        return collections.Counter(self.events)


@contextlib.contextmanager
def count_host_syncs() -> Iterator[HostSyncCounter]:
    """Count would-be host syncs in the block (ops and the Python-level methods)."""
    counter = HostSyncCounter()
    originals: dict[str, Any] = {}

    def wrap_method(name: str, kind: str) -> None:
        original = getattr(torch.Tensor, name)
        originals[name] = original

        def wrapper(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            counter.record(kind)
            return original(self, *args, **kwargs)

        setattr(torch.Tensor, name, wrapper)

    for name, kind in (("tolist", "tolist"), ("cpu", "cpu"), ("numpy", "numpy")):
        wrap_method(name, kind)
    wrap_method("new_tensor", "host_to_device")
    torch_tensor: Callable[..., torch.Tensor] = torch.tensor

    def tensor(data: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        # Python data placed on the compute device: a pageable copy that waits on CUDA.
        if kwargs.get("device") is not None:
            counter.record("host_to_device")
        return torch_tensor(data, *args, **kwargs)

    torch.tensor = tensor  # type: ignore[assignment]  # restored below
    try:
        with counter:
            yield counter
    finally:
        torch.tensor = torch_tensor  # type: ignore[assignment]
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


# -- the counter itself ---------------------------------------------------------------------------


def test_counter_sees_every_kind() -> None:
    t = torch.arange(6)
    originals = (torch.tensor, torch.Tensor.tolist, torch.Tensor.cpu, torch.Tensor.new_tensor)
    with count_host_syncs() as c:
        t[0].item()
        int(t[1])
        bool(t[2] > 0)
        t.tolist()
        t.cpu()
        t[t > 2]
        torch.nonzero(t)
        torch.unique(t)
        torch.repeat_interleave(t, t)
        torch.repeat_interleave(t, t, output_size=15)  # sized: no sync
        torch.tensor([1, 2], device=t.device)
        torch.tensor([1, 2])  # host tensor: no sync
        t.sum()  # stays on the device: no sync
    kinds = collections.Counter(kind for kind, _ in c.events)
    assert kinds == {
        "item": 3,
        "tolist": 1,
        "cpu": 1,
        "bool_index": 1,
        "nonzero": 1,
        "unique": 1,
        "repeat_interleave": 1,
        "host_to_device": 1,
    }
    restored = (torch.tensor, torch.Tensor.tolist, torch.Tensor.cpu, torch.Tensor.new_tensor)
    assert restored == originals


# -- a sharded EBC's training step ----------------------------------------------------------------

TABLES = [("t0", 40, 8, ["f0"]), ("t1", 30, 8, ["f1"]), ("t2", 20, 4, ["f2"])]
FEATURES = ["f0", "f1", "f2"]
PLANS: dict[str, Callable[[int, int], Any]] = {
    "table_wise": lambda i, world: table_wise(rank=i % world),
    "row_wise": lambda i, world: row_wise(),
    "data_parallel": lambda i, world: data_parallel(),
}


def _batch(rank: int, step: int) -> KeyedJaggedTensor:
    g = seeded_generator("host-syncs", rank, step)
    size = 8
    lengths = random_lengths(len(FEATURES) * size, 3, g)
    per_key = lengths.view(len(FEATURES), size).sum(1).tolist()
    # Ids over each table's full range: every rank's row blocks receive some.
    values = torch.cat(
        [
            torch.randint(0, rows, (n,), generator=g)
            for (_, rows, *_), n in zip(TABLES, per_key, strict=True)
        ]
    )
    return KeyedJaggedTensor(FEATURES, values, lengths=lengths, stride=size)


def step_syncs(ctx: RankContext, kind: str) -> list[tuple[tuple[str, str], int]]:
    """Train 3 steps; return the sync sites of the last (steady-state) step with counts."""
    kernels = dict(fused_lookup.KERNELS)
    # The GPU path: fbgemm's CPU kernels (used here when installed) never run on a GPU.
    fused_lookup.KERNELS.pop("fbgemm", None)
    # Nor do the native CPU kernels (shardrec_embedding._native).
    fused_lookup.KERNELS.pop("native", None)
    try:
        return _step_syncs(ctx, kind)
    finally:  # the rank processes serve later tests
        fused_lookup.KERNELS.clear()
        fused_lookup.KERNELS.update(kernels)


def _step_syncs(ctx: RankContext, kind: str) -> list[tuple[tuple[str, str], int]]:
    env = ShardingEnv.from_process_group(ctx.pg)
    configs = [
        EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=f)
        for n, r, d, f in TABLES
    ]
    ebc = EmbeddingBagCollection(configs)
    plan = construct_module_sharding_plan(
        ebc,
        {n: PLANS[kind](i, ctx.world_size) for i, (n, *_) in enumerate(TABLES)},
        world_size=ctx.world_size,
        local_world_size=ctx.world_size,
    )
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": "exact_row_wise_adagrad", "learning_rate": 0.1}
    )
    sharded = sharder.shard(ebc, plan, env)
    dense = [p for n, p in sharded.named_parameters() if n not in sharded.fused_optimizer.params]
    dense_opt = torch.optim.SGD(dense, lr=0.1) if dense else None
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for step in range(3):
        kjt = _batch(ctx.rank, step)
        with count_host_syncs() as c:
            sharded(kjt).wait().values().square().sum().backward()
            if dense_opt is not None:
                dense_opt.step()
                dense_opt.zero_grad()
        counts = c.counts()
    return sorted(counts.items())


# The budget of docs/gpu.md ("Host syncs"), per rank and steady-state step. Sites:
CHECK = ("item", "shardrec_sharding/checks.py:_check_range")  # ids in range: first bad id
# input's per-key counts and smallest length (one read on a GPU; on CPU both through one numpy
# view of the lengths, no copy)
KEYS = ("tolist", "shardrec_jagged/_torch_kernels.py:length_per_key_and_min")
CPU_KEYS = ("numpy", "shardrec_jagged/_torch_kernels.py:length_per_key_and_min")
HEADER = ("tolist", "shardrec_collectives/kjt_all_to_all.py:headers")  # split sizes (header read)
BUCKETS = ("tolist", "shardrec_sharding/strategies/_bucketize.py:__call__")  # per-rank counts
AGREE = ("tolist", "shardrec_collectives/errors.py:agree_on_error")  # no all-to-all to carry it
SEGMENTS = ("unique", "shardrec_optim/pooled.py:torch_update")  # unique rows (torch)
DP_ROWS = ("unique", "shardrec_sharding/strategies/data_parallel.py:reduce")  # touched rows
DP_COUNTS = ("tolist", "shardrec_sharding/strategies/data_parallel.py:reduce")  # per-rank rows
# CPU only, per fused group: backward processes rows in cache-sized chunks whose bounds are
# read on the host.
CPU_CHUNKS = [
    ("tolist", "shardrec_optim/pooled.py:torch_update"),
    ("host_to_device", "shardrec_optim/pooled.py:torch_update"),
]
# CPU only: the range check first tries one aminmax (ids here exceed the smallest table, so
# the per-id check runs too).
CPU_MINMAX = ("tolist", "shardrec_sharding/checks.py:_check_range")

# Fused groups (tables of one dim) per rank: t0, t1 have dim 8, t2 dim 4; table-wise puts
# t0, t2 on rank 0 and t1 on rank 1 of two.
GROUPS = {("table_wise", 1): [2], ("table_wise", 2): [2, 1], ("row_wise", 1): [2]}
GROUPS[("row_wise", 2)] = [2, 2]


def budget(kind: str, world: int, rank: int) -> collections.Counter[tuple[str, str]]:
    """The host syncs of one steady-state step on a GPU (torch backward path)."""
    out: collections.Counter[tuple[str, str]] = collections.Counter({CHECK: 1, KEYS: 1})
    if kind == "data_parallel":
        out[AGREE] += 1
        if world > 1:  # the gradient hook of each replicated table
            out[DP_ROWS] += len(TABLES)
            out[DP_COUNTS] += len(TABLES)
        return out
    out[HEADER] += 1
    if kind == "row_wise":
        out[BUCKETS] += 1
    out[SEGMENTS] += GROUPS[(kind, world)][rank]
    return out


@pytest.mark.parametrize("world", [1, 2])
@pytest.mark.parametrize("kind", list(PLANS))
def test_host_syncs_per_training_step(pool_factory, world: int, kind: str) -> None:  # type: ignore[no-untyped-def]
    per_rank = pool_factory(world).run(step_syncs, kind)
    for rank, found in enumerate(per_rank):
        got = collections.Counter(dict(found))
        expected = budget(kind, world, rank)
        expected[CPU_MINMAX] += 1
        expected[KEYS] -= 1
        expected[CPU_KEYS] += 1
        if kind != "data_parallel":
            for site in CPU_CHUNKS:
                expected[site] += GROUPS[(kind, world)][rank]
        assert got == expected, (rank, sorted(got.items()))


def test_lookup_forward_has_no_host_sync() -> None:
    """The steady-state lookup (ids already on this rank) reads nothing back from the device."""
    configs = [
        EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=f)
        for n, r, d, f in TABLES
    ]
    ebc = EmbeddingBagCollection(configs)
    env = ShardingEnv.from_local(1, 0)
    plan = construct_module_sharding_plan(
        ebc, {n: table_wise(rank=0) for n, *_ in TABLES}, world_size=1, local_world_size=1
    )
    sharded = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": "exact_row_wise_adagrad", "learning_rate": 0.1}
    ).shard(ebc, plan, env)
    # The first step caches its key index tensors on the device. Under the counting dispatch
    # mode the lookup takes its per-group path (the one a GPU runs; the CPU segment kernel
    # steps aside for dispatch modes), so the warm-up runs under one too.
    with count_host_syncs():
        sharded(_batch(0, 0)).wait()
    kjt = _batch(0, 1)
    dist_input = sharded.input_dist(kjt).wait()
    with count_host_syncs() as c:
        local = sharded.compute(dist_input)
    assert c.events == []
    expected = ebc(kjt).values()
    got = sharded.output_dist(dist_input, local).wait().values()
    torch.testing.assert_close(got, expected)
