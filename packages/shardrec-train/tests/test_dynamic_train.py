"""`shardrec train --raw-ids`: dynamic tables on raw MovieLens ids and Criteo hex values, on
one rank and sharded over two (the sharded collection maps the ids), the hash-trick baseline,
the flags' checks, the counters (added over ranks) in the output, resume, and freed slots
reset in the sharded table and its fused optimizer state."""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from _train_helpers import AUC_LINE, SMALL_MODEL, checkpoint_tensors, run_shardrec, write_ml100k

from shardrec_data import Batch, SparseFeature
from shardrec_embedding import EmbeddingBagConfig
from shardrec_embedding.dynamic import AdmissionPolicy, EvictionPolicy, UnknownIdPolicy, mix64
from shardrec_jagged import KeyedJaggedTensor
from shardrec_train import options as train_options
from shardrec_train.dynamic import HashTrick, dynamic_table_configs, problems, progress_text
from shardrec_train.options import TrainOptions, add_train_arguments, options_from_namespace


def _opts(*flags: str) -> TrainOptions:
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    return options_from_namespace(parser.parse_args(["--dataset", "movielens-100k", *flags]))


def test_policy_names_match_the_module() -> None:
    assert tuple(e.value for e in EvictionPolicy) == train_options.EVICTION_POLICIES
    assert tuple(e.value for e in AdmissionPolicy) == train_options.ADMISSION_POLICIES
    assert tuple(e.value for e in UnknownIdPolicy) == train_options.UNKNOWN_ID_POLICIES


def test_raw_id_features_get_dynamic_tables() -> None:
    features = [SparseFeature("user", 10, raw_ids=True), SparseFeature("genre", 5)]
    configs = [
        EmbeddingBagConfig(
            name=f"t_{f.name}",
            num_embeddings=f.num_embeddings,
            embedding_dim=4,
            feature_names=[f.name],
        )
        for f in features
    ]
    opts = _opts(
        "--raw-ids",
        "--dynamic-eviction",
        "LFU",
        "--dynamic-admission",
        "THRESHOLD",
        "--dynamic-admission-threshold",
        "3",
    )
    model, raw = dynamic_table_configs(configs, features, opts)
    assert [c.num_embeddings for c in model] == [13, 5]  # 1.25 x 10 slots
    assert model[1].dynamic is None and raw == model[:1]
    [d] = raw
    assert d.name == "t_user" and d.num_embeddings == 13 and d.dynamic is not None
    assert d.dynamic.eviction is EvictionPolicy.LFU
    assert d.dynamic.admission is AdmissionPolicy.THRESHOLD and d.dynamic.admission_threshold == 3
    sized = dynamic_table_configs(configs, features, _opts("--dynamic-capacity", "7"))[1]
    assert sized[0].num_embeddings == 7
    hashed, raw = dynamic_table_configs(configs, features, _opts("--raw-id-tables", "hash"))
    assert [c.num_embeddings for c in hashed] == [13, 5] and raw == hashed[:1]
    assert all(c.dynamic is None for c in hashed)  # ordinary tables the hash trick indexes


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--dynamic-eviction", "TTL"], "needs --dynamic-ttl-steps"),
        (["--dynamic-ttl-steps", "4"], "is for --dynamic-eviction TTL"),
        (["--dynamic-admission-probability", "1.5"], r"must be in \(0, 1\]"),
    ],
)
def test_flag_problems(flags: list[str], message: str) -> None:
    found = problems(_opts(*flags))
    assert len(found) == 1 and re.search(message, found[0]), found


def test_raw_ids_need_a_dataset_with_raw_ids() -> None:
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    args = ["--dataset", "synthetic", "--raw-ids", "--nproc-per-node", "1"]
    found = problems(options_from_namespace(parser.parse_args(args)))
    assert found == [
        "--raw-ids: dataset synthetic has no raw ids; datasets with raw ids: movielens-100k, "
        "criteo-tsv"
    ]


def test_hash_trick_maps_ids_modulo_rows() -> None:
    configs = [
        EmbeddingBagConfig(name="t_u", num_embeddings=7, embedding_dim=4, feature_names=["u"])
    ]
    values = torch.tensor([5, -(2**63), 2**62, 3, 3])
    kjt = KeyedJaggedTensor(keys=["s", "u"], values=values, lengths=torch.tensor([1, 1, 2, 1]))
    batch = Batch(dense_features=torch.zeros(2, 1), sparse_features=kjt, labels=torch.zeros(2))
    out = HashTrick(configs).batch(batch, training=True).sparse_features
    assert out.values()[:2].tolist() == [5, -(2**63)]  # "s" is not a hashed feature
    want = torch.remainder(mix64(values[2:]), 7)
    assert torch.equal(out.values()[2:], want) and bool((want >= 0).all())
    assert torch.equal(out.lengths(), kjt.lengths())


def test_progress_text() -> None:
    stats = {
        "t_user": {
            "capacity": 10,
            "occupancy": 4,
            "admissions": 6,
            "rejections": 1,
            "evictions": 2,
            "unknown_reads": 3,
            "steps": 5,
        }
    }
    assert progress_text(stats) == "user 4/10 adm 6 rej 1 ev 2 unk 3"


def _args(
    data: pathlib.Path, out: pathlib.Path, *extra: str, ranks: int = 1, batch: int = 32
) -> list[str]:
    return [
        "train",
        "--dataset",
        "movielens-100k",
        "--data-dir",
        str(data),
        "--raw-ids",
        "--nproc-per-node",
        str(ranks),
        *SMALL_MODEL,
        "--batch-size",
        str(batch),
        "--epochs",
        "2",
        "--eval-every",
        "5",
        "--out",
        str(out),
        *extra,
    ]


def test_raw_movielens_run_with_evicting_dynamic_tables(tmp_path: pathlib.Path) -> None:
    data = write_ml100k(tmp_path / "ml-100k")  # 30 users, 40 items: 12 slots evict
    out = tmp_path / "run"
    result = run_shardrec(_args(data, out, "--dynamic-capacity", "12", "--checkpoint-every", "10"))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    stats = summary["dynamic_tables"]
    assert sorted(stats) == ["t_item", "t_user"]
    for s in stats.values():
        assert s["capacity"] == 12 and s["occupancy"] == 12
        assert s["evictions"] > 0 and s["admissions"] == s["occupancy"] + s["evictions"]
        assert s["unknown_reads"] > 0  # evaluation reads ids evicted or never seen
        assert s["steps"] == summary["steps"] == 30  # 480 train samples / 32, 2 epochs
    assert 0.0 <= summary["test_auc"] <= 1.0
    assert "dynamic tables: user 12/12" in result.stdout
    assert "| user 12/12" in result.stdout  # the evaluation lines
    # The id maps are in the checkpoint (resume continues them).
    saved = checkpoint_tensors(out / "checkpoints" / "step_30", tmp_path)
    [key] = [k for k in saved if k.endswith("dynamic_tables.tables.t_user.occupied")]
    assert int(saved[key].sum()) == 12


def test_raw_movielens_resume_and_hash_trick(tmp_path: pathlib.Path) -> None:
    data = write_ml100k(tmp_path / "ml-100k")
    out = tmp_path / "run"
    first = run_shardrec(_args(data, out, "--max-steps", "10", "--checkpoint-every", "5"))
    assert first.returncode == 0, first.stderr[-3000:]
    before = json.loads((out / "summary.json").read_text())["dynamic_tables"]
    again = run_shardrec([*_args(data, out, "--checkpoint-every", "5"), "--resume"])
    assert again.returncode == 0, again.stderr[-3000:]
    after = json.loads((out / "summary.json").read_text())["dynamic_tables"]
    for name, s in after.items():  # the counters continued from the checkpoint
        assert s["steps"] == 30 and s["admissions"] >= before[name]["admissions"] > 0
    hashed = run_shardrec(_args(data, tmp_path / "hash", "--raw-id-tables", "hash"))
    assert hashed.returncode == 0, hashed.stderr[-3000:]
    summary = json.loads((tmp_path / "hash" / "summary.json").read_text())
    assert "dynamic_tables" not in summary and 0.0 <= summary["test_auc"] <= 1.0


def test_freed_slots_reset_in_sharded_table_and_optimizer(tmp_path: pathlib.Path) -> None:
    data = write_ml100k(tmp_path / "ml-100k")
    code = textwrap.dedent(f"""
        import argparse, os, torch, torch.distributed as dist
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="0")
        dist.init_process_group("gloo", rank=0, world_size=1,
                                store=dist.HashStore())
        from shardrec_train.options import add_train_arguments, options_from_namespace
        from shardrec_train.data import build_dataset
        from shardrec_train.build import build
        p = argparse.ArgumentParser(); add_train_arguments(p)
        opts = options_from_namespace(p.parse_args([
            "--dataset", "movielens-100k", "--data-dir", {str(data)!r}, "--raw-ids",
            "--nproc-per-node", "1", "--embedding-dim", "8", "--dense-arch", "16,8",
            "--over-arch", "16,1", "--batch-size", "32"]))
        ds = build_dataset(opts)
        b = build(opts, ds, device=torch.device("cpu"), world_size=1, local_world_size=1,
                  pg=dist.group.WORLD)
        assert b.remap is None  # the sharded collection maps the raw ids itself
        batches = ds.batches("train", 32)
        for _ in range(3):
            batch = next(batches)
            b.optimizer.zero_grad()
            loss, _ = b.model(batch)
            loss.backward()
            b.optimizer.step()
        [weight] = [p for n, p in b.model.named_parameters()
                    if n.endswith("embedding_bags.t_user.weight")]
        [state] = [v for k, v in b.model.fused_optimizer.state[weight].items()]
        [table] = [m.table("t_user") for m in b.model.modules()
                   if type(m).__name__.endswith("DynamicTables")]
        ids, slots = table.items()
        assert ids.numel() > 0 and bool((state[slots] != 0).any()), "trained rows have state"
        freed = slots[:3]
        before = weight.detach().clone()
        table.evict(freed)
        others = torch.ones(weight.shape[0], dtype=torch.bool)
        others[freed] = False
        assert torch.equal(weight.detach()[others], before[others])
        assert not torch.equal(weight.detach()[freed], before[freed]), "rows re-initialized"
        assert bool((state[freed] == 0).all()), "optimizer state reset"
        # the model reads the new rows: a batch of the freed ids' slots sees them
        print("ok")
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")


def _losses(out: pathlib.Path) -> list[tuple[int, float]]:
    history = json.loads((out / "history.json").read_text())
    return [(int(step), float(loss)) for step, loss in history["train_loss"]]


@pytest.mark.parametrize("plan", [[], ["--sharding-type", "row_wise"]], ids=["planner", "row_wise"])
def test_two_rank_raw_movielens_matches_one_rank_counters_and_resumes(
    tmp_path: pathlib.Path, plan: list[str]
) -> None:
    """Two ranks of 16 read, over an epoch, the samples one rank of 32 reads (in another
    order): with room for every id (no eviction) the tables admit the same ids, and the
    final evaluation reads the same unknown ids, so the counters added over the ranks equal
    the one rank's. Resuming the
    sharded run from its step-10 checkpoint gives the straight run's losses and counters."""
    data = write_ml100k(tmp_path / "ml-100k")  # 30 users, 40 items: 64 slots never evict
    room = ["--dynamic-capacity", "64", "--checkpoint-every", "10", "--eval-every", "0", *plan]
    two = tmp_path / "two"
    result = run_shardrec(_args(data, two, *room, ranks=2, batch=16))
    assert result.returncode == 0, result.stderr[-3000:]
    one = tmp_path / "one"
    single = run_shardrec(_args(data, one, *room))
    assert single.returncode == 0, single.stderr[-3000:]
    summary = json.loads((two / "summary.json").read_text())
    stats = summary["dynamic_tables"]
    assert stats == json.loads((one / "summary.json").read_text())["dynamic_tables"]
    for s in stats.values():
        assert s["capacity"] == 64 and s["occupancy"] == s["admissions"] > 0
        assert s["evictions"] == 0 and s["rejections"] == 0 and s["steps"] == 30
    assert stats["t_user"]["occupancy"] <= 30 and stats["t_item"]["occupancy"] <= 40
    # Printed once (rank 0), with the totals.
    user = stats["t_user"]
    line = f"dynamic tables: user {user['occupancy']}/64 adm {user['admissions']} rej 0 ev 0"
    assert result.stdout.count(line) == 1, result.stdout[-3000:]
    assert len(AUC_LINE.findall(result.stdout)) == 1
    if plan:
        assert '"row_wise"' in (two / "plan.json").read_text()
    # Resume: 10 steps, then --resume to the end, equals the straight run.
    part = tmp_path / "part"
    first = run_shardrec(_args(data, part, *room, "--max-steps", "10", ranks=2, batch=16))
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_shardrec([*_args(data, part, *room, ranks=2, batch=16), "--resume"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from" in again.stdout
    assert json.loads((part / "summary.json").read_text())["dynamic_tables"] == stats
    assert _losses(part) == _losses(two)


def test_two_rank_checkpoint_resumes_on_one_rank(tmp_path: pathlib.Path) -> None:
    """A row_wise 2-rank run's id maps reload into 1 rank (re-partitioned by the routing
    hash: docs/dynamic.md, Checkpoints): every id saved keeps its slot's row and the run
    continues."""
    data = write_ml100k(tmp_path / "ml-100k")
    out = tmp_path / "run"
    room = ["--dynamic-capacity", "64", "--checkpoint-every", "5", "--eval-every", "0"]
    first = run_shardrec(
        _args(
            data, out, *room, "--sharding-type", "row_wise", "--max-steps", "10", ranks=2, batch=16
        )
    )
    assert first.returncode == 0, first.stderr[-3000:]
    saved = json.loads((out / "summary.json").read_text())["dynamic_tables"]
    again = run_shardrec([*_args(data, out, *room), "--resume"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resumed from" in again.stdout and "step_10 at step 10" in again.stdout
    after = json.loads((out / "summary.json").read_text())["dynamic_tables"]
    for name, s in after.items():
        assert s["occupancy"] >= saved[name]["occupancy"] > 0 and s["evictions"] == 0
        assert s["steps"] == 30


def _criteo_day(path: pathlib.Path, rng: random.Random, n: int) -> None:
    hexes = [rng.getrandbits(32) for _ in range(12)]
    lines = []
    for _ in range(n):
        dense = [str(rng.randint(0, 50)) for _ in range(13)]
        cats = [f"{rng.choice(hexes):08x}" for _ in range(26)]
        lines.append("\t".join([str(rng.randint(0, 1)), *dense, *cats]))
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("ranks", [1, 2])
def test_raw_criteo_tsv_run(tmp_path: pathlib.Path, ranks: int) -> None:
    rng = random.Random(0)
    data = tmp_path / "criteo"
    data.mkdir()
    for day in range(2):
        _criteo_day(data / f"day_{day}.tsv", rng, 160)
    out = tmp_path / "run"
    args = [
        "train", "--dataset", "criteo-tsv", "--data-dir", str(data), "--raw-ids",
        "--nproc-per-node", str(ranks), *SMALL_MODEL, "--batch-size", str(32 // ranks),
        "--eval-every", "0",
        "--dynamic-capacity", "64", "--out", str(out),
    ]  # fmt: skip
    result = run_shardrec(args)
    assert result.returncode == 0, result.stderr[-3000:]
    stats = json.loads((out / "summary.json").read_text())["dynamic_tables"]
    assert sorted(stats) == sorted(f"t_cat_{i}" for i in range(26))
    for s in stats.values():  # 12 raw hex values per feature, all admitted, none evicted
        assert s["capacity"] == 64 and s["occupancy"] == s["admissions"] == 12
        assert s["evictions"] == 0 and s["rejections"] == 0
