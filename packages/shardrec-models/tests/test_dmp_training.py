"""DLRMTrain under DistributedModelParallel on 2 gloo ranks trains like one process.

Each rank trains on its own batches; the reference is the unsharded model in one process on the
concatenation of the ranks' batches, with the loss `sum over ranks of that rank's mean BCE`,
the tables' own rate and `lr_dense / world_size` for the dense part (DDP averages dense
gradients while tables get the gradient of the sum: docs/design/dmp-reference-training.md).
SGD everywhere, so the updates agree up to float summation order. The last batch is smaller
than the others, equally on every rank (the data packages' rank-sharding rule).

Models built on `meta` get their initial weights from the DMP (each rank initializes its
shards, DDP broadcasts rank 0's dense part); the reference starts from `full_state_dict`.
"""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch
from torch import Tensor

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from models_reference import (
    Batch,
    TableSpec,
    concat,
    feature_limits,
    make_batch,
    make_ebc,
    randomize_,
)

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel, TrainPipelineSparseDist, full_state_dict
from shardrec_models import DLRM, DLRM_DCN, DLRMTrain
from shardrec_optim import CombinedOptimizer, KeyedOptimizerWrapper, in_backward_optimizer_filter
from shardrec_planner import (
    ShardingPlan,
    construct_module_sharding_plan,
    data_parallel,
    row_wise,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, assert_close, bce_step_per_rank, seeded_generator

TABLES: list[TableSpec] = [("t0", 11, ["f0"]), ("t1", 7, ["f1", "f2"]), ("t2", 9, ["f3"])]
LIMITS = feature_limits(TABLES)
DIM, DENSE_IN, DENSE, OVER = 4, 3, [5, 4], [6, 1]
BATCH_SIZES = [4, 4, 2]  # per rank and step: the last batch is smaller
LR_EMB, LR_DENSE = 0.2, 0.1
EBC_PATH = "model.sparse_arch.embedding_bag_collection"


def build(dcn: bool, meta: bool, seed: str) -> DLRMTrain:
    device = "meta" if meta else None
    ebc = make_ebc(TABLES, DIM, device=device)
    if dcn:
        model: DLRM = DLRM_DCN(ebc, DENSE_IN, DENSE, OVER, 2, 3, dense_device=device)
    else:
        model = DLRM(ebc, DENSE_IN, DENSE, OVER, dense_device=device)
    if not meta:
        randomize_(model, seeded_generator("weights", seed))
    return DLRMTrain(model)


def batch_for(seed: str, rank: int, step: int) -> Batch:
    return make_batch(LIMITS, DENSE_IN, BATCH_SIZES[step], seeded_generator(seed, rank, step))


def plan_for(model: DLRMTrain, kind: str, world: int) -> ShardingPlan:
    def generator(i: int) -> object:
        if kind == "table_wise":
            return table_wise(rank=(i + 1) % world)
        if kind == "row_wise":
            return row_wise()
        assert kind == "data_parallel"
        return data_parallel()

    ebc = model.model.sparse_arch.embedding_bag_collection
    module_plan = construct_module_sharding_plan(
        ebc,
        {name: generator(i) for i, (name, *_) in enumerate(TABLES)},  # type: ignore[misc]
        world_size=world,
    )
    return ShardingPlan(plan={EBC_PATH: module_plan})


def wrap(ctx: RankContext, model: DLRMTrain, kind: str) -> DistributedModelParallel:
    env = ShardingEnv.from_process_group(ctx.pg)
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": "exact_sgd", "learning_rate": LR_EMB}
    )
    return DistributedModelParallel(
        model, env=env, plan=plan_for(model, kind, ctx.world_size), sharders=[sharder]
    )


def optimizer_of(dmp: DistributedModelParallel) -> CombinedOptimizer:
    """Fused tables step in backward; replicated tables at the table rate; dense at its own."""
    rest = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    tables = {k: v for k, v in rest.items() if k.startswith(EBC_PATH)}
    dense = {k: v for k, v in rest.items() if not k.startswith(EBC_PATH)}
    optims: list[object] = [
        dmp.fused_optimizer,
        KeyedOptimizerWrapper(dense, lambda p: torch.optim.SGD(p, lr=LR_DENSE)),
    ]
    if tables:
        optims.append(KeyedOptimizerWrapper(tables, lambda p: torch.optim.SGD(p, lr=LR_EMB)))
    return CombinedOptimizer(optims)  # type: ignore[arg-type]


def reference(
    start: dict[str, Tensor], dcn: bool, seed: str, world: int
) -> tuple[list[list[Tensor]], dict[str, Tensor]]:
    """Per step every rank's loss, and the final weights, of the one-process reference."""
    model = build(dcn, meta=False, seed=seed)
    model.load_state_dict(start)
    tables = [p for n, p in model.named_parameters() if n.startswith(EBC_PATH)]
    dense = [p for n, p in model.named_parameters() if not n.startswith(EBC_PATH)]
    opt = torch.optim.SGD(
        [{"params": tables, "lr": LR_EMB}, {"params": dense, "lr": LR_DENSE / world}]
    )
    losses: list[list[Tensor]] = []
    for step in range(len(BATCH_SIZES)):
        batches = [batch_for(seed, r, step) for r in range(world)]
        full = concat(batches)
        # The logits with their graph (DLRMTrain returns them detached), cut per rank below.
        logits = model.model(full.dense_features, full.sparse_features).squeeze(-1)
        losses.append(bce_step_per_rank(opt, logits, [b.labels for b in batches]))
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def train_case(ctx: RankContext, kind: str, dcn: bool, meta: bool) -> int:
    world, rank = ctx.world_size, ctx.rank
    seed = f"{kind}-{dcn}-{meta}"
    what = f"{seed} rank {rank}/{world}"
    dmp = wrap(ctx, build(dcn, meta, seed), kind)
    assert not any(p.is_meta for p in dmp.parameters()), what
    start = full_state_dict(dmp)
    if not meta:
        unsharded = build(dcn, meta=False, seed=seed).state_dict()
        for key, value in unsharded.items():
            assert torch.equal(start[key], value), f"{what}: sharding changed {key}"
    want_losses, want_weights = reference(start, dcn, seed, world)
    opt = optimizer_of(dmp)
    for step in range(len(BATCH_SIZES)):
        batch = batch_for(seed, rank, step)
        loss, (loss_d, logits, labels) = dmp(batch)
        assert logits.shape == labels.shape == (BATCH_SIZES[step],), what
        assert torch.equal(loss_d, loss.detach()), what
        assert_close(loss.detach(), want_losses[step][rank], msg=f"{what} loss {step}")
        opt.zero_grad()
        loss.backward()
        opt.step()
    final = full_state_dict(dmp)
    assert sorted(final) == sorted(want_weights), what
    for key, value in final.items():
        assert_close(value, want_weights[key], msg=f"{what} {key}")
    return len(final)


CASES = [
    ("table_wise", False, False),
    ("row_wise", True, True),  # DLRM_DCN built on meta
    ("data_parallel", False, False),
    ("table_wise", True, True),
]


@pytest.mark.parametrize(("kind", "dcn", "meta"), CASES)
def test_dmp_trains_like_one_process(
    pool_factory: object, kind: str, dcn: bool, meta: bool
) -> None:
    results = pool_factory(2).run(train_case, kind, dcn, meta)  # type: ignore[operator]
    assert len(set(results)) == 1 and results[0] > 0


def test_one_rank_materializes_meta(pool_factory: object) -> None:
    results = pool_factory(1).run(train_case, "row_wise", True, True)  # type: ignore[operator]
    assert results[0] > 0


def pipeline_vs_loop(ctx: RankContext) -> bool:
    seed = "pipeline"
    runs: list[tuple[list[Tensor], dict[str, Tensor]]] = []
    for pipelined in (False, True):
        dmp = wrap(ctx, build(False, False, seed), "table_wise")
        opt = optimizer_of(dmp)
        batches = [batch_for(seed, ctx.rank, s) for s in range(len(BATCH_SIZES))]
        logits: list[Tensor] = []
        if pipelined:
            pipe = TrainPipelineSparseDist(dmp, opt, torch.device("cpu"))
            it = iter(batches)
            for _ in batches:
                logits.append(pipe.progress(it)[1])  # type: ignore[arg-type, index]
        else:
            for b in batches:
                opt.zero_grad()
                loss, (_, out, _) = dmp(b)
                loss.backward()
                opt.step()
                logits.append(out)
        runs.append((logits, full_state_dict(dmp)))
    (a_out, a_state), (b_out, b_state) = runs
    assert all(torch.equal(x, y) for x, y in zip(a_out, b_out, strict=True))
    assert all(torch.equal(a_state[k], b_state[k]) for k in a_state)
    return True


def test_train_pipeline_drives_dlrm_train(pool_factory: object) -> None:
    assert all(pool_factory(2).run(pipeline_vs_loop))  # type: ignore[operator]
