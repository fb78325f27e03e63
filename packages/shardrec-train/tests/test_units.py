"""The pieces without processes: segments, forced plans, history, data order, the parser."""

from __future__ import annotations

import json
import pathlib
import subprocess
import types

import numpy as np
import pytest
import torch
from _train_helpers import SYNTHETIC
from hypothesis import given
from hypothesis import strategies as st

from shardrec_data import load_dataset
from shardrec_planner import ShardingType, construct_module_sharding_plan
from shardrec_sharding import EmbeddingBagCollectionSharder, check_plan
from shardrec_train import TrainOptions, build_parser, options_from_namespace
from shardrec_train.build import build_model, table_configs
from shardrec_train.checkpoints import History, latest_checkpoint
from shardrec_train.cli import main
from shardrec_train.loop import boundaries, total_steps, train_batches
from shardrec_train.sharding import forced_generators, forced_type_problem
from shardrec_train.worker import choose_backend


def _opts(tmp_path: pathlib.Path, *extra: str) -> TrainOptions:
    ns = build_parser().parse_args(["train", *SYNTHETIC, "--out", str(tmp_path), *extra])
    return options_from_namespace(ns)


@given(
    start=st.integers(0, 60),
    total=st.integers(1, 60),
    eval_every=st.integers(0, 20),
    ckpt_every=st.integers(0, 20),
)
def test_boundaries_against_a_loop(
    start: int, total: int, eval_every: int, ckpt_every: int
) -> None:
    expected = [
        s
        for s in range(start + 1, total + 1)
        if s == total
        or (eval_every and s % eval_every == 0)
        or (ckpt_every and s % ckpt_every == 0)
    ]
    assert boundaries(start, total, eval_every, ckpt_every) == expected


def test_train_batches_resume_reads_the_same_batches(tmp_path: pathlib.Path) -> None:
    """Batches from step k equal the uninterrupted stream's batches from k, across epochs."""
    opts = _opts(tmp_path, "--epochs", "3")
    data = load_dataset(
        "synthetic",
        num_embeddings=64,
        num_sparse=4,
        num_dense=2,
        num_samples=512,
        num_test_samples=128,
    )
    assert total_steps(data, opts, 2) == 24
    full = list(train_batches(data, opts, rank=1, world_size=2, start_step=0))
    assert len(full) == 24
    for k in (0, 5, 8, 13, 23, 24):
        resumed = list(train_batches(data, opts, rank=1, world_size=2, start_step=k))
        assert len(resumed) == 24 - k
        for a, b in zip(resumed, full[k:], strict=True):
            assert torch.equal(a.labels, b.labels)
            assert torch.equal(a.dense_features, b.dense_features)
            assert torch.equal(a.sparse_features.values(), b.sparse_features.values())
    # Epochs differ in order (a reshuffle), and --max-steps caps the run.
    assert not torch.equal(full[0].labels, full[8].labels)
    assert total_steps(data, _opts(tmp_path, "--epochs", "3", "--max-steps", "10"), 2) == 10


CASES = [
    # (type, rows per table, dim, world, local, fits)
    (ShardingType.TABLE_WISE, [10, 20, 30], 8, 3, 3, True),
    (ShardingType.TABLE_WISE, [10, 20, 30], 8, 4, 4, False),
    (ShardingType.ROW_WISE, [2, 50], 8, 2, 2, True),
    (ShardingType.ROW_WISE, [2, 50], 8, 3, 3, False),
    (ShardingType.ROW_WISE, [5, 50], 8, 4, 4, False),  # blocks 2,2,1,0
    (ShardingType.TABLE_ROW_WISE, [3, 50], 8, 4, 2, True),
    (ShardingType.COLUMN_WISE, [10, 20], 8, 4, 4, True),
    (ShardingType.COLUMN_WISE, [10, 20], 6, 4, 4, False),
    (ShardingType.TABLE_COLUMN_WISE, [10, 20], 6, 4, 2, True),
    (ShardingType.DATA_PARALLEL, [1, 2], 3, 7, 7, True),
]


@pytest.mark.parametrize(("st_", "rows", "dim", "world", "local", "fits"), CASES)
def test_forced_type_problem_and_plans(
    st_: ShardingType, rows: list[int], dim: int, world: int, local: int, fits: bool
) -> None:
    """A type that fits gives a plan the sharding layer accepts, with every rank holding a
    piece; one that does not is reported with the world size or the dim."""
    tables = [(f"f{i}", r) for i, r in enumerate(rows)]
    problem = forced_type_problem(st_, tables, dim, world, local)
    if not fits:
        assert problem is not None and st_.value in problem
        assert f"{world}" in problem or f"{dim}" in problem
        return
    assert problem is None
    from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig

    configs = [
        EmbeddingBagConfig(
            name=f"t{i}", num_embeddings=r, embedding_dim=dim, feature_names=[f"f{i}"]
        )
        for i, r in enumerate(rows)
    ]
    ebc = EmbeddingBagCollection(configs, device=torch.device("meta"))
    sharder = EmbeddingBagCollectionSharder()
    plan = construct_module_sharding_plan(
        ebc,
        forced_generators(st_, [c.name for c in configs], world, local),
        world_size=world,
        local_world_size=local,
        sharder=sharder,
    )
    check_plan(configs, plan, world, list(ShardingType))
    assert {ps.sharding_type for ps in plan.values()} == {st_}
    held = {r for ps in plan.values() for r in ps.ranks}
    if st_ is not ShardingType.TABLE_ROW_WISE and st_ is not ShardingType.TABLE_COLUMN_WISE:
        assert held == set(range(world))


def test_history_round_trip_and_truncate(tmp_path: pathlib.Path) -> None:
    history = History(
        train_loss=[(1, 0.7), (2, 0.6), (3, 0.5)],
        evals=[(2, {"auc": 0.7, "ne": 0.9}), (3, {"auc": 0.8, "ne": 0.8})],
    )
    history.write(tmp_path)
    read = History.read(tmp_path)
    assert read == history
    read.truncate(2)
    assert read.train_loss == [(1, 0.7), (2, 0.6)] and read.evals == [(2, {"auc": 0.7, "ne": 0.9})]
    assert History.read(tmp_path / "nowhere") == History()


def test_latest_checkpoint_ignores_partial_saves(tmp_path: pathlib.Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    for name in ("step_3", "step_12", "step_9", "step_15.partial", "notes"):
        (tmp_path / "checkpoints" / name).mkdir(parents=True)
    found = latest_checkpoint(tmp_path)
    assert found == (12, tmp_path / "checkpoints" / "step_12")


def test_tables_and_model_from_the_dataset(tmp_path: pathlib.Path) -> None:
    """One table per feature, mean pooling for multi-hot features, DLRMTrain on meta tables."""
    from shardrec_embedding import PoolingType

    data = load_dataset("synthetic", num_embeddings=[5, 7], ids_per_bag=[0, 3], num_dense=2)
    configs = table_configs(data, 4)
    assert [(c.name, c.num_embeddings, c.feature_names) for c in configs] == [
        ("t_cat_0", 5, ["cat_0"]),
        ("t_cat_1", 7, ["cat_1"]),
    ]
    assert {c.pooling for c in configs} == {PoolingType.MEAN}
    opts = _opts(tmp_path, "--embedding-dim", "8", "--model", "dlrm_dcn")
    model = build_model(opts, data, torch.device("cpu"))
    tables = [n for n, p in model.named_parameters() if "embedding_bags" in n]
    assert tables and all(p.is_meta for n, p in model.named_parameters() if n in tables)


def test_choose_backend() -> None:
    assert choose_backend("auto", cuda_available=False) == "gloo"
    assert choose_backend("auto", cuda_available=True) == "nccl"
    assert choose_backend("gloo", cuda_available=True) == "gloo"


def _write_criteo_tsv(path: pathlib.Path, lines: int) -> None:
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        for _ in range(lines):
            dense = [str(rng.integers(0, 50)) if rng.random() > 0.2 else "" for _ in range(13)]
            cats = [f"{rng.integers(0, 6):08x}" if rng.random() > 0.1 else "" for _ in range(26)]
            f.write("\t".join([str(rng.integers(0, 2)), *dense, *cats]) + "\n")


def test_preprocess_criteo_then_validate(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`shardrec preprocess-criteo` writes what `--dataset criteo-npy` reads."""
    days = [tmp_path / "day_0.tsv", tmp_path / "day_1.tsv"]
    for day in days:
        _write_criteo_tsv(day, 64)
    out = tmp_path / "npy"
    argv = ["preprocess-criteo", *map(str, days), "--out-dir", str(out)]
    assert main([*argv, "--frequency-threshold", "2"]) == 0
    printed = capsys.readouterr().out
    assert "wrote 2 day(s)" in printed and "table sizes" in printed
    assert json.loads((out / "cardinalities.json").read_text())["frequency_threshold"] == 2
    data = load_dataset("criteo-npy", data_dir=out)
    assert len(data.sparse_features) == 26 and data.num_dense == 13
    assert data.num_samples("train") + data.num_samples("test") == 128

    import shardrec_train.cli as cli

    launched: list[object] = []
    monkeypatch.setattr(cli, "launch", lambda cmd, n, threads=None: launched.append(cmd) or 0)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    args = ["train", "--dataset", "criteo-npy", "--data-dir", str(out), "--batch-size", "8"]
    assert main([*args, "--out", str(tmp_path / "run")]) == 0
    assert len(launched) == 1


def test_preprocess_missing_file_is_one_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "day_9.tsv"
    assert main(["preprocess-criteo", str(missing), "--out-dir", str(tmp_path / "o")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and str(missing) in lines[0] and "does not exist" in lines[0]
    with pytest.raises(SystemExit) as done:
        main(["preprocess-criteo", "--help"])
    assert done.value.code == 0
    assert "--frequency-threshold" in capsys.readouterr().out


def test_host_memory_flag_sets_the_cpu_cap(tmp_path: pathlib.Path) -> None:
    """--host-memory-gib 3 on 2 ranks: the plan's per-rank cap comes from 1.5 GiB (less the
    planner's reserve), and the report says so; without it, this machine's memory."""
    from shardrec_planner import detect_host
    from shardrec_train.build import make_plan, make_sharder

    data = load_dataset("synthetic", num_embeddings=[50, 70], num_dense=2)

    def plan_for(*extra: str) -> tuple[int, str]:
        opts = _opts(tmp_path, "--embedding-dim", "8", "--sharding-type", "table_wise", *extra)
        model = build_model(opts, data, torch.device("cpu"))
        plan = make_plan(
            opts,
            model,
            make_sharder(opts),
            world_size=2,
            local_world_size=2,
            device=torch.device("cpu"),
            pg=None,
        )
        assert plan.stats is not None
        return plan.stats.ranks[0].memory_cap_bytes, plan.report()

    cap, report = plan_for("--host-memory-gib", "3")
    assert 0.5 * 1024**3 < cap <= 1.5 * 1024**3
    assert "host memory 3.0 GiB (--host-memory-gib" in report
    cap, report = plan_for()
    assert cap <= detect_host().memory_bytes // 2 and "(detected;" in report


@pytest.mark.parametrize("multi_node", [False, True])
def test_launch_turns_off_the_shared_agent_store_only_for_several_nodes(
    monkeypatch: pytest.MonkeyPatch, multi_node: bool
) -> None:
    """With several nodes, torchrun's shared agent store left a replacement node waiting for
    an address (docs/multi-node.md); one node keeps it (the watchdog can then name rank 0)."""
    from shardrec_train import launch as launch_module

    seen: list[dict[str, str]] = []

    def fake_run(cmd: list[str], env: dict[str, str], check: bool) -> object:
        seen.append(env)
        return types.SimpleNamespace(returncode=0)

    monkeypatch.delenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", raising=False)
    monkeypatch.setattr(subprocess, "run", fake_run)
    cmd = ["python", "-m", "torch.distributed.run"]
    cmd += ["--nnodes", "2"] if multi_node else ["--standalone"]
    assert launch_module.launch(cmd, 2) == 0
    assert ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE" in seen[0]) == multi_node


@pytest.mark.parametrize(
    ("environ", "nproc", "threads", "cores", "expected"),
    [
        ({}, 2, None, 2, "1"),  # this machine: 2 cores, 2 ranks -> 1 thread each
        ({}, 2, None, 16, "8"),
        ({}, 4, None, 2, "1"),  # fewer cores than ranks: still 1
        ({}, 1, None, 2, "2"),
        ({"OMP_NUM_THREADS": "3"}, 2, None, 2, "3"),  # the user's setting wins
        ({"OMP_NUM_THREADS": "3"}, 2, 2, 2, "2"),  # --threads wins over it
        ({"OMP_NUM_THREADS": ""}, 2, None, 8, "4"),  # empty: unset
    ],
)
def test_intra_op_threads_share_the_cores_between_local_ranks(
    environ: dict[str, str], nproc: int, threads: int | None, cores: int, expected: str
) -> None:
    from shardrec_train.launch import intra_op_threads

    assert intra_op_threads(environ, nproc, threads, cores) == expected


def test_launch_sets_the_ranks_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher hands torchrun OMP_NUM_THREADS (torchrun's own default would be 1 with a
    warning); `--threads` overrides the environment."""
    from shardrec_train import launch as launch_module

    seen: list[dict[str, str]] = []

    def fake_run(cmd: list[str], env: dict[str, str], check: bool) -> object:
        seen.append(env)
        return types.SimpleNamespace(returncode=0)

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr(launch_module, "usable_cores", lambda: 6)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cmd = ["python", "-m", "torch.distributed.run", "--standalone"]
    assert launch_module.launch(cmd, 2) == 0
    monkeypatch.setenv("OMP_NUM_THREADS", "5")
    assert launch_module.launch(cmd, 2) == 0
    assert launch_module.launch(cmd, 2, threads=1) == 0
    assert [env["OMP_NUM_THREADS"] for env in seen] == ["3", "5", "1"]
    assert launch_module.usable_cores() >= 1
