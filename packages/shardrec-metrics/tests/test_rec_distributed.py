"""TorchRec-API metrics over 2 real gloo ranks: lifetime and window values equal the naive
reference of every rank's samples pooled, with uneven batch counts per rank."""

from __future__ import annotations

import math

import _rec_reference as ref
import pytest
import torch
from _rec_data import random_batches

from shardrec_metrics.rec import RecComputeMode, RecTaskInfo
from shardrec_metrics.rec.auc import AUCMetric
from shardrec_metrics.rec.ctr import CTRMetric
from shardrec_metrics.rec.mse import MSEMetric
from shardrec_metrics.rec.ne import NEMetric
from shardrec_testing import RankContext, RankPool

WINDOW = 20  # global: each of 2 ranks keeps 10 samples
BATCHES = {0: [4, 4, 3, 4], 1: [4]}  # uneven on purpose
TASKS = ["a", "b"]


def _rank_data(rank: int) -> dict[str, list[ref.Batch]]:
    return random_batches(100 + rank, BATCHES[rank], TASKS)


def check_pooled(ctx: RankContext, mode_value: int, on_all: bool) -> dict[str, float]:
    mode = RecComputeMode(mode_value)
    tasks = [RecTaskInfo(name=t) for t in TASKS]
    metrics = [
        cls(
            world_size=ctx.world_size,
            my_rank=ctx.rank,
            batch_size=4,
            tasks=tasks,
            compute_mode=mode,
            window_size=WINDOW,
            compute_on_all_ranks=on_all,
        )
        for cls in (NEMetric, CTRMetric, MSEMetric, AUCMetric)
    ]
    mine = _rank_data(ctx.rank)
    for i in range(len(BATCHES[ctx.rank])):
        cols = {t: torch.tensor(mine[t][i], dtype=torch.double).T for t in TASKS}
        p, y, w = ({t: cols[t][k] for t in TASKS} for k in range(3))
        for m in metrics:
            if mode == RecComputeMode.UNFUSED_TASKS_COMPUTATION:
                m.update(predictions=p, labels=y, weights=w)
            else:
                m.update(
                    predictions=torch.stack(list(p.values())),
                    labels=torch.stack(list(y.values())),
                    weights=torch.stack(list(w.values())),
                )
    out: dict[str, float] = {}
    for m in metrics:
        out.update({k: float(v) for k, v in m.compute().items()})
        out.update({k: float(v) for k, v in m.local_compute().items()})
    return out


def _expected(rank: int) -> dict[str, float]:
    data = {r: _rank_data(r) for r in BATCHES}
    local = WINDOW // len(BATCHES)
    exp: dict[str, float] = {}
    for t in TASKS:
        everyone = [s for r in data for b in data[r][t] for s in b]
        windows = [s for r in data for b in ref.window_batches(data[r][t], local) for s in b]
        own = [s for b in data[rank][t] for s in b]
        own_window = [s for b in ref.window_batches(data[rank][t], local) for s in b]
        for name, fn in (("ne", ref.ne), ("ctr", ref.ctr), ("mse", ref.mse)):
            exp[f"{name}-{t}|lifetime_{name}"] = fn(everyone)
            exp[f"{name}-{t}|window_{name}"] = fn(windows)
            exp[f"{name}-{t}|local_lifetime_{name}"] = fn(own)
            exp[f"{name}-{t}|local_window_{name}"] = fn(own_window)
        exp[f"mse-{t}|window_rmse"] = math.sqrt(ref.mse(windows))
        exp[f"auc-{t}|window_auc"] = ref.auc(
            [s for r in data for s in ref.window_samples(data[r][t], local)]
        )
        exp[f"auc-{t}|local_window_auc"] = ref.auc(ref.window_samples(data[rank][t], local))
    return exp


@pytest.mark.parametrize(
    "mode", [RecComputeMode.UNFUSED_TASKS_COMPUTATION, RecComputeMode.FUSED_TASKS_COMPUTATION]
)
def test_two_ranks_equal_the_pooled_reference(rank_pool: RankPool, mode: RecComputeMode) -> None:
    results = rank_pool.run(check_pooled, mode.value, False)
    for rank, got in enumerate(results):
        exp = _expected(rank)
        keys = [k for k in exp if "|local_" in k or rank == 0]
        assert set(keys) <= set(got), sorted(set(keys) - set(got))
        for k in keys:
            rel = 1e-6 if k.startswith("auc") else 1e-9  # AUC samples are float32, as TorchRec
            assert got[k] == pytest.approx(exp[k], rel=rel), (rank, k)
        if rank == 1:  # not rank 0 and compute_on_all_ranks off: only local values
            assert all("|local_" in k for k in got)


def test_compute_on_all_ranks_gives_every_rank_the_global_values(rank_pool: RankPool) -> None:
    results = rank_pool.run(check_pooled, RecComputeMode.FUSED_TASKS_COMPUTATION.value, True)
    glob = [{k: v for k, v in r.items() if "|local_" not in k} for r in results]
    assert glob[0] and glob[0] == glob[1]


def pre_compute_round_trip(ctx: RankContext) -> dict[str, dict[str, float]]:
    """This rank's `compute()` over both ranks, and what a one-rank module computes from the
    states `get_pre_compute_states` gathered (TorchRec's contract: the same values)."""
    from shardrec_metrics.rec.metric_module import RecMetricModule, generate_metric_module
    from shardrec_metrics.rec.metrics_config import MetricsConfig, RecMetricDef, RecMetricEnum

    tasks = [
        RecTaskInfo(name=t, label_name=f"{t}_y", prediction_name=f"{t}_p", weight_name=f"{t}_w")
        for t in TASKS
    ]
    config = MetricsConfig(
        rec_tasks=tasks,
        rec_metrics={
            e: RecMetricDef(rec_task_indices=[0, 1], window_size=WINDOW)
            for e in (RecMetricEnum.NE, RecMetricEnum.AUC, RecMetricEnum.MSE)
        },
    )

    def build(world: int, rank: int) -> RecMetricModule:
        return generate_metric_module(
            RecMetricModule, config, 4, world, rank, state_metrics_mapping={}, device="cpu"
        )

    module = build(ctx.world_size, ctx.rank)
    mine = _rank_data(ctx.rank)
    for i in range(len(BATCHES[ctx.rank])):
        out: dict[str, torch.Tensor] = {}
        for t in TASKS:
            cols = torch.tensor(mine[t][i], dtype=torch.double).T
            out[f"{t}_p"], out[f"{t}_y"], out[f"{t}_w"] = cols[0], cols[1], cols[2]
        module.update(out)
    states = module.get_pre_compute_states()
    single = build(1, 0)
    single.load_pre_compute_states(states)
    both = {k: float(v) for k, v in module.rec_metrics.compute().items()}
    loaded = {k: float(v) for k, v in single.rec_metrics.compute().items()}
    return {"both": both, "loaded": loaded}


def test_pre_compute_states_give_the_values_over_every_rank(rank_pool: RankPool) -> None:
    results = rank_pool.run(pre_compute_round_trip)
    both = results[0]["both"]
    assert both and both.keys() == results[0]["loaded"].keys()
    for key, value in both.items():
        for r in results:  # every rank received the same states
            assert r["loaded"][key] == pytest.approx(value, rel=1e-9), key
