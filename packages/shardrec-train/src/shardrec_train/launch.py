"""Re-launching the command under torchrun.

`shardrec train ...` outside torchrun checks its arguments, then runs

    python -m torch.distributed.run --standalone --nproc-per-node N -m shardrec_train train ...

(one node), or with the user's own `--nnodes / --node-rank / --rdzv-* / --master-*` flags in
place of `--standalone` (several nodes). Inside torchrun (`TORCHELASTIC_RUN_ID` or
`LOCAL_RANK` is set) the same command line trains instead of launching.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
from collections.abc import Mapping, Sequence

from shardrec_train.options import TORCHRUN_FLAGS


def inside_torchrun(environ: Mapping[str, str]) -> bool:
    """True in a process that torchrun (torch.distributed.run) started."""
    return "TORCHELASTIC_RUN_ID" in environ or "LOCAL_RANK" in environ


def torchrun_command(
    ns: argparse.Namespace, train_argv: Sequence[str], out: pathlib.Path
) -> list[str]:
    """The torchrun command line that re-runs `shardrec train` with `train_argv` on every rank.

    `--out` is appended resolved, so that every rank (and a restarted attempt) writes into the
    same directory even when the default `runs/<dataset>-<time>` was used.
    """
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(ns.nproc_per_node),
    ]
    multi_node = ns.nnodes > 1 or ns.rdzv_endpoint is not None or ns.master_addr is not None
    if not multi_node:
        cmd.append("--standalone")
    for dest in TORCHRUN_FLAGS:
        value = getattr(ns, dest)
        if value is None or (dest == "nnodes" and not multi_node):
            continue
        cmd += [f"--{dest.replace('_', '-')}", str(value)]
    cmd += ["-m", "shardrec_train", "train", *train_argv, "--out", str(out.resolve())]
    return cmd


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; `os.cpu_count()` where the
    platform has no affinity)."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return max(1, len(affinity(0)))
    return max(1, os.cpu_count() or 1)


def intra_op_threads(
    environ: Mapping[str, str], nproc_per_node: int, threads: int | None, cores: int
) -> str:
    """`OMP_NUM_THREADS` for the ranks: `--threads` if given, else the user's
    `OMP_NUM_THREADS`, else the cores shared out between the local ranks (at least 1).

    Measured on 2 cores with 2 ranks (docs/bench/train.md): 2 threads per rank made each step
    about 2x slower than 1, for TorchRec as for us; threads beyond a rank's share of the cores
    only wait for one another."""
    if threads is not None:
        return str(threads)
    return environ.get("OMP_NUM_THREADS") or str(max(1, cores // nproc_per_node))


def launch(cmd: Sequence[str], nproc_per_node: int, threads: int | None = None) -> int:
    """Run torchrun and return its exit status (torchrun forwards Ctrl-C to the ranks)."""
    env = dict(os.environ)
    # torchrun would set 1 and warn; share the cores between the local ranks instead.
    env["OMP_NUM_THREADS"] = intra_op_threads(env, nproc_per_node, threads, usable_cores())
    if "--standalone" not in cmd:
        # Several nodes: the ranks' store is then hosted by rank 0 for each attempt, not shared
        # by torchrun's agents across attempts. With the shared store, a node that rejoins
        # after its launcher was replaced waited for a MASTER_ADDR that the surviving rank-0
        # agent never republished (torch 2.13), and the restart hung until the rendezvous
        # timeout (docs/multi-node.md, restarts).
        env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    try:
        return subprocess.run(list(cmd), env=env, check=False).returncode
    except KeyboardInterrupt:
        return 130
