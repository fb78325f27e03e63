"""The allocator setting applied at import: freed blocks are reused without page faults."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

_PROBE = """
import resource, torch, shardrec_sharding
from shardrec_sharding import _malloc
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    torch.ones(4 << 20)  # 16 MB, written, freed
before = faults()
for _ in range(10):
    torch.ones(4 << 20)
print(_malloc._applied, faults() - before)
"""


def _probe(env_value: str | None) -> tuple[str, int]:
    env = dict(os.environ)
    env.pop("SHARDREC_MALLOC_TUNING", None)
    if env_value is not None:
        env["SHARDREC_MALLOC_TUNING"] = env_value
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_reused_blocks_take_no_page_faults() -> None:
    applied, faults = _probe(None)
    assert applied == "True"
    # Ten fresh 16 MB blocks would take 10 x 4096 faults; reused ones take (nearly) none.
    assert faults < 500, faults


def test_opt_out_leaves_glibc_alone() -> None:
    applied, _ = _probe("0")
    assert applied == "False"
