"""`shardrec.sparse.jagged_tensor` (TorchRec's path) loads fbgemm_gpu as TorchRec's import does;
`import shardrec` alone does not."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

_PROBE = """
import sys
import torch
import shardrec
before = "fbgemm_gpu" in sys.modules
import shardrec.sparse.jagged_tensor
print(before, hasattr(torch.ops.fbgemm, "kt_regroup_arguments"))
"""


@pytest.mark.skipif(importlib.util.find_spec("fbgemm_gpu") is None, reason="needs fbgemm_gpu")
def test_torchrec_path_registers_fbgemm_ops() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split()[-2:] == ["False", "True"], out.stdout + out.stderr
