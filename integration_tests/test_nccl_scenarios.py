"""The integration scenarios over NCCL, one rank per GPU (`nox -s integration_nccl`).

World size 1 runs on one GPU; every world size from 2 up to the number of visible GPUs runs
when there are at least two (NCCL needs one rank per GPU). Without a GPU every test skips.

The scenarios are the gloo suites' (the sharding package's forward and training cases, the
DMP package's model and pipeline), with inputs moved to each rank's GPU and results compared
on the CPU against the same single-process references:

- every sharding type x pooling x weighted: sharded forward equals the unsharded module;
- fused training with several optimizers equals one process trained on all ranks' batches;
- DistributedModelParallel over a DLRM-like model: losses and weights equal the reference;
- TrainPipelineSparseDist (side-stream host-to-device copy) equals the plain loop.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from shardrec_collectives import ShardingEnv
from shardrec_dmp import TrainPipelineSparseDist
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, RankPool, assert_close, shared_pool

PACKAGES = Path(__file__).resolve().parents[1] / "packages"
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
# One rank per GPU; [1] without GPUs too, so that each test is listed once and skipped.
WORLDS = [1] if GPUS <= 1 else list(range(1, min(GPUS, 4) + 1))

pytestmark = pytest.mark.skipif(GPUS == 0, reason="NCCL scenarios need at least one GPU")


def _load(package: str, name: str) -> ModuleType:
    module_name = f"nccl_scenarios_{package.replace('-', '_')}_{name}"
    found = sys.modules.get(module_name)
    if found is not None:
        return found
    spec = importlib.util.spec_from_file_location(
        module_name, PACKAGES / package / "tests" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    tests = str(PACKAGES / package / "tests")
    if tests not in sys.path:  # the loaded modules import their folder's helpers
        sys.path.insert(0, tests)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # the rank pool finds functions by module name and file
    spec.loader.exec_module(module)
    return module


forward = _load("shardrec-sharding", "test_forward")
training = _load("shardrec-sharding", "test_training")
dmp_tests = _load("shardrec-dmp", "test_dmp")


def _pool(world: int) -> RankPool:
    # Not the `pool_factory` fixture: it asks for two GPUs even for one rank.
    return shared_pool(world, "nccl")


# -- rank functions ---------------------------------------------------------------------------


def forward_on_gpu(ctx: RankContext, cases: list[object]) -> int:
    env = ShardingEnv.from_process_group(ctx.pg)
    assert env.device.type == "cuda", env.device
    for case in cases:
        ebc = forward.build_ebc(case)
        plan = forward.plan_for(ebc, case, ctx.world_size)
        sharded = EmbeddingBagCollectionSharder().shard(ebc, plan, env)  # type: ignore[arg-type]
        for step in range(2):
            kjt = forward.batch(case, ctx.rank, step)
            expected = ebc(kjt)
            got = sharded(kjt.to(env.device)).wait()
            assert got.values().device == env.device, str(case)
            assert got.keys() == expected.keys(), str(case)
            assert_close(got.values().cpu(), expected.values(), msg=f"{case} step {step}")
    return len(cases)


def train_on_gpu(ctx: RankContext, cases: list[object]) -> list[dict[str, list[tuple]]]:
    """`training.train_sharded` with the batches on this rank's GPU; shards come back on CPU."""
    env = ShardingEnv.from_process_group(ctx.pg)
    results = []
    for case in cases:
        ebc = training.EmbeddingBagCollection(training.configs(case), is_weighted=case.weighted)
        with torch.no_grad():
            for n, w in training.initial_weights(case).items():
                ebc.embedding_bags[n].weight.copy_(w)
        spec = training.spec_of(case)
        if case.in_backward:
            training.apply_optimizer_in_backward(torch.optim.Adagrad, ebc.parameters(), {"lr": 0.1})
            sharder = EmbeddingBagCollectionSharder()
        else:
            sharder = EmbeddingBagCollectionSharder(fused_params=spec.to_fused_params())
        plan = training.construct_module_sharding_plan(
            ebc,
            {
                n: training.generator_for(
                    case.types[i], i, ctx.world_size, "dense" if case.dense else None
                )
                for i, (n, *_) in enumerate(training.TABLES)
            },
            world_size=ctx.world_size,
            local_world_size=2 if ctx.world_size == 4 else ctx.world_size,
        )
        sharded = sharder.shard(ebc, plan, env)
        fused_keys = set(sharded.fused_optimizer.params)
        dense = [p for n, p in sharded.named_parameters() if n not in fused_keys]
        dense_opt = torch.optim.SGD(dense, lr=spec.learning_rate) if dense else None
        for step in range(training.STEPS):
            kjt, coefficients = training.batch(case, ctx.rank, step)
            out = sharded(kjt.to(env.device)).wait()
            (out.values() * coefficients.to(env.device)).sum().backward()
            if dense_opt is not None:
                dense_opt.step()
                dense_opt.zero_grad()
        shards: dict[str, list[tuple]] = {}
        for key, value in sharded.state_dict().items():
            table = key.split(".")[1]
            if isinstance(value, torch.Tensor) and not hasattr(value, "local_shards"):
                shards[table] = [((0, 0), tuple(value.shape), value.cpu())]
            else:
                shards[table] = [
                    (
                        tuple(s.metadata.shard_offsets),
                        tuple(s.metadata.shard_sizes),
                        s.tensor.cpu(),
                    )
                    for s in value.local_shards()
                ]
        results.append(shards)
    return results


def dmp_on_gpu(ctx: RankContext, types: tuple[str, ...]) -> bool:
    """DMP losses and weights against the CPU reference; then pipeline == plain loop."""
    device = torch.device("cuda", torch.cuda.current_device())
    seed = f"nccl{types}"
    want_losses, want_weights = dmp_tests.reference(seed, [ctx.world_size] * dmp_tests.STEPS)
    dmp = dmp_tests.wrap(ctx, seed, types)
    opt = dmp_tests.optimizer_of(dmp)
    for step in range(dmp_tests.STEPS):
        loss, _ = dmp(dmp_tests.make_batch(seed, ctx.rank, step).to(device))
        assert_close(loss.cpu(), want_losses[step][ctx.rank], msg=f"{types} loss {step}")
        opt.zero_grad()
        loss.backward()
        opt.step()
    for key, value in dmp.state_dict().items():
        want = want_weights[key]
        if hasattr(value, "local_shards"):
            for shard in value.local_shards():
                (r0, c0), (r, c) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
                assert_close(shard.tensor.cpu(), want[r0 : r0 + r, c0 : c0 + c], msg=key)
        else:
            assert_close(value.cpu(), want, msg=key)
    outputs: list[list[torch.Tensor]] = []
    for pipelined in (False, True):
        model = dmp_tests.wrap(ctx, seed, types)
        model_opt = dmp_tests.optimizer_of(model)
        batches = [dmp_tests.make_batch(seed, ctx.rank, s) for s in range(dmp_tests.STEPS + 1)]
        got: list[torch.Tensor] = []
        if pipelined:
            pipe = TrainPipelineSparseDist(model, model_opt, device)
            it = iter(batches)
            for _ in batches:
                got.append(pipe.progress(it).detach().cpu())  # type: ignore[union-attr]
        else:
            for b in batches:
                model_opt.zero_grad()
                loss, logits = model(b.to(device))
                loss.backward()
                model_opt.step()
                got.append(logits.detach().cpu())
        outputs.append(got)
    for a, b in zip(*outputs, strict=True):
        # Atomics in CUDA reductions: equal up to float rounding, not bit for bit.
        assert_close(a, b, msg=f"{types} pipeline")
    return True


# -- tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", WORLDS)
def test_forward_scenarios_nccl(world: int) -> None:
    done = _pool(world).run(forward_on_gpu, forward.CASES)
    assert done == [len(forward.CASES)] * world


@pytest.mark.parametrize("world", WORLDS)
def test_fused_training_scenarios_nccl(world: int) -> None:
    per_rank = _pool(world).run(train_on_gpu, training.CASES)
    for c, case in enumerate(training.CASES):
        expected = training.reference_tables(case, world)
        for name, full in expected.items():
            got = torch.full_like(full, float("nan"))
            for rank_result in per_rank:
                for (r0, c0), (nr, nc), tensor in rank_result[c][name]:
                    got[r0 : r0 + nr, c0 : c0 + nc] = tensor
            assert not torch.isnan(got).any(), (str(case), name)
            torch.testing.assert_close(got, full, rtol=1.3e-4, atol=1e-4, msg=f"{case} {name}")


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize(
    "types", [("row_wise", "table_wise", "data_parallel"), ("column_wise",) * 3]
)
def test_dmp_and_pipeline_nccl(world: int, types: tuple[str, ...]) -> None:
    assert all(_pool(world).run(dmp_on_gpu, types))
