"""`shardrec train --tiered`: tables on disk behind a per-rank row cache.

The real command on 1 and 2 ranks trains exactly as the same run with the tables in memory
(same losses, same evaluations), prints the tier's counters in the progress line and the
summary, records them in summary.json and leaves the stores in OUT/tier-store/rank-<r>; and
every refusal of the flags is one line before launch."""

from __future__ import annotations

import json
import pathlib
import shutil
import types

import pytest
from _train_helpers import run_shardrec

from shardrec_planner import ShardingPlan, construct_module_sharding_plan, row_wise, table_wise
from shardrec_planner.cache_params import CacheAlgorithm
from shardrec_train import build_parser, options_from_namespace
from shardrec_train.tiered import (
    flag_problems,
    place_in_tier,
    planned_tiered,
    stats_text,
    store_problems,
    table_bytes,
    tiered_names,
)

# 3 tables of 2048 rows; a batch of 32 samples reaches at most ~130 rows of a table per rank.
TIERED_DATA = [
    "--dataset",
    "synthetic",
    "--dataset-option",
    "num_embeddings=2048",
    "--dataset-option",
    "num_sparse=3",
    "--dataset-option",
    "num_dense=2",
    "--dataset-option",
    "num_samples=512",
    "--dataset-option",
    "num_test_samples=128",
    "--embedding-dim",
    "8",
    "--dense-arch",
    "16,8",
    "--over-arch",
    "16,1",
    "--batch-size",
    "32",
]
CACHE_ROWS = {1: 400, 2: 200}
"""Cached rows per table per rank: a few steps' rows, so the caches evict."""


def options(*extra: str, out: pathlib.Path = pathlib.Path("run")) -> object:
    ns = build_parser().parse_args(["train", *TIERED_DATA, "--out", str(out), *extra])
    return options_from_namespace(ns)


def test_flag_refusals() -> None:
    assert flag_problems(options("--tiered")) == []  # type: ignore[arg-type]
    cases = {
        ("--tiered-cache-rows", "8"): "--tiered-cache-rows only apply with --tiered",
        ("--tiered", "--tiered-cache-fraction", "1.5"): "--tiered-cache-fraction must be at most 1",
        ("--tiered", "--sharding-type", "data_parallel"): "cannot be tiered; use one of table_wise",
        ("--tiered", "--raw-ids"): "raw-id (dynamic) tables cannot be tiered yet",
    }
    for flags, expected in cases.items():
        problems = flag_problems(options(*flags))  # type: ignore[arg-type]
        assert len(problems) == 1 and expected in problems[0], (flags, problems)


def fake_dataset(*rows: int) -> object:
    features = [types.SimpleNamespace(name=f"f{i}", num_embeddings=r) for i, r in enumerate(rows)]
    return types.SimpleNamespace(sparse_features=features)


def test_store_refusals(tmp_path: pathlib.Path) -> None:
    opts = options("--tiered", out=tmp_path)
    assert store_problems(opts, fake_dataset(100, 5)) == []  # type: ignore[arg-type]
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    opts = options("--tiered", "--tiered-store-dir", str(blocker / "store"), out=tmp_path)
    [problem] = store_problems(opts, fake_dataset(100))  # type: ignore[arg-type]
    assert problem == f"--tiered-store-dir {blocker / 'store'}: {blocker} is not a directory"
    opts = options("--tiered", out=tmp_path)
    [problem] = store_problems(opts, fake_dataset(10**15))  # type: ignore[arg-type]
    need = table_bytes(opts, 10**15)  # type: ignore[arg-type]
    assert f"the tiered tables (1, rows and optimizer state) need {need} bytes" in problem
    opts = options("--tiered", "--tiered-min-rows", "1000", out=tmp_path)
    [problem] = store_problems(opts, fake_dataset(100, 5))  # type: ignore[arg-type]
    assert "no table has that many rows (the largest has 100)" in problem


def test_tables_and_plan_options(tmp_path: pathlib.Path) -> None:
    import torch

    from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig

    opts = options(
        "--tiered",
        "--tiered-min-rows",
        "50",
        "--tiered-cache-rows",
        "10",
        "--tiered-cache-policy",
        "lfu",
        out=tmp_path,
    )
    tables = [("big", 101), ("small", 7)]
    assert tiered_names(opts, tables) == ["big"]  # type: ignore[arg-type]
    ebc = EmbeddingBagCollection(
        [
            EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=8, feature_names=[n])
            for n, r in tables
        ],
        device=torch.device("meta"),
    )
    module_plan = construct_module_sharding_plan(
        ebc, {"big": row_wise(), "small": table_wise(rank=0)}, world_size=2
    )
    plan = place_in_tier(opts, ShardingPlan(plan={"": module_plan}), ["big"])  # type: ignore[arg-type]
    assert planned_tiered(plan) == ["big"]
    big = plan.plan[""]["big"]
    assert big.sharding_type.value == "row_wise" and big.compute_kernel.value == "key_value"
    assert big.cache_params is not None and big.cache_params.algorithm is CacheAlgorithm.LFU
    # the largest shard (51 of 101 rows) caches exactly 10 rows
    assert round(51 * big.cache_params.load_factor) == 10
    assert big.key_value_params is not None
    assert big.key_value_params.ssd_storage_directory == str(tmp_path / "tier-store")
    assert plan.plan[""]["small"] == module_plan["small"]
    text = stats_text(
        {
            "t_big": {
                "hits": 3.0,
                "misses": 1.0,
                "hit_rate": 0.75,
                "bytes_read": 2048.0,
                "bytes_written": 10.0,
                "hidden_s": 0.5,
                "exposed_s": 0.25,
            }
        }
    )
    assert text == "tier big hit 75.0% r 2.0 KiB w 10 B hidden 0.50 s exposed 0.25 s"


def test_a_bad_store_path_stops_the_launcher(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = run_shardrec(
        [
            "train",
            *TIERED_DATA,
            "--nproc-per-node",
            "1",
            "--tiered",
            "--tiered-store-dir",
            str(blocker / "x"),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"shardrec train: error: --tiered-store-dir {blocker / 'x'}: {blocker} is not a directory"
    ]


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2])
def test_tiered_run_trains_as_the_in_memory_run(tmp_path: pathlib.Path, ranks: int) -> None:
    common = [*TIERED_DATA, "--nproc-per-node", str(ranks)]
    if ranks == 2:
        common += ["--sharding-type", "row_wise"]  # a shard of every table on each rank
    tiered_out, plain_out = tmp_path / "tiered", tmp_path / "plain"
    tiered = run_shardrec(
        [
            "train",
            *common,
            "--tiered",
            "--tiered-cache-rows",
            str(CACHE_ROWS[ranks]),
            "--out",
            str(tiered_out),
        ]
    )
    assert tiered.returncode == 0, tiered.stderr[-3000:]
    plain = run_shardrec(["train", *common, "--out", str(plain_out)])
    assert plain.returncode == 0, plain.stderr[-3000:]

    # Same losses and evaluations, bit for bit.
    got = json.loads((tiered_out / "history.json").read_text())
    want = json.loads((plain_out / "history.json").read_text())
    assert got["train_loss"] == want["train_loss"] and got["evals"] == want["evals"]

    summary = json.loads((tiered_out / "summary.json").read_text())
    stats = summary["tiered_tables"]
    assert sorted(stats) == ["t_cat_0", "t_cat_1", "t_cat_2"]
    for name, s in stats.items():
        assert s["misses"] > CACHE_ROWS[ranks] * ranks, (name, s)
        assert 0 < s["hit_rate"] < 1 and s["hits"] + s["misses"] > 0
        assert s["bytes_read"] > 0 and s["bytes_written"] > 0  # evicted dirty rows written
        assert s["exposed_s"] > 0 and s["hidden_s"] >= 0  # no prefetch: loads are exposed
    lines = tiered.stdout.splitlines()
    head = lines.index("tiered tables (summed over ranks):")
    assert [line.split()[1:3] for line in lines[head + 1 : head + 4]] == [
        ["cat_0", "hit"],
        ["cat_1", "hit"],
        ["cat_2", "hit"],
    ]
    # the progress line, or the evaluation lines above it
    assert "| tier cat_0 hit " in tiered.stdout.split("tiered tables")[0]
    assert "kernel key_value runs tiered" in tiered.stdout
    stores = sorted(str(p.relative_to(tiered_out)) for p in tiered_out.rglob("*.tier"))
    assert stores == [f"tier-store/rank-{r}/t_cat_{t}.tier" for r in range(ranks) for t in range(3)]
    assert (tiered_out / "checkpoints" / f"step_{len(got['train_loss'])}").is_dir()
    assert "tiered tables" not in plain.stdout and "tier " not in plain.stdout


@pytest.mark.slow
def test_a_cache_smaller_than_a_batch_is_one_line(tmp_path: pathlib.Path) -> None:
    result = run_shardrec(
        [
            "train",
            *TIERED_DATA,
            "--nproc-per-node",
            "1",
            "--tiered",
            "--tiered-cache-rows",
            "4",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert result.returncode != 0
    [line] = [line for line in result.stderr.splitlines() if "shardrec train: error" in line]
    assert line.startswith("[rank 0] shardrec train: error: table 't_cat_")
    assert "but the cache holds 4 rows" in line
    assert line.endswith(
        "raise --tiered-cache-rows or --tiered-cache-fraction (or lower --batch-size)"
    )
    assert "[rank0]: Traceback" not in result.stderr  # the rank's own traceback


@pytest.mark.slow
def test_tiered_run_resumes_from_its_checkpoint(tmp_path: pathlib.Path) -> None:
    """A --tiered run with checkpoints, then its output as a crash after step 6 would leave it,
    resumed: the same losses as the uninterrupted run (the tables come back from the
    checkpoint into freshly built stores)."""
    common = [
        *TIERED_DATA,
        "--nproc-per-node",
        "1",
        "--tiered",
        "--tiered-cache-rows",
        "400",
        "--checkpoint-every",
        "6",
        "--eval-every",
        "8",
    ]
    full = tmp_path / "full"
    result = run_shardrec(["train", *common, "--out", str(full)])
    assert result.returncode == 0, result.stderr[-3000:]
    crashed = tmp_path / "crashed"
    shutil.copytree(full, crashed)
    for name in ("step_12", "step_16"):
        shutil.rmtree(crashed / "checkpoints" / name)
    (crashed / "summary.json").unlink()
    result = run_shardrec(["train", *common, "--resume", "--out", str(crashed)])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "at step 6" in result.stdout
    got = json.loads((crashed / "history.json").read_text())
    want = json.loads((full / "history.json").read_text())
    assert got["train_loss"] == want["train_loss"] and got["evals"] == want["evals"]
    assert "tiered_tables" in json.loads((crashed / "summary.json").read_text())


@pytest.mark.slow
def test_planner_tiers_tables_that_do_not_fit_on_its_own(tmp_path: pathlib.Path) -> None:
    """Without --tiered, a model whose tables do not fit in the ranks' memory (here a host of
    0.01 GiB) gets tables placed on the disk tier by the planner, and trains exactly as the
    same run in memory."""
    common = [
        *TIERED_DATA,
        "--dataset-option",
        "num_embeddings=200000",
        "--nproc-per-node",
        "1",
        "--max-steps",
        "8",
    ]
    auto_out, plain_out = tmp_path / "auto", tmp_path / "plain"
    auto = run_shardrec(["train", *common, "--host-memory-gib", "0.01", "--out", str(auto_out)])
    assert auto.returncode == 0, auto.stderr[-3000:]
    assert "disk tier (largest per-rank store total" in auto.stdout
    assert "kernel key_value runs tiered" in auto.stdout
    tiered = json.loads((auto_out / "summary.json").read_text())["tiered_tables"]
    assert tiered and all(s["hits"] + s["misses"] > 0 for s in tiered.values())
    assert sorted(p.parent.name for p in auto_out.rglob("*.tier")) == ["rank-0"] * len(tiered)

    plain = run_shardrec(["train", *common, "--out", str(plain_out)])
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert "disk tier" not in plain.stdout and "tiered tables" not in plain.stdout
    got = json.loads((auto_out / "history.json").read_text())
    want = json.loads((plain_out / "history.json").read_text())
    assert got["train_loss"] == want["train_loss"] and got["evals"] == want["evals"]
