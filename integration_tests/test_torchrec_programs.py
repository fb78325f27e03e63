"""examples/retrieval_two_tower.py and examples/train_then_evaluate.py: TorchRec programs of the
kinds users bring (a retrieval model gathered for serving, an evaluation loop after training
through the pipeline), run as `torchrun --nproc-per-node 2` jobs on CPU (gloo), side by side.

Each checks its own results against a reference and raises when they differ; here we check what
rank 0 prints, and that the output carries no warning of ours.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from shardrec_testing import free_port

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SCRIPTS = ("retrieval_two_tower", "train_then_evaluate")
# torch's own log line, printed when torch.fx is imported by a traced module; removed elsewhere.
TORCH_FX_LOG = "is_fx_tracing will return true"


def _torchrun(name: str) -> subprocess.Popen[str]:
    command = [
        *(sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"),
        *("--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}"),
        str(EXAMPLES / f"{name}.py"),
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _no_warnings(log: str) -> None:
    warnings = [line for line in log.splitlines() if "Warning" in line and TORCH_FX_LOG not in line]
    assert not warnings, "\n".join(warnings)


def test_torchrec_programs() -> None:
    procs = {name: _torchrun(name) for name in SCRIPTS}
    logs = {}
    for name, proc in procs.items():
        logs[name], _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name}:\n{logs[name][-4000:]}"
        _no_warnings(logs[name])

    retrieval = logs["retrieval_two_tower"]
    assert "plan two_tower.ebc.user_table row_wise ranks [0, 1]" in retrieval
    assert re.search(r"plan two_tower\.ebc\.item_table column_wise ranks \[\d", retrieval)
    first, last = map(float, re.findall(r"trained 20 steps: loss (\S+) -> (\S+)", retrieval)[0])
    assert last < first
    assert "gathered scores equal sharded scores: ok" in retrieval
    hit_rate = float(re.findall(r"top-3 hit rate over 8 queries: (\S+)", retrieval)[0])
    assert hit_rate >= 0.5, retrieval

    evaluation = logs["train_then_evaluate"]
    first, last = map(float, re.findall(r"trained 30 batches: loss (\S+) -> (\S+)", evaluation)[0])
    assert last < first
    assert "evaluated 8 batches per rank, weights unchanged: ok" in evaluation
    auc, reference = map(
        float, re.findall(r"eval AUC (\S+) \(pairwise formula (\S+)\)", evaluation)[0]
    )
    assert auc == reference and auc > 0.8, evaluation
