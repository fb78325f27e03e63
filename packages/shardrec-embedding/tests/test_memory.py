"""2 MB pages for packed tables and their optimizer state (shardrec_embedding.memory): values
unchanged, the pages taken where the kernel allows, small / strided / non-CPU tensors and the
opt-out left alone."""

from __future__ import annotations

import platform

import pytest
import torch

from shardrec_embedding import EmbeddingBagConfig
from shardrec_embedding.fused import BatchedFusedEmbeddingBag
from shardrec_embedding.memory import huge_pages
from shardrec_optim import EmbOptimType, FusedOptimSpec


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
    g = torch.Generator().manual_seed(0)
    table = torch.rand(300_000, 64, generator=g)  # 76.8 MB, written before the advice
    before = table.clone()
    took = huge_pages(table)
    assert torch.equal(table, before)
    if _thp_mode() in ("always", "madvise") and took:
        assert _huge_kb(table.data_ptr() + table.nbytes // 2) >= 2048
    # too small (heap memory shared with other blocks), not contiguous, not on the CPU: refused
    assert not huge_pages(torch.zeros(1000, 64))
    assert not huge_pages(table.t())
    assert not huge_pages(torch.zeros(300_000, 64, device="meta"))


def test_huge_pages_opt_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDREC_MALLOC_TUNING", "0")
    assert not huge_pages(torch.zeros(300_000, 64))


@pytest.mark.skipif(platform.system() != "Linux", reason="Linux madvise")
def test_a_fused_lookup_puts_its_table_and_state_on_huge_pages() -> None:
    """300k x 64 rows (76.8 MB) and an elementwise Adagrad state of the same size: both on
    2 MB pages from the start, where the kernel gives them (THP `always` or `madvise`)."""
    cfg = EmbeddingBagConfig(
        name="t", num_embeddings=300_000, embedding_dim=64, feature_names=["f"]
    )
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ADAGRAD, learning_rate=0.1)
    lookup = BatchedFusedEmbeddingBag([cfg], spec)
    weight, [state] = lookup.packed_weight(), list(lookup.optimizer_state().values())
    assert weight.shape == state.shape == (300_000, 64)
    if _thp_mode() in ("always", "madvise"):
        for t in (weight, state):
            assert _huge_kb(t.data_ptr() + t.nbytes // 2) >= 2048
