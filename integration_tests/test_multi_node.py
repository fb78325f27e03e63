"""Two machines, as two torchrun launchers on this one: `shardrec train --nnodes 2
--nproc-per-node 2` twice (node ranks 0 and 1), meeting at a c10d rendezvous on 127.0.0.1.

1. A full run with `--sharding-type table_row_wise`: the plan knows the two hosts (ranks 0-1
   and 2-3; each table's row blocks stay on one host, tables alternate between hosts), and the
   test metrics the four ranks computed equal one process's evaluation of the final
   checkpoint's weights with the unsharded model.
2. The same run with node 1's launcher (its torchrun agent and ranks) SIGKILLed after the
   first checkpoint, and started again as an operator would (with `--resume`): node 0's agent
   restarts its ranks (`--max-restarts 1`), the job resumes from the latest checkpoint and ends
   with the weights and optimizer state of run 1 within float rounding. (Not bit for bit, as
   two ranks are: with four, the resumed attempt's reductions sum in another order; measured
   differences are one or two float32 ulps, 2.4e-7 at most.)
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import time

import pytest
import torch
import torch.nn.functional as F
from _launch import TINY, kill_tree, start_train, wait_until
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from shardrec_data import load_dataset
from shardrec_embedding import EmbeddingBagCollection
from shardrec_models import DLRM, DLRMTrain
from shardrec_testing import free_port
from shardrec_train.build import table_configs

SAMPLES = 16384
STEPS = SAMPLES // (4 * 32)  # 128: one epoch of 4 ranks times 32
EVERY = 16
RUN_TIMEOUT_S = 150


def _node_args(out: pathlib.Path, port: int, node: int) -> list[str]:
    return [
        *TINY,
        f"--dataset-option=num_samples={SAMPLES}",
        *("--sharding-type", "table_row_wise", "--checkpoint-every", str(EVERY)),
        *("--nproc-per-node", "2", "--nnodes", "2", "--node-rank", str(node)),
        *("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"),
        *("--rdzv-id", out.name, "--max-restarts", "1", "--collective-timeout", "60"),
        *("--out", str(out)),
    ]


def _start_node(out: pathlib.Path, port: int, node: int, *extra: str) -> subprocess.Popen[bytes]:
    return start_train(
        [*_node_args(out, port, node), *extra], out.parent / f"{out.name}-{node}.log"
    )


def _start_first_node(out: pathlib.Path, port: int) -> subprocess.Popen[bytes]:
    """Node 0 first, until its agent listens: the c10d rendezvous store lives in the launcher
    that binds the endpoint, and it must be the node that is not killed."""
    proc = _start_node(out, port, 0)
    wait_until(lambda: proc.poll() is not None or _listening(port), 60, "node 0's rendezvous store")
    assert proc.poll() is None, (out.parent / f"{out.name}-0.log").read_text()[-3000:]
    return proc


def _listening(port: int) -> bool:
    needle = f":{port:04X} "
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in pathlib.Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if needle in f"{fields[1]} " and fields[3] == "0A":  # 0A: LISTEN
                return True
    return False


def _flat(checkpoint: pathlib.Path, tmp: pathlib.Path) -> dict[str, dict[str, object]]:
    """A DCP checkpoint read back without ranks (model and optimizer state)."""
    target = tmp / f"{checkpoint.parent.parent.name}-{checkpoint.name}.pt"
    dcp_to_torch_save(checkpoint, target)
    state = torch.load(target, weights_only=False)
    assert isinstance(state, dict)
    return state


def _tensors(node: object, prefix: str = "") -> dict[str, torch.Tensor]:
    if isinstance(node, torch.Tensor):
        return {prefix: node}
    out: dict[str, torch.Tensor] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            out.update(_tensors(value, f"{prefix}/{key}"))
    return out


def _auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Exact ROC AUC: the probability that a positive outscores a negative (ties count 1/2)."""
    pos, neg = scores[labels > 0.5], scores[labels <= 0.5]
    greater = (pos[:, None] > neg[None, :]).double().sum()
    ties = (pos[:, None] == neg[None, :]).double().sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """Run 1: both nodes to the end; returns its --out."""
    out = tmp_path_factory.mktemp("nodes") / "full"
    port = free_port()
    procs = [_start_first_node(out, port)]
    try:
        procs.append(_start_node(out, port, 1))
        for p in procs:
            p.wait(timeout=RUN_TIMEOUT_S)
    finally:
        for p in procs:
            kill_tree(p)
    for node, p in enumerate(procs):
        log = (out.parent / f"full-{node}.log").read_text(errors="replace")
        assert p.returncode == 0, log[-4000:]
    return out


def test_two_nodes_plan_by_host_and_match_one_process(
    full_run: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    plan = json.loads((full_run / "plan.json").read_text())["plan"]
    tables = plan["model.sparse_arch.embedding_bag_collection"]
    hosts = {0: [0, 1], 1: [2, 3]}
    for i in range(4):
        entry = tables[f"t_cat_{i}"]
        assert entry["sharding_type"] == "table_row_wise"
        assert entry["ranks"] == hosts[i % 2], entry
        assert [s["sizes"] for s in entry["shards"]] == [[32, 8], [32, 8]]

    summary = json.loads((full_run / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["world_size"] == 4
    state = _flat(full_run / "checkpoints" / f"step_{STEPS}", tmp_path)["model"]
    assert isinstance(state, dict)
    dataset = load_dataset(
        "synthetic",
        num_embeddings=64,
        num_sparse=4,
        num_dense=2,
        num_samples=SAMPLES,
        num_test_samples=128,
    )
    model = DLRMTrain(
        DLRM(
            embedding_bag_collection=EmbeddingBagCollection(table_configs(dataset, 8)),
            dense_in_features=2,
            dense_arch_layer_sizes=[16, 8],
            over_arch_layer_sizes=[16, 1],
        )
    )
    model.load_state_dict(state, strict=True)
    logits, labels = [], []
    with torch.no_grad():
        for batch in dataset.batches("test", 128, rank=0, world_size=1):
            _, (_, batch_logits, batch_labels) = model(batch)
            logits.append(batch_logits.float())
            labels.append(batch_labels.float())
    logit, label = torch.cat(logits), torch.cat(labels)
    assert len(label) == 128
    log_loss = float(F.binary_cross_entropy_with_logits(logit, label))
    assert summary["test_log_loss"] == pytest.approx(log_loss, rel=1e-5, abs=1e-6)
    assert summary["test_auc"] == pytest.approx(_auc(torch.sigmoid(logit), label), abs=1e-6)


def test_killed_node_comes_back_and_resumes(full_run: pathlib.Path, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "killed"
    port = free_port()
    procs = [_start_first_node(out, port)]
    try:
        procs.append(_start_node(out, port, 1))
        wait_until(
            lambda: (
                (out / "checkpoints" / f"step_{EVERY}").is_dir()
                or any(p.poll() is not None for p in procs)
            ),
            RUN_TIMEOUT_S,
            "the first checkpoint",
        )
        assert not (out / "checkpoints" / f"step_{STEPS}").exists(), "too fast to kill mid-run"
        kill_tree(procs[1])
        killed_at = time.monotonic()
        # The replacement node: the same command; --resume because --out now holds checkpoints.
        procs.append(_start_node(out, port, 1, "--resume"))
        for p in (procs[0], procs[2]):
            p.wait(timeout=RUN_TIMEOUT_S)
        recovered_s = time.monotonic() - killed_at
    finally:
        for p in procs:
            kill_tree(p)
    logs = [(out.parent / f"killed-{node}.log").read_text(errors="replace") for node in (0, 1)]
    assert procs[0].returncode == 0, logs[0][-4000:]
    assert procs[2].returncode == 0, logs[1][-4000:]
    resumed = re.findall(r"resumed from \S+/step_(\d+) at step (\d+)", "\n".join(logs))
    assert len(resumed) == 1, logs[0][-3000:]
    step = int(resumed[0][1])
    assert EVERY <= step < STEPS and step % EVERY == 0
    assert recovered_s < RUN_TIMEOUT_S

    want = _tensors(_flat(full_run / "checkpoints" / f"step_{STEPS}", tmp_path))
    got = _tensors(_flat(out / "checkpoints" / f"step_{STEPS}", tmp_path))
    assert sorted(got) == sorted(want)
    for key, value in want.items():
        torch.testing.assert_close(got[key], value, rtol=1e-5, atol=1e-6, msg=key)
