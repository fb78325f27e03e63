"""TorchRec's tutorials, read from ../shared/seeds/ at test time, run on shardrec (conformance).

The seeds are TorchRec's text (notebooks and tutorial pages as saved from the web); nothing of
them is kept in this repository. Each test turns one seed into a script and runs it in a fresh
interpreter, with the documented swaps (docs/tutorials.md) and nothing else:

- `import torchrec` becomes `import shardrec as torchrec`, `from torchrec.X import` becomes
  `from shardrec.X import`;
- `cuda` becomes `cpu` (devices, `.cuda()`, `torch.cuda.set_device`), `nccl` becomes `gloo`;
- the notebook's MASTER_PORT 29500 becomes a free port;
- shell cells (`!pip ...`, conda), Colab's `sys.path` cell and the prose are dropped; a bare
  expression (which a notebook displays) is printed when it is not None;
- the intro tutorial's text lost its indentation on the way to the seed: `_reindent` restores it
  from the Python grammar (a block opens after `:`, a method ends at the next `def`, a body ends
  at `return` or at the tutorial's `####` cell line) plus the two lines named in `DEDENT`;
- the concepts page shows its snippet without imports: `import torch` and
  `from torchrec import JaggedTensor, KeyedJaggedTensor` go first;
- the sharding notebook's `multiprocess` package is the standard library's multiprocessing (a
  stand-in module on PYTHONPATH), its forkserver context a fork, so the ranks need no re-import
  of the script; fbgemm's `EmbOptimType` comes from fbgemm-gpu-cpu when it imports, else from a
  stand-in holding fbgemm's member names and values.

Without ../shared these checks skip with one line saying so; CI has it.
"""

from __future__ import annotations

import ast
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"
if not SEEDS.is_dir():
    pytest.skip(
        f"{SEEDS} is missing: the seed tutorials live in ../shared", allow_module_level=True
    )

TIMEOUT_S = 300

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

# Lines of the intro seed that start at module level although the line before them is in a
# loop body (the seed lost the indentation that said so).
DEDENT = ("sharded_ebc_apply_opt = sharder.shard(",)

SHOW = "def _show(value):\n    if value is not None:\n        print(value)\n\n\n"


# ---------------------------------------------------------------- from seed text to cells


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


def _bracket_depth(line: str, depth: int) -> int:
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "", line.split(" #")[0])
    return depth + sum(text.count(c) for c in "([{") - sum(text.count(c) for c in ")]}")


def _reindent(lines: list[str]) -> str:
    """Python text whose indentation was lost, re-indented (see the module docstring)."""
    out: list[str] = []
    blocks: list[tuple[str, int]] = []  # (keyword, level of its body)
    level, depth, opened, returned = 0, 0, False, False
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if line.startswith("####"):
                blocks, level, opened, returned = [], 0, False, False
            continue
        if depth > 0:  # a continuation line inside brackets
            out.append("    " * (level + 1) + line)
            depth = _bracket_depth(line, depth)
            continue
        word = line.split()[0].rstrip(":")
        if opened:
            level += 1
        elif word == "def" and any(k == "class" for k, _ in blocks):
            while blocks and blocks[-1][0] != "class":
                blocks.pop()
            level = blocks[-1][1]
        elif returned or line.startswith(DEDENT):
            blocks, level = [], 0
        out.append("    " * level + line)
        depth = _bracket_depth(line, 0)
        opened = depth == 0 and line.endswith(":")
        if opened:
            blocks.append((word, level + 1))
        returned = word in ("return", "raise")
    return "\n".join(out) + "\n"


def _code_cells_intro(text: str) -> list[str]:
    """The sphinx-gallery source: after the module docstring, cells split at `####` lines."""
    lines = text.splitlines()
    first = lines.index('"""')
    body = lines[lines.index('"""', first + 1) + 1 :]
    cells, cell = [], []
    for line in body:
        if line.startswith("####") and cell:
            cells.append(_reindent(cell))
            cell = []
        cell.append(line)
    cells.append(_reindent(cell))
    return [c for c in cells if c.strip()]


def _code_cells_fenced(text: str) -> list[str]:
    """The ```py blocks of a markdown page that are Python (not tables, not shell)."""
    blocks = re.findall(r"^```py\n(.*?)^```", text, flags=re.S | re.M)
    return [b for b in blocks if _parses(b)]


def _code_cells_notebook(text: str) -> list[str]:
    """Each `In [n]:` cell's code: the longest part before its printed output that parses."""
    cells = []
    for chunk in re.split(r"^In \[[^\]]*\]:\n", text, flags=re.M)[1:]:
        paragraphs = chunk.split("\n\n")
        for n in range(len(paragraphs), 0, -1):
            code = "\n\n".join(paragraphs[:n])
            if _parses(code) and code.strip():
                break
        else:
            continue
        kept = [s for s in ast.parse(code).body if "sys.path" not in ast.unparse(s)]
        if kept:
            cells.append("\n".join(ast.get_source_segment(code, s) or "" for s in kept) + "\n")
    return cells


def _code_cells_page(text: str) -> list[str]:
    """A page with bare snippets: runs of consecutive lines that parse, comments included;
    a run that is one bare name is a prose heading."""
    cells, run = [], []
    for line in [*text.splitlines(), ""]:
        if line.strip() and _parses(line):
            run.append(line)
            continue
        code = "\n".join(run)
        if run and not (len(run) == 1 and isinstance(ast.parse(code).body[0].value, ast.Name)):  # type: ignore[attr-defined]
            cells.append(code + "\n")
        run = []
    return cells


# ---------------------------------------------------------------- the swaps


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return str(s.getsockname()[1])


def _swap(code: str) -> str:
    code = re.sub(r"^(\s*)import torchrec\s*$", r"\1import shardrec as torchrec", code, flags=re.M)
    code = re.sub(r"^(\s*)from torchrec([. ])", r"\1from shardrec\2", code, flags=re.M)
    code = re.sub(r"\bcuda\b", "cpu", code)
    code = code.replace("nccl", "gloo")
    return code.replace('"29500"', f'"{_free_port()}"')


def _show_values(cell: str) -> str:
    """A notebook shows the value of a bare expression: print it unless it is None."""
    tree = ast.parse(cell)
    lines = cell.splitlines()
    for node in reversed(tree.body):
        call = node.value if isinstance(node, ast.Expr) else None
        if call is None or (isinstance(call, ast.Call) and ast.unparse(call.func) == "print"):
            continue
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        expr = "\n".join(lines[first : last + 1]).strip()
        lines[first : last + 1] = [f"_show({expr})"]
    return "\n".join(lines) + "\n"


def script(seed: str, cells: list[str], prelude: str = "") -> str:
    """The seed's cells as one script, swapped; the prelude first."""
    return SHOW + prelude + "\n".join(_swap(_show_values(c)) for c in cells)


# ---------------------------------------------------------------- running


def fbgemm_imports() -> bool:
    probe = [sys.executable, "-c", "import fbgemm_gpu.split_embedding_configs"]
    return subprocess.run(probe, capture_output=True, check=False, timeout=120).returncode == 0


def stand_ins(root: Path) -> Path:
    """`multiprocess` (the standard library's, forkserver as fork) and, without fbgemm, a
    `fbgemm_gpu` holding only `split_embedding_configs.EmbOptimType`."""
    path = root / "stand_ins"
    path.mkdir()
    (path / "multiprocess.py").write_text(
        '"""Stand-in for the multiprocess package: the standard library\'s."""\n'
        "import multiprocessing\n\n\n"
        "def get_context(method=None):\n"
        '    return multiprocessing.get_context("fork" if method == "forkserver" else method)\n'
    )
    if not fbgemm_imports():
        pkg = path / "fbgemm_gpu"
        pkg.mkdir()
        (pkg / "__init__.py").write_text('"""Stand-in for fbgemm_gpu: its optimizer enum."""\n')
        members = "".join(f"    {k} = {v!r}\n" for k, v in FBGEMM_EMB_OPTIM_TYPES.items())
        (pkg / "split_embedding_configs.py").write_text(
            f"import enum\n\n\nclass EmbOptimType(enum.Enum):\n{members}"
        )
    return path


def run_seed(tmp_path: Path, name: str, text: str) -> str:
    """Run the script; its stdout (stderr in the failure message)."""
    path = tmp_path / name
    path.write_text(text)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(stand_ins(tmp_path))] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    result = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, f"{name} failed:\n{result.stderr[-4000:]}"
    return result.stdout


def blocks(out: str, header: str) -> list[str]:
    """Each printed multi-line repr that starts with `header` and ends at its closing `}`."""
    return re.findall(re.escape(header) + r".*?\n}", out, flags=re.S)


def _seed(name: str) -> str:
    return (SEEDS / name).read_text(encoding="utf-8")


# ---------------------------------------------------------------- the tutorials


def test_intro_tutorial(tmp_path: Path) -> None:
    """Introduction to TorchRec, up to its Inference section (the seed stops at QuantConfig),
    with fbgemm's `EmbOptimType` from the stand-in unless fbgemm imports."""
    check_intro(tmp_path)


@pytest.mark.fbgemm
def test_intro_tutorial_with_fbgemm(tmp_path: Path) -> None:
    """The same with fbgemm-gpu-cpu's own enum (nox -s fbgemm)."""
    if not fbgemm_imports():
        pytest.skip("fbgemm_gpu does not import (install fbgemm-gpu-cpu==1.8.0)")
    check_intro(tmp_path)


def check_intro(tmp_path: Path) -> None:
    cells = _code_cells_intro(_seed("torchrec_intro_tutorial.txt"))
    out = run_seed(tmp_path, "intro.py", script("intro", cells))
    # The JaggedTensor and KeyedJaggedTensor values the tutorial builds.
    assert "Offsets:  tensor([0, 1, 3])" in out
    assert "List of Values:  [tensor([5]), tensor([7, 1])]" in out
    assert "Keys:  ['product', 'user']" in out
    assert "Lengths:  tensor([3, 1, 2, 2])" in out
    assert "Values:  tensor([1, 2, 1, 5, 2, 3, 4, 1])" in out
    # The plan places both tables, whole, on the one rank.
    plan = out.split("Sharding Plan generated: ", 1)[1]
    for table in ("product_table", "user_table"):
        assert re.search(
            table + r"\s+table_wise\s+fused\s+\[0\]\s+\(0,0\)\+4096x64@rank:0/cpu", plan
        )
    assert out.count("product torch.Size([2, 64])") == 2  # unsharded and sharded to_dict()
    # The tutorial's LazyAwaitable subclass.
    assert "tensor([[1., 1.],\n        [1., 1.],\n        [1., 1.]])" in out
    # fbgemm's EmbOptimType through fused_params, torch's in-backward SGD.
    assert "FusedEmbeddingOptimizer(EXACT_ROWWISE_ADAGRAD, lr=0.02" in out
    assert "FusedEmbeddingOptimizer(EXACT_SGD, lr=0.5" in out
    assert "Non Fused Model Parameters:\ndict_keys([])" in out
    first = float(re.search(r"First Iteration Loss: (\S+)", out).group(1))  # type: ignore[union-attr]
    second = float(re.search(r"Second Iteration Loss: (\S+)", out).group(1))  # type: ignore[union-attr]
    assert second < first, (first, second)


def test_intro_zh_tutorial(tmp_path: Path) -> None:
    cells = _code_cells_fenced(_seed("torchrec_intro_zh.txt"))
    out = run_seed(tmp_path, "intro_zh.py", script("intro_zh", cells))
    assert "DistributedModelParallel(" in out
    for table in ("product_table", "user_table"):
        assert re.search(
            table + r"\s+table_wise\s+fused\s+\[0\]\s+\(0,0\)\+4096x64@rank:0/cpu", out
        )
    # nn.EmbeddingBag over offsets [0, 2, 2]: the second bag is empty.
    assert "grad_fn=<EmbeddingBagBackward0>" in out
    # TorchRec's str() of a KeyedJaggedTensor, as the tutorial shows it.
    assert '"product": [[101, 202], [], [303]],\n    "user": [[404], [505], [606]]' in out


def test_concepts_page(tmp_path: Path) -> None:
    cells = _code_cells_page(_seed("torchrec_concepts.txt"))
    prelude = "import torch\nfrom torchrec import JaggedTensor, KeyedJaggedTensor\n"
    out = run_seed(tmp_path, "concepts.py", script("concepts", cells, _swap(prelude)))
    # TorchRec's str() of a JaggedTensor, as the page shows it.
    assert [line for line in out.splitlines() if line] == [
        "JaggedTensor({",
        "    [[11.0, 12.0], [21.0, 22.0, 23.0]]",
        "})",
        "JaggedTensor({",
        "    [[101.0], [102.0, 201.0]]",
        "})",
    ]


TABLES = ["large_table_0", "large_table_1", "small_table_0", "small_table_1"]


def test_sharding_notebook(tmp_path: Path) -> None:
    cells = _code_cells_notebook(_seed("sharding_tutorial.txt"))
    out = run_seed(tmp_path, "sharding.py", script("sharding", cells))
    plans = re.split(r"(?=rank:\d,sharding plan: )", out)[1:]
    # Two ranks per simulation: table_wise, then row_wise, as the notebook runs them.
    assert len(plans) == 4, out
    for k, sharding_type in enumerate(["table_wise", "row_wise"]):
        pair = plans[2 * k : 2 * k + 2]
        assert sorted(p[:6] for p in pair) == ["rank:0", "rank:1"]
        assert pair[0].split("\n", 1)[1].strip() == pair[1].split("\n", 1)[1].strip()
        for table in TABLES:
            assert re.search(rf"^{table}\s+{sharding_type}\s+fused\s", pair[0], flags=re.M)
    table_wise, row_wise = plans[0], plans[2]
    # table_wise balances: one large and one small table per rank.
    assert "(0,0)+4096x64@rank:0/cpu" in table_wise and "(0,0)+4096x64@rank:1/cpu" in table_wise
    assert "(0,0)+1024x64@rank:0/cpu" in table_wise and "(0,0)+1024x64@rank:1/cpu" in table_wise
    # row_wise: blocks of ceil(rows / 2) on each rank.
    assert "(0,0)+2048x64@rank:0/cpu (2048,0)+2048x64@rank:1/cpu" in row_wise
    assert "(0,0)+512x64@rank:0/cpu (512,0)+512x64@rank:1/cpu" in row_wise
