"""The allocator setting applied at import: freed blocks are reused without page faults."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest
import torch

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


def _huge_kb(address: int) -> int:
    """AnonHugePages (kB) of the mapping holding `address` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    return 0


def _thp_mode() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            text = f.read()
    except OSError:
        return "none"
    return text.split("[")[1].split("]")[0]


@pytest.mark.skipif(platform.system() != "Linux", reason="Linux madvise")
def test_huge_pages_keep_values_and_take_where_the_kernel_allows() -> None:
    from shardrec_sharding import _malloc

    g = torch.Generator().manual_seed(0)
    table = torch.rand(300_000, 64, generator=g)  # 76.8 MB, written before the advice
    before = table.clone()
    took = _malloc.huge_pages(table)
    assert torch.equal(table, before)
    if _thp_mode() in ("always", "madvise") and took:
        assert _huge_kb(table.data_ptr() + table.nbytes // 2) >= 2048
    # too small (heap memory shared with other blocks), not contiguous, not on the CPU: refused
    assert not _malloc.huge_pages(torch.zeros(1000, 64))
    assert not _malloc.huge_pages(table.t())
    assert not _malloc.huge_pages(torch.zeros(300_000, 64, device="meta"))


def test_huge_pages_opt_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from shardrec_sharding import _malloc

    monkeypatch.setenv("SHARDREC_MALLOC_TUNING", "0")
    assert not _malloc.huge_pages(torch.zeros(300_000, 64))
