"""Running the real `shardrec train` command (and torchrun under it) from integration tests:
start it in its own session, find its rank processes, and always kill the whole tree."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable

# A tiny synthetic model: 4 tables of 64 rows, 2 dense features, batches of 32 per rank.
TINY = [
    *("--dataset", "synthetic", "--embedding-dim", "8", "--batch-size", "32"),
    *("--dense-arch", "16,8", "--over-arch", "16,1"),
    *(f"--dataset-option={kv}" for kv in ("num_embeddings=64", "num_sparse=4", "num_dense=2")),
    "--dataset-option=num_test_samples=128",
]


def start_train(args: list[str], log: pathlib.Path) -> subprocess.Popen[bytes]:
    """`python -m shardrec_train train <args>` in a new session (so that the launcher,
    torchrun and every rank can be killed together), output into `log`."""
    env = dict(os.environ)
    for key in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_PORT"):
        env.pop(key, None)
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "shardrec_train", "train", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _descendants(root: int) -> list[int]:
    """`root` and every process below it (torchrun starts each rank in a session of its own,
    so the launcher's process group does not reach the ranks)."""
    children: dict[int, list[int]] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL `proc` (the launcher), its torchrun agent and every rank below it, and reap
    `proc`: what a machine that dies does to them."""
    for pid in _descendants(proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


def rank_pids(marker: str) -> dict[int, int]:
    """`{pid: global rank}` of the live rank processes (started by torchrun) whose command line
    contains `marker` (the run's unique --out)."""
    found: dict[int, int] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() not in cmdline or state == "Z":
            continue
        ranks = [int(v[5:]) for v in environ if v.startswith(b"RANK=")]
        if ranks and any(v.startswith(b"TORCHELASTIC_RUN_ID=") for v in environ):
            found[int(entry.name)] = ranks[0]
    return found


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(0.05)


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
