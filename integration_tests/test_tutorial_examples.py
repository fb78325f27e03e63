"""examples/tutorial_*.py, our own tutorials (docs/tutorials.md), run as a user runs them.

Each example checks its own results against a reference (the plain collection, torch.optim.SGD,
the unquantized model) and raises when they differ; these tests run each in a fresh interpreter
and check what it prints.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"{name} failed:\n{result.stderr[-4000:]}"
    assert "Warning" not in result.stderr, result.stderr  # none of ours, on any rank
    return result.stdout


def test_concepts_example() -> None:
    out = run_example("tutorial_concepts.py")
    assert "offsets from lengths: [0, 1, 1, 3]" in out
    assert "batch size: 3 features: ['movie', 'genre']" in out
    assert "pooled: {'movie': (3, 4), 'genre': (3, 2)}" in out
    assert "viewer 2's movie embedding is rows 3 + 9: ok" in out


def test_intro_example() -> None:
    out = run_example("tutorial_intro.py")
    for table, rows in (("user_table", 1000), ("item_table", 500)):
        assert re.search(rf"{table}\s+table_wise\s+fused\s+\[0\]\s+\(0,0\)\+{rows}x16@rank:0", out)
    assert "pooled features: ['user', 'item'] shape (4, 32)" in out
    assert "FusedEmbeddingOptimizer(EXACT_SGD, lr=0.1" in out
    assert "equal to torch.optim.SGD on the plain collection: ok" in out
    assert len(re.findall(r"^step \d: loss \d", out, flags=re.M)) == 3


def test_sharding_example() -> None:
    out = run_example("tutorial_sharding.py")
    for sharding_type in ("table_wise", "row_wise", "column_wise", "table_row_wise"):
        assert f"== {sharding_type}\n" in out
        for rank in (0, 1):
            assert f"rank {rank}: {sharding_type} output equals the plain collection's" in out
    row_wise = out.split("== row_wise\n", 1)[1].split("== column_wise", 1)[0]
    assert "(0,0)+1024x32@rank:0/cpu (1024,0)+1024x32@rank:1/cpu" in row_wise


def test_inference_example() -> None:
    out = run_example("tutorial_inference.py")
    assert "sparse.embedding_bags.video_table.weight: (2000, 32) torch.uint8" in out
    assert "sparse.embedding_bags.video_table.weight_qscaleshift: (2000, 4) torch.uint8" in out
    error, bound = map(float, re.findall(r"max error (\S+), bound (\S+)", out)[0])
    assert 0 < error <= bound
    assert re.search(r"video_table\s+row_wise", out) and re.search(
        r"channel_table\s+table_wise", out
    )
    assert "sharded equals unsharded: ok" in out
    assert "scripted equals eager: True" in out
    assert "exported equals eager: True" in out


def test_export_serving_example() -> None:
    out = run_example("export_serving.py")  # the serving process's stderr too
    assert len(re.findall(r"^step \d: loss \d", out, flags=re.M)) == 5
    assert "encapsulated: ['sparse']" in out
    assert "restored sparse: EmbeddingBagCollection" in out
    assert len(re.findall(r"^request \d: \d+ ids, equals the trained model: True$", out, re.M)) == 4
    assert "request 3: 0 ids, equals the trained model: True" in out
    assert "served from the exported artifact: ok" in out


def test_dynamic_sharded_example() -> None:
    """docs/dynamic.md's sharded raw-id tables: 2 ranks row_wise, then a reload on 1 rank."""
    out = run_example("dynamic_sharded.py")
    for rank in (0, 1):
        assert f"rank {rank} {{'user': 'row_wise', 'item': 'row_wise'}}" in out
    assert re.search(r"^1 rank: all \d+ user ids kept their vectors$", out, flags=re.M)


def test_raw_tier_interchange_example() -> None:
    """docs/tiered.md: a dynamic table in memory -> a raw-id tier -> memory, every id kept."""
    out = run_example("raw_tier_interchange.py")
    assert re.search(
        r"^(ssd|dram)_virtual_table: all \d+ ids in the store with their trained rows$",
        out,
        flags=re.M,
    )
    assert re.search(r"^back in memory: all \d+ ids kept their vectors$", out, flags=re.M)
