"""examples/torchrec_planner/*.py: TorchRec training scripts that configure the planner with
TorchRec's parts, run as real `torchrun --nproc-per-node 2` jobs on CPU (gloo), side by side.

Each must train (rank 0's mean loss finite and changed over the steps) with a plan made the way
it asked: the grid-search proposer rated proposals, the cache settings reached the plan, the
custom proposer was asked and heard back.
"""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys
from pathlib import Path

from shardrec_planner import ParameterSharding
from shardrec_testing import free_port

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "torchrec_planner"
SCRIPTS = ("heuristic_reservation_grid_search", "cache_params_constraints", "custom_proposer")


def _torchrun(name: str) -> subprocess.Popen[str]:
    command = [
        *(sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"),
        *("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}"),
        str(EXAMPLES / f"{name}.py"),
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _plan(log: str) -> dict[str, tuple[str, str, str]]:
    """table -> (sharding type, kernel, rest of the line) from rank 0's `plan` lines."""
    found = re.findall(r"^plan ebc\.(\w+) (\w+) (\w+) (.*)$", log, flags=re.M)
    return {table: (st, kernel, rest) for table, st, kernel, rest in found}


def _trained(log: str) -> None:
    match = re.search(r"^loss first (\S+) last (\S+)$", log, flags=re.M)
    assert match, log[-4000:]
    first, last = float(match[1]), float(match[2])
    assert math.isfinite(first) and math.isfinite(last)
    assert first != last


def test_planner_examples_train_with_the_asked_parts() -> None:
    procs = {name: _torchrun(name) for name in SCRIPTS}
    logs = {}
    for name, proc in procs.items():
        logs[name], _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name}:\n{logs[name][-4000:]}"
        _trained(logs[name])
        assert sorted(_plan(logs[name])) == ["t0", "t1", "t2", "t3"], logs[name][-4000:]

    grid = re.search(r"GridSearchProposer: (\d+) proposals, (\d+) placed", logs[SCRIPTS[0]])
    assert grid and int(grid[1]) > 1 and int(grid[2]) >= 1

    cached = _plan(logs[SCRIPTS[1]])
    assert cached["t3"][0] == "table_wise"
    if "cache_params" in {f.name for f in dataclasses.fields(ParameterSharding)}:
        # plans carry the tables' cache settings where ParameterSharding has TorchRec's field
        assert "CacheAlgorithm.LRU" in cached["t0"][2] and "load_factor=0.2" in cached["t0"][2]
        assert "CacheAlgorithm.LFU" in cached["t1"][2]
        assert cached["t2"][2].endswith("cache_params=None")

    custom = re.search(r"TableWiseProposer: (\d+) proposals, ratings \[(.*)\]", logs[SCRIPTS[2]])
    assert custom and int(custom[1]) == 1 and custom[2] not in ("", "None")
    assert {st for st, _, _ in _plan(logs[SCRIPTS[2]]).values()} == {"table_wise"}
