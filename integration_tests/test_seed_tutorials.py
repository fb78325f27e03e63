"""The seed tutorials (../shared/seeds/) run as examples/tutorial_*.py with `import shardrec as
torchrec`, CPU for CUDA and gloo for NCCL.

Each test runs its example as a subprocess and checks what it prints against what the tutorial
computes: the KJT/JaggedTensor values the tutorial builds, a plan that lists every table, the
sharded (and DMP) output equal to the unsharded one, the loss falling after a fused backward.

Every example runs verbatim: a tutorial line we cannot run is a failure, not a skip.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TIMEOUT_S = 240

# fbgemm's `EmbOptimType` members (fbgemm-gpu 1.8), for the stand-in package.
FBGEMM_EMB_OPTIM_TYPES = {
    "SGD": "sgd",
    "EXACT_SGD": "exact_sgd",
    "LAMB": "lamb",
    "ADAM": "adam",
    "EXACT_ADAGRAD": "exact_adagrad",
    "EXACT_ROWWISE_ADAGRAD": "exact_row_wise_adagrad",
    "LARS_SGD": "lars_sgd",
    "PARTIAL_ROWWISE_ADAM": "partial_row_wise_adam",
    "PARTIAL_ROWWISE_LAMB": "partial_row_wise_lamb",
    "ROWWISE_ADAGRAD": "row_wise_adagrad",
    "SHAMPOO": "shampoo",
    "SHAMPOO_V2": "shampoo_v2",
    "MADGRAD": "madgrad",
    "EXACT_ROWWISE_WEIGHTED_ADAGRAD": "exact_row_wise_weighted_adagrad",
    "ENSEMBLE_ROWWISE_ADAGRAD": "ensemble_row_wise_adagrad",
    "EMAINPLACE_ROWWISE_ADAGRAD": "ema_in_place_row_wise_adagrad",
    "NONE": "none",
}


def _run(script: Path, pythonpath: list[Path]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("MASTER_PORT", None)  # each example picks a free port
    env["PYTHONPATH"] = os.pathsep.join(
        [str(p) for p in pythonpath] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        env=env,
    )


def run_tutorial(name: str, pythonpath: list[Path] | None = None) -> str:
    """Run examples/`name` as it is; its stdout."""
    script = EXAMPLES / name
    result = _run(script, pythonpath or [])
    assert result.returncode == 0, f"{script} failed:\n{result.stderr[-4000:]}"
    return result.stdout


def blocks(out: str, header: str) -> list[str]:
    """Each printed multi-line repr that starts with `header` and ends at its closing `}`."""
    return re.findall(re.escape(header) + r".*?\n}", out, flags=re.S)


def fbgemm_imports() -> bool:
    probe = [sys.executable, "-c", "import fbgemm_gpu.split_embedding_configs"]
    return subprocess.run(probe, capture_output=True, check=False, timeout=120).returncode == 0


def stand_in_fbgemm(root: Path) -> Path:
    """A package named fbgemm_gpu holding only `split_embedding_configs.EmbOptimType`."""
    pkg = root / "stand_in" / "fbgemm_gpu"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""Stand-in for fbgemm_gpu: only its optimizer enum."""\n')
    members = "".join(f"    {k} = {v!r}\n" for k, v in FBGEMM_EMB_OPTIM_TYPES.items())
    (pkg / "split_embedding_configs.py").write_text(
        f"import enum\n\n\nclass EmbOptimType(enum.Enum):\n{members}"
    )
    return pkg.parent


def check_intro(out: str) -> None:
    # The JaggedTensor and KeyedJaggedTensor values the tutorial builds.
    assert "Offsets:  tensor([0, 1, 3])" in out
    assert "List of Values:  [tensor([5]), tensor([7, 1])]" in out
    assert "Keys:  ['product', 'user']" in out
    assert "Lengths:  tensor([3, 1, 2, 2])" in out
    assert "Values:  tensor([1, 2, 1, 5, 2, 3, 4, 1])" in out
    assert "'product': [[1, 2, 1], [5]]\n  'user': [[2, 3], [4, 1]]" in out
    # The plan places both tables, whole, on the one rank.
    plan = out.split("Sharding Plan generated: ", 1)[1]
    for table in ("product_table", "user_table"):
        assert re.search(
            table + r"\s+table_wise\s+fused\s+\[0\]\s+\(0,0\)\+4096x64@rank:0/cpu", plan
        )
    # Unsharded `ebc(kjt)` and DMP's `model(kjt).wait()` print the same KeyedTensor.
    pooled = blocks(out, "KeyedTensor(key_dim=1, shape=(2, 128))")
    assert len(pooled) == 2 and pooled[0] == pooled[1], pooled
    assert out.count("product torch.Size([2, 64])") == 2  # unsharded and sharded to_dict()
    assert "<class 'shardrec_jagged.keyed_tensor.KeyedTensor'>" in out
    # LazyAwaitable subclass from the tutorial.
    assert "tensor([[1., 1.],\n        [1., 1.],\n        [1., 1.]])" in out
    # fbgemm's EmbOptimType through fused_params, torch's in-backward SGD marker.
    assert "FusedEmbeddingOptimizer(EXACT_ROWWISE_ADAGRAD, lr=0.02" in out
    assert "FusedEmbeddingOptimizer(EXACT_SGD, lr=0.5" in out
    assert "Non Fused Model Parameters:\ndict_keys([])" in out
    first = float(re.search(r"First Iteration Loss: (\S+)", out).group(1))  # type: ignore[union-attr]
    second = float(re.search(r"Second Iteration Loss: (\S+)", out).group(1))  # type: ignore[union-attr]
    assert second < first, (first, second)


@pytest.mark.fbgemm
def test_intro_tutorial_with_fbgemm() -> None:
    if not fbgemm_imports():
        pytest.skip("fbgemm_gpu does not import (install fbgemm-gpu-cpu==1.8.0)")
    out = run_tutorial("tutorial_intro.py")
    check_intro(out)


def test_intro_tutorial_with_stand_in_fbgemm(tmp_path: Path) -> None:
    """Without fbgemm the tutorial's `from fbgemm_gpu.split_embedding_configs import
    EmbOptimType` finds a stand-in with fbgemm's member names and values."""
    out = run_tutorial("tutorial_intro.py", [stand_in_fbgemm(tmp_path)])
    check_intro(out)


def test_intro_zh_tutorial() -> None:
    out = run_tutorial("tutorial_intro_zh.py")
    assert "DistributedModelParallel(" in out
    for table in ("product_table", "user_table"):
        assert re.search(
            table + r"\s+table_wise\s+fused\s+\[0\]\s+\(0,0\)\+4096x64@rank:0/cpu", out
        )
    # nn.EmbeddingBag over offsets [0, 2, 2]: the second bag is empty, so its mean is 0.
    assert "grad_fn=<EmbeddingBagBackward0>" in out
    assert "KeyedJaggedTensor(stride=3, keys=2)" in out
    assert "'product': [[101, 202], [], [303]]\n  'user': [[404], [505], [606]]" in out
    assert "LazyAwaitable" in out


def test_concepts_tutorial() -> None:
    out = run_tutorial("tutorial_concepts.py")
    lines = out.splitlines()
    assert lines == [
        "JaggedTensor(values=[[11.0, 12.0], [21.0, 22.0, 23.0]])",
        "JaggedTensor(values=[[101.0], [102.0, 201.0]])",
    ]


SHARDING_TYPES = ["table_wise", "row_wise", "table_row_wise", "column_wise"]
TABLES = ["large_table_0", "large_table_1", "small_table_0", "small_table_1"]


def test_sharding_tutorial() -> None:
    out = run_tutorial("tutorial_sharding.py")
    plans = re.split(r"(?=rank:\d,sharding plan: )", out)[1:]
    # Two ranks per simulation, one simulation per sharding type, in the notebook's order.
    assert len(plans) == 2 * len(SHARDING_TYPES), out
    for k, sharding_type in enumerate(SHARDING_TYPES):
        pair = plans[2 * k : 2 * k + 2]
        assert sorted(p[:6] for p in pair) == ["rank:0", "rank:1"]
        assert pair[0].split("\n", 1)[1].strip() == pair[1].split("\n", 1)[1].strip()  # same plan
        for table in TABLES:
            assert re.search(rf"^{table}\s+{sharding_type}\s+fused\s", pair[0], flags=re.M), (
                sharding_type,
                table,
            )
    table_wise, row_wise = plans[0], plans[2]
    # table_wise balances: one large and one small table per rank.
    assert "(0,0)+4096x64@rank:0/cpu" in table_wise and "(0,0)+4096x64@rank:1/cpu" in table_wise
    assert "(0,0)+1024x64@rank:0/cpu" in table_wise and "(0,0)+1024x64@rank:1/cpu" in table_wise
    # row_wise: blocks of ceil(rows / 2) on each rank.
    assert "(0,0)+2048x64@rank:0/cpu (2048,0)+2048x64@rank:1/cpu" in row_wise
    assert "(0,0)+512x64@rank:0/cpu (512,0)+512x64@rank:1/cpu" in row_wise
