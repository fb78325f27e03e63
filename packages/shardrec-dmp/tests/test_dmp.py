"""DistributedModelParallel and TrainPipelineSparseDist against a single-process reference.

A DLRM-shaped model (EBC + bottom MLP + over arch, BCE loss) is trained K steps on W gloo ranks,
each rank on its own batch. The reference is the same model in one process on the concatenation
of the W batches, with the loss `sum over ranks of the rank's mean BCE`:

- sharded tables (fused SGD) and data-parallel tables get the gradient of that sum in both;
- DDP *averages* the dense gradients, i.e. gives `1 / W` of the reference's dense gradient, so
  the reference's dense optimizer uses `lr / W` (SGD is linear in the gradient: the same update).

Each rank checks its losses (against the reference's per-rank chunk) and its final weights
(dense, replicated tables, and its local shards at their offsets).
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import shardrec_planner
from shardrec_collectives import PeerError, ShardingEnv
from shardrec_dmp import (
    DistributedModelParallel,
    TrainPipelineSparseDist,
    full_state_dict,
    load,
    save,
    state_dict_gather,
    state_dict_to_device,
)
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import CombinedOptimizer, KeyedOptimizerWrapper, in_backward_optimizer_filter
from shardrec_planner import ShardingPlan, construct_module_sharding_plan
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, assert_close, bce_step_per_rank, seeded_generator
from shardrec_testing.placements import local_world_size, placement_kwargs
from shardrec_testing.random_ids import random_dlrm_inputs

TABLES = [("t0", 11, 4, ["f0"]), ("t1", 7, 4, ["f1", "f2"]), ("t2", 9, 8, ["f0"])]
LIMITS = {"f0": 9, "f1": 7, "f2": 7}  # per feature, the fewest rows of a table reading it
FEATURES = list(LIMITS)  # the KJT's keys, in the order random_dlrm_inputs draws them
POOLED_DIM = 4 + 4 + 4 + 8
DENSE_IN = 3
STEPS = 3
LR_EMB = 0.2
LR_DENSE = 0.1
TYPES = [
    "table_wise",
    "row_wise",
    "column_wise",
    "table_row_wise",
    "table_column_wise",
    "data_parallel",
]


@dataclasses.dataclass
class Batch:
    dense_features: Tensor  # (B, DENSE_IN)
    sparse_features: KeyedJaggedTensor
    labels: Tensor  # (B,)

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        return Batch(
            self.dense_features.to(device, non_blocking=non_blocking),
            self.sparse_features.to(device, non_blocking=non_blocking),
            self.labels.to(device, non_blocking=non_blocking),
        )


class Dlrm(nn.Module):
    """Embeddings + bottom MLP -> over arch -> logit; returns `(loss, logits)`."""

    def __init__(self, device: str = "cpu") -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(
            [
                EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=f)
                for n, r, d, f in TABLES
            ],
            device=device,
        )
        self.bottom = nn.Linear(DENSE_IN, 4, device=device)
        self.over = nn.Linear(4 + POOLED_DIM, 1, device=device)

    def forward(self, batch: Batch) -> tuple[Tensor, Tensor]:
        pooled = self.sparse(batch.sparse_features)
        x = torch.cat([torch.relu(self.bottom(batch.dense_features)), pooled.values()], dim=1)
        logits = self.over(x).squeeze(1)
        return F.binary_cross_entropy_with_logits(logits, batch.labels), logits


def make_model(seed: str) -> Dlrm:
    torch.manual_seed(0)
    model = Dlrm()
    g = seeded_generator("dmp-weights", seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return model


def make_batch(seed: str, rank: int, step: int) -> Batch:
    g = seeded_generator("dmp-batch", seed, rank, step)
    size = (rank + step) % 3 + 2
    dense, lengths, values, labels = random_dlrm_inputs(LIMITS, DENSE_IN, size, g)
    return Batch(dense, KeyedJaggedTensor(FEATURES, values, lengths=lengths, stride=size), labels)


def concat(batches: list[Batch]) -> Batch:
    dicts = [b.sparse_features.to_dict() for b in batches]
    values = [d[f].values() for f in FEATURES for d in dicts]
    lengths = [d[f].lengths() for f in FEATURES for d in dicts]
    kjt = KeyedJaggedTensor(
        FEATURES,
        torch.cat(values),
        lengths=torch.cat(lengths),
        stride=sum(b.labels.numel() for b in batches),
    )
    return Batch(
        torch.cat([b.dense_features for b in batches]), kjt, torch.cat([b.labels for b in batches])
    )


def reference(seed: str, worlds: list[int]) -> tuple[list[list[Tensor]], dict[str, Tensor]]:
    """Per step, every rank's loss; and the final weights (see the module docstring).

    `worlds[step]` is the number of ranks that trained step `step` (a resharded checkpoint
    continues on another world size).
    """
    model = make_model(seed)
    emb = [p for n, p in model.named_parameters() if n.startswith("sparse.")]
    dense = [p for n, p in model.named_parameters() if not n.startswith("sparse.")]
    opt = torch.optim.SGD([{"params": emb, "lr": LR_EMB}, {"params": dense, "lr": LR_DENSE}])
    losses: list[list[Tensor]] = []
    for step, world in enumerate(worlds):
        opt.param_groups[1]["lr"] = LR_DENSE / world
        batches = [make_batch(seed, r, step) for r in range(world)]
        _, logits = model(concat(batches))
        losses.append(bce_step_per_rank(opt, logits, [b.labels for b in batches]))
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def make_plan(model: Dlrm, types: tuple[str, ...], world: int) -> ShardingPlan:
    """Table i sharded as `types[i]`, placed by the tests' shared convention."""
    generators = {
        n: getattr(shardrec_planner, types[i])(**placement_kwargs(types[i], i, world))
        for i, (n, *_) in enumerate(TABLES)
    }
    module_plan = construct_module_sharding_plan(
        model.sparse, generators, world_size=world, local_world_size=local_world_size(world)
    )
    return ShardingPlan(plan={"sparse": module_plan})


def wrap(ctx: RankContext, seed: str, types: tuple[str, ...] | None) -> DistributedModelParallel:
    model = make_model(seed)
    plan = None if types is None else make_plan(model, types, ctx.world_size)
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": "exact_sgd", "learning_rate": LR_EMB}
    )
    return DistributedModelParallel(
        model, env=ShardingEnv.from_process_group(ctx.pg), plan=plan, sharders=[sharder]
    )


def optimizer_of(dmp: DistributedModelParallel) -> CombinedOptimizer:
    """As the tutorials: a dense optimizer over the non-fused parameters, combined with
    `fused_optimizer`. Replicated (data_parallel) tables train at the embedding rate."""
    rest = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    tables = {k: v for k, v in rest.items() if k.startswith("sparse.")}
    dense = {k: v for k, v in rest.items() if not k.startswith("sparse.")}
    optims: list[KeyedOptimizerWrapper | CombinedOptimizer | tuple[str, KeyedOptimizerWrapper]] = [
        dmp.fused_optimizer,
        KeyedOptimizerWrapper(dense, lambda p: torch.optim.SGD(p, lr=LR_DENSE)),
    ]
    if tables:
        optims.append(KeyedOptimizerWrapper(tables, lambda p: torch.optim.SGD(p, lr=LR_EMB)))
    return CombinedOptimizer(optims)


def check_weights(dmp: DistributedModelParallel, expected: dict[str, Tensor], what: str) -> None:
    state = dmp.state_dict()
    assert sorted(state) == sorted(expected), what
    for key, value in state.items():
        want = expected[key]
        if hasattr(value, "local_shards"):
            for shard in value.local_shards():
                (r0, c0), (r, c) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
                assert_close(shard.tensor, want[r0 : r0 + r, c0 : c0 + c], msg=f"{what} {key}")
        else:
            assert isinstance(value, Tensor)
            assert_close(value, want, msg=f"{what} {key}")


def train_cases(ctx: RankContext, cases: list[tuple[str, ...] | None]) -> int:
    checked = 0
    for types in cases:
        seed = str(types)
        dmp = wrap(ctx, seed, types)
        what = f"{types} rank {ctx.rank}/{ctx.world_size}"
        fused = set(dmp.fused_optimizer.params)
        names = dict(dmp.named_parameters())
        assert fused <= set(names), what
        assert all(k.startswith("sparse.embedding_bags.") for k in fused), what
        opt = optimizer_of(dmp)
        want_losses, want_weights = reference(seed, [ctx.world_size] * STEPS)
        for step in range(STEPS):
            loss, _ = dmp(make_batch(seed, ctx.rank, step))
            assert_close(loss, want_losses[step][ctx.rank], msg=f"{what} loss {step}")
            opt.zero_grad()
            loss.backward()
            opt.step()
        check_weights(dmp, want_weights, what)
        full = full_state_dict(dmp)
        assert sorted(full) == sorted(want_weights), what
        for key, value in full.items():
            assert_close(value, want_weights[key], msg=f"{what} full {key}")
        checked += 1
    return checked


def pipeline_vs_loop(ctx: RankContext, types: tuple[str, ...]) -> bool:
    seed = f"pipe{types}"
    runs: list[tuple[list[Tensor], dict[str, Tensor]]] = []
    for pipelined in (False, True):
        dmp = wrap(ctx, seed, types)
        opt = optimizer_of(dmp)
        batches = [make_batch(seed, ctx.rank, s) for s in range(STEPS + 1)]
        outputs: list[Tensor] = []
        if pipelined:
            pipe = TrainPipelineSparseDist(dmp, opt, torch.device("cpu"))
            it = iter(batches)
            for _ in batches:
                outputs.append(pipe.progress(it))  # type: ignore[arg-type]
            with pytest.raises(StopIteration):
                pipe.progress(it)
        else:
            for b in batches:
                opt.zero_grad()
                loss, logits = dmp(b)
                loss.backward()
                opt.step()
                outputs.append(logits)
        state: dict[str, Tensor] = {}
        for k, v in dmp.state_dict().items():
            if hasattr(v, "local_shards"):
                state[k] = torch.cat(
                    [torch.zeros(0), *(s.tensor.flatten() for s in v.local_shards())]
                )
            else:
                assert isinstance(v, Tensor)
                state[k] = v
        runs.append((outputs, state))
    (out_a, st_a), (out_b, st_b) = runs
    for a, b in zip(out_a, out_b, strict=True):
        assert torch.equal(a.detach(), b.detach()), (a, b)
    for k in st_a:
        assert torch.equal(st_a[k], st_b[k]), k
    return True


CASES: list[tuple[str, ...] | None] = [(t,) * 3 for t in TYPES] + [
    ("data_parallel", "row_wise", "column_wise"),
    None,  # the planner's plan (collective_plan)
]


@pytest.mark.parametrize("rank_pool", [1, 2, 3, 4], indirect=True)
def test_dmp_trains_like_one_process(rank_pool: object) -> None:
    results = rank_pool.run(train_cases, CASES)  # type: ignore[attr-defined]
    assert results == [len(CASES)] * len(results)


@pytest.mark.parametrize("rank_pool", [2], indirect=True)
def test_pipeline_equals_plain_loop(rank_pool: object) -> None:
    for types in [("row_wise", "table_wise", "data_parallel"), ("column_wise",) * 3]:
        assert all(rank_pool.run(pipeline_vs_loop, types))  # type: ignore[attr-defined]


def train_and_save(ctx: RankContext, path: str, types: tuple[str, ...]) -> bool:
    """Train, save, train one more step, load: the weights are the saved ones again."""
    seed = f"ckpt{types}"
    dmp = wrap(ctx, seed, types)
    opt = optimizer_of(dmp)
    for step in range(STEPS + 1):
        if step == STEPS:
            save(path, dmp, {"opt": opt})
        loss, _ = dmp(make_batch(seed, ctx.rank, step))
        opt.zero_grad()
        loss.backward()
        opt.step()
    load(path, dmp, {"opt": opt})
    check_weights(dmp, reference(seed, [ctx.world_size] * STEPS)[1], f"reload {types}")
    return True


def load_resharded(
    ctx: RankContext, path: str, saved: tuple[str, ...], saved_world: int, types: tuple[str, ...]
) -> bool:
    """A checkpoint of `saved` on `saved_world` ranks loads into plan `types` on this world, and
    training goes on as one uninterrupted run whose last steps had this many ranks."""
    seed = f"ckpt{saved}"
    dmp = wrap(ctx, seed, types)
    load(path, dmp)  # the optimizer's structure changes with the plan (dp tables are dense)
    worlds = [saved_world] * STEPS
    check_weights(dmp, reference(seed, worlds)[1], f"{saved}->{types} rank {ctx.rank}")
    opt = optimizer_of(dmp)  # SGD: stateless, so a fresh one continues exactly
    worlds += [ctx.world_size] * 2
    want_losses, want_weights = reference(seed, worlds)
    for step in range(STEPS, len(worlds)):
        loss, _ = dmp(make_batch(seed, ctx.rank, step))
        assert_close(loss, want_losses[step][ctx.rank], msg=f"{saved}->{types} loss {step}")
        opt.zero_grad()
        loss.backward()
        opt.step()
    check_weights(dmp, want_weights, f"{saved}->{types} continued, rank {ctx.rank}")
    return True


def test_checkpoint_round_trip_and_reshard(pool_factory: object, tmp_path: object) -> None:
    saves = [("row_wise",) * 3, ("table_wise", "column_wise", "data_parallel")]
    loads = [("column_wise", "data_parallel", "table_row_wise"), ("row_wise",) * 3]
    two = pool_factory(2)  # type: ignore[operator]
    three = pool_factory(3)  # type: ignore[operator]
    for i, (saved, target) in enumerate(zip(saves, loads, strict=True)):
        path = f"{tmp_path}/ckpt{i}"
        assert all(two.run(train_and_save, path, saved))
        assert all(three.run(load_resharded, path, saved, 2, target))


def crash_before_publish(ctx: RankContext, path: str) -> bool:
    """A save that dies after writing its shards but before the rename leaves the previous
    checkpoint loadable; the next save replaces the leftover `.partial`."""
    import shardrec_dmp.checkpoint as ck

    types = ("row_wise", "table_wise", "data_parallel")
    dmp = wrap(ctx, "crash", types)
    opt = optimizer_of(dmp)
    save(path, dmp, {"opt": opt})
    weight = dict(dmp.named_parameters())["sparse.embedding_bags.t0.weight"]
    first = weight.detach().clone()
    loss, _ = dmp(make_batch("crash", ctx.rank, 0))
    opt.zero_grad()
    loss.backward()
    opt.step()
    assert not torch.equal(weight.detach(), first)

    def die(partial: str, final: str) -> None:
        raise OSError(f"killed while publishing {partial}")

    publish = ck._publish
    ck._publish = die
    try:
        with pytest.raises(OSError, match="killed"):
            save(path, dmp, {"opt": opt})
    finally:
        ck._publish = publish
    with pytest.raises(ValueError, match="'nope'"):
        load(path, dmp, {"nope": opt})
    load(path, dmp, {"opt": opt})
    assert torch.equal(weight.detach(), first)
    save(path, dmp, {"opt": opt})  # over the leftover .partial
    assert not os.path.exists(path + ".partial")
    return True


def test_crashed_save_keeps_previous_checkpoint(pool_factory: object, tmp_path: object) -> None:
    assert pool_factory(1).run(crash_before_publish, f"{tmp_path}/ck") == [True]  # type: ignore[operator]


def adagrad_model(
    ctx: RankContext, types: tuple[str, ...], dense_adam: bool = False
) -> tuple[DistributedModelParallel, CombinedOptimizer]:
    model = make_model("adagrad")
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": "exact_adagrad", "learning_rate": LR_EMB}
    )
    dmp = DistributedModelParallel(
        model,
        env=ShardingEnv.from_process_group(ctx.pg),
        plan=make_plan(model, types, ctx.world_size),
        sharders=[sharder],
    )
    dense = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    if dense_adam:  # state created lazily, on the first step
        wrapper = KeyedOptimizerWrapper(dense, lambda p: torch.optim.Adam(p, lr=LR_DENSE))
    else:
        wrapper = KeyedOptimizerWrapper(dense, lambda p: torch.optim.Adagrad(p, lr=LR_DENSE))
    return dmp, CombinedOptimizer([dmp.fused_optimizer, wrapper])


def train_steps(
    ctx: RankContext, dmp: DistributedModelParallel, opt: CombinedOptimizer, steps: range
) -> None:
    for step in steps:
        loss, _ = dmp(make_batch("adagrad", ctx.rank, step))
        opt.zero_grad()
        loss.backward()
        opt.step()


def optimizer_state_reshards(ctx: RankContext, path: str) -> bool:
    """Fused Adagrad state saved under one plan and loaded under another: training goes on
    exactly as the uninterrupted run."""
    a, opt_a = adagrad_model(ctx, ("row_wise",) * 3)
    train_steps(ctx, a, opt_a, range(STEPS))
    save(path, a, {"opt": opt_a})
    train_steps(ctx, a, opt_a, range(STEPS, STEPS + 2))
    b, opt_b = adagrad_model(ctx, ("table_wise", "column_wise", "table_row_wise"))
    load(path, b, {"opt": opt_b})
    train_steps(ctx, b, opt_b, range(STEPS, STEPS + 2))
    want, got = full_state_dict(a), full_state_dict(b)
    for key in want:
        assert_close(got[key], want[key], msg=f"rank {ctx.rank} {key}")
    return True


@pytest.mark.parametrize("rank_pool", [2], indirect=True)
def test_optimizer_state_reshards(rank_pool: object, tmp_path: object) -> None:
    assert all(rank_pool.run(optimizer_state_reshards, f"{tmp_path}/ada"))  # type: ignore[attr-defined]


def lazy_state_loads_into_fresh_optimizer(ctx: RankContext, path: str) -> bool:
    """Dense Adam has no state before its first step: `load` into a freshly built optimizer
    must still restore it (not silently restart Adam from zero)."""
    a, opt_a = adagrad_model(ctx, ("row_wise",) * 3, dense_adam=True)
    train_steps(ctx, a, opt_a, range(STEPS))
    save(path, a, {"opt": opt_a})
    train_steps(ctx, a, opt_a, range(STEPS, STEPS + 2))
    b, opt_b = adagrad_model(ctx, ("row_wise",) * 3, dense_adam=True)
    load(path, b, {"opt": opt_b})
    assert all(p.grad is None for p in b.parameters()), "load left gradients behind"
    train_steps(ctx, b, opt_b, range(STEPS, STEPS + 2))
    want, got = full_state_dict(a), full_state_dict(b)
    for key in want:
        assert torch.equal(got[key], want[key]), f"rank {ctx.rank} {key}"
    return True


@pytest.mark.parametrize("rank_pool", [2], indirect=True)
def test_lazy_optimizer_state_restores(rank_pool: object, tmp_path: object) -> None:
    assert all(rank_pool.run(lazy_state_loads_into_fresh_optimizer, f"{tmp_path}/adam"))  # type: ignore[attr-defined]


def train_two_steps(ctx: RankContext, dmp: DistributedModelParallel) -> dict[str, Tensor]:
    opt = optimizer_of(dmp)
    for step in range(2):
        loss, _ = dmp(make_batch("copy", ctx.rank, step))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.clone() for k, v in full_state_dict(dmp).items()}


def copy_is_independent(ctx: RankContext) -> bool:
    """`copy("cpu")` gives an equal model sharing no tensor: it trains exactly like a freshly
    built twin (fused, sharded, data-parallel tables and dense layers), and training it
    leaves the original untouched."""
    types = ("row_wise", "table_wise", "data_parallel")
    dmp = wrap(ctx, "copy", types)
    before = {k: v.clone() for k, v in full_state_dict(dmp).items()}
    twin = dmp.copy("cpu")
    assert isinstance(twin, DistributedModelParallel) and twin is not dmp
    assert twin.plan == dmp.plan and twin.device == torch.device("cpu")
    mine = {t.data_ptr() for t in dmp.parameters()}
    assert not mine & {t.data_ptr() for t in twin.parameters()}, "copy shares a tensor"
    batch = make_batch("copy", ctx.rank, 0)
    out_a, out_b = dmp(batch)[1], twin(batch)[1]
    assert isinstance(out_a, Tensor) and isinstance(out_b, Tensor)
    assert torch.equal(out_a, out_b)
    want = train_two_steps(ctx, wrap(ctx, "copy", types))
    got = train_two_steps(ctx, twin)
    untouched = full_state_dict(dmp)
    for key in want:
        assert torch.equal(got[key], want[key]), f"rank {ctx.rank} copy trained {key} differently"
        assert torch.equal(untouched[key], before[key]), f"training the copy changed {key}"
    return True


@pytest.mark.parametrize("rank_pool", [2], indirect=True)
def test_copy_gives_independent_equal_model(rank_pool: object) -> None:
    assert all(rank_pool.run(copy_is_independent))  # type: ignore[attr-defined]


def plain_run(
    dmp: DistributedModelParallel, opt: CombinedOptimizer, train: list[Batch], evaluate: list[Batch]
) -> list[Tensor]:
    """The plain loop: train on `train`, then the forward only on `evaluate` in eval mode."""
    outputs: list[Tensor] = []
    for b in train:
        opt.zero_grad()
        loss, logits = dmp(b)
        loss.backward()
        opt.step()
        outputs.append(logits.detach())
    dmp.eval()
    with torch.no_grad():
        outputs += [dmp(b)[1] for b in evaluate]
    dmp.train()
    return outputs


def drain(pipe: TrainPipelineSparseDist, it: object) -> list[Tensor]:
    out: list[Tensor] = []
    while True:
        try:
            out.append(pipe.progress(it).detach())  # type: ignore[arg-type, attr-defined]
        except StopIteration:
            return out


def pipeline_modes(ctx: RankContext, types: tuple[str, ...]) -> list[int]:
    """Per (execute_all_batches, n batches): how many the pipeline ran; each run's outputs and
    weights equal the plain loop's on the batches it ran. Then train -> eval -> train again."""
    seed = f"modes{types}"
    counts: list[int] = []
    for eab in (True, False):
        for n in (0, 1, 2, 3, 5):
            batches = [make_batch(seed, ctx.rank, s) for s in range(n)]
            dmp = wrap(ctx, seed, types)
            pipe = TrainPipelineSparseDist(dmp, optimizer_of(dmp), "cpu", execute_all_batches=eab)
            got = drain(pipe, iter(batches))
            ref = wrap(ctx, seed, types)
            want = plain_run(ref, optimizer_of(ref), batches[: len(got)], [])
            assert len(got) == len(want) and all(map(torch.equal, got, want)), (eab, n)
            counts.append(len(got))
    # Train on one iterator, evaluate on a new one (eval mode, no_grad), train on a third.
    train = [make_batch(seed, ctx.rank, s) for s in range(STEPS)]
    evaluate = [make_batch(seed, ctx.rank, 10 + s) for s in range(3)]
    dmp = wrap(ctx, seed, types)
    pipe = TrainPipelineSparseDist(dmp, optimizer_of(dmp), torch.device("cpu"))
    got = drain(pipe, iter(train))
    before = {k: v.clone() for k, v in full_state_dict(dmp).items()}
    grads = [None if p.grad is None else p.grad.clone() for p in dmp.parameters()]
    dmp.eval()
    with torch.no_grad():
        got += drain(pipe, iter(evaluate))
    after = full_state_dict(dmp)
    assert all(torch.equal(before[k], after[k]) for k in before)  # no optimizer step in eval
    # No zero_grad and no backward in eval mode: the last training step's gradients stay.
    for g, p in zip(grads, dmp.parameters(), strict=True):
        assert (g is None and p.grad is None) or (g is not None and torch.equal(g, p.grad))
    dmp.train()
    again = drain(pipe, iter(train[:2]))
    ref = wrap(ctx, seed, types)
    ref_opt = optimizer_of(ref)
    want = plain_run(ref, ref_opt, train, evaluate)
    want_again = plain_run(ref, ref_opt, train[:2], [])
    assert all(map(torch.equal, got, want)) and len(got) == len(want)
    assert all(map(torch.equal, again, want_again)) and len(again) == 2
    return counts


@pytest.mark.parametrize("rank_pool", [2], indirect=True)
def test_pipeline_batches_new_iterators_and_eval_mode(rank_pool: object) -> None:
    # TorchRec 1.8 (measured): execute_all_batches=True runs all n; False runs max(n - 2, 0).
    expected = [0, 1, 2, 3, 5, 0, 0, 0, 1, 3]
    for types in [("row_wise", "table_wise", "data_parallel"), ("column_wise",) * 3]:
        assert rank_pool.run(pipeline_modes, types) == [expected] * 2  # type: ignore[attr-defined]


def test_pipeline_rejects_a_non_bool_execute_all_batches() -> None:
    with pytest.raises(TypeError, match="execute_all_batches must be a bool, got 'yes'"):
        TrainPipelineSparseDist(nn.Linear(1, 1), None, "cpu", "yes")  # type: ignore[arg-type]


def test_dmp_registers_the_default_sharders_for_collective_plan() -> None:
    from shardrec_planner.default_sharders import default_sharders as planner_defaults
    from shardrec_sharding import get_default_sharders

    assert [type(s) for s in planner_defaults()] == [type(s) for s in get_default_sharders()]


def gather_for_serving(ctx: RankContext, types: tuple[str, ...]) -> bool:
    """Train one step sharded, gather with state_dict_gather into an unsharded model's state
    (zeros): rank 0 holds the single-process reference's weights, the other ranks their
    plain tensors; state_dict_to_device keeps every value and gathers to the same."""
    seed = f"gather{types}"
    dmp = wrap(ctx, seed, types)
    opt = optimizer_of(dmp)
    loss, _ = dmp(make_batch(seed, ctx.rank, 0))
    opt.zero_grad()
    loss.backward()
    opt.step()
    _, want = reference(seed, [ctx.world_size])
    state = dmp.state_dict()
    moved = state_dict_to_device(state, ctx.pg, torch.device("cpu"))
    assert list(moved) == sorted(state)
    for src in (state, moved):
        serving = Dlrm()
        dst = {k: torch.zeros_like(v) for k, v in serving.state_dict().items()}
        state_dict_gather(src, dst)
        for key, value in dst.items():
            if ctx.rank == 0 or not hasattr(src[key], "local_shards"):
                assert_close(value, want[key], msg=f"{types} {key}")
            else:  # TorchRec: only rank 0 receives a sharded value
                assert not value.any(), key
        batch = make_batch(seed, ctx.rank, 5)
        sharded_scores = dmp(batch)[1].detach()  # a collective: every rank runs it
        if ctx.rank == 0:
            serving.load_state_dict(dst)
            assert_close(serving(batch)[1], sharded_scores)
    # TorchRec's retrieval example: the serving copy exists on rank 0 only (meta elsewhere),
    # and the gather writes into the module's own tensors.
    serving = Dlrm(device="meta")
    if ctx.rank == 0:
        serving = serving.to_empty(device="cpu")
    state_dict_gather(state, serving.state_dict())
    if ctx.rank == 0:
        for key, value in serving.state_dict().items():
            assert_close(value, want[key], msg=f"{types} in place {key}")
    return True


def gather_refusals(ctx: RankContext) -> list[str]:
    dmp = wrap(ctx, "refuse", ("row_wise",) * 3)
    state = dmp.state_dict()
    full = {k: torch.zeros(tuple(v.size())) for k, v in state.items()}
    messages: list[str] = []
    for dst in (
        {**full, "nope": torch.zeros(1)},
        {**full, "sparse.embedding_bags.t0.weight": torch.zeros(3, 3)},
    ):
        try:
            state_dict_gather(state, dst)
        except ValueError as e:
            messages.append(str(e))
    state_dict_gather(state, full)  # nothing left half-done
    return messages


@pytest.mark.parametrize("rank_pool", [2], indirect=True)
def test_state_dict_transform_gathers_for_serving(rank_pool: object) -> None:
    for types in [("table_wise",) * 3, ("row_wise",) * 3, ("column_wise",) * 3]:
        assert all(rank_pool.run(gather_for_serving, types))  # type: ignore[attr-defined]
    assert (
        rank_pool.run(gather_refusals)
        == [  # type: ignore[attr-defined]
            [
                "state_dict_gather: dst key 'nope' is not in src",
                "state_dict_gather: dst['sparse.embedding_bags.t0.weight'] has shape (3, 3), but "
                "the value in src is (11, 4)",
            ]
        ]
        * 2
    )


def pipeline_bad_batch(ctx: RankContext) -> list[str]:
    """Rank 1's batch 2 has an id out of range: the pipeline launched its exchange under batch
    1 (deferred); the error raises on every rank where batch 2's inputs are waited (its own
    forward), and after `reset()` the same pipeline trains on."""
    types = ("table_wise", "row_wise", "table_wise")  # two strategies carrying the error flag
    seed = "pipe-bad"
    dmp = wrap(ctx, seed, types)
    pipe = TrainPipelineSparseDist(dmp, optimizer_of(dmp), torch.device("cpu"))
    batches = [make_batch(seed, ctx.rank, s) for s in range(5)]
    if ctx.rank == 1:
        kjt = batches[2].sparse_features
        values = kjt.values().clone()
        values[0] = 1000
        bad = KeyedJaggedTensor(FEATURES, values, lengths=kjt.lengths(), stride=kjt.stride())
        batches[2] = Batch(batches[2].dense_features, bad, batches[2].labels)
    outcomes: list[str] = []
    it = iter(batches)
    for _ in range(3):
        try:
            out = pipe.progress(it)  # type: ignore[arg-type]
            assert isinstance(out, Tensor)
            outcomes.append("ok")
        except (IndexError, PeerError) as exc:
            outcomes.append(type(exc).__name__)
    pipe.reset()
    good = iter([make_batch(seed, ctx.rank, s) for s in range(5, 8)])
    outcomes += ["ok" if isinstance(pipe.progress(good), Tensor) else "?" for _ in range(3)]
    return outcomes


@pytest.mark.parametrize("rank_pool", [2], indirect=True)
def test_pipeline_bad_batch_raises_on_every_rank_at_its_forward(rank_pool: object) -> None:
    got = rank_pool.run(pipeline_bad_batch)  # type: ignore[attr-defined]
    assert got[1] == ["ok", "ok", "IndexError", "ok", "ok", "ok"], got
    assert got[0] == ["ok", "ok", "PeerError", "ok", "ok", "ok"], got
