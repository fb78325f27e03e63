"""Test helpers around files: a sibling test module loaded by path, and a TorchScript artifact
run in a fresh Python that has never imported shardrec."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from collections.abc import Mapping
from pathlib import Path

import torch

from shardrec_testing._worker import _load_module

__all__ = ["assert_scripted_reloads_without_shardrec", "load_sibling_module"]


def load_sibling_module(test_file: str, name: str, prefix: str) -> types.ModuleType:
    """The test module `name.py` next to `test_file`, loaded once as `prefix + name`.

    Test folders are not packages, so one test file reuses another's helpers by path; the
    prefix keeps two packages' `test_x.py` apart in `sys.modules`.
    """
    return _load_module(f"{prefix}{name}", str(Path(test_file).parent / f"{name}.py"))


def assert_scripted_reloads_without_shardrec(
    scripted: torch.jit.ScriptModule,
    inputs: Mapping[str, object],
    expected: torch.Tensor | Mapping[str, torch.Tensor],
    tmp_path: Path,
) -> None:
    """Save `scripted` under `tmp_path`, load it in a fresh Python, and check there that no
    shardrec module was imported and that `scripted(types.SimpleNamespace(**inputs))` returns
    `expected` bit for bit (a tensor, or a dict with the same keys in the same order).

    `inputs` is what the model's forward reads from its argument, e.g.
    `shardrec_jagged.script_fields(kjt)`: the fresh process has no KJT class to unpickle.
    """
    model, io = tmp_path / "scripted.pt", tmp_path / "io.pt"
    torch.jit.save(scripted, str(model))
    torch.save({"inputs": dict(inputs), "expected": expected}, io)
    code = textwrap.dedent(f"""
        import sys, types, torch
        m = torch.jit.load({str(model)!r})
        io = torch.load({str(io)!r})
        assert not any(n.startswith("shardrec") for n in sys.modules), "imported shardrec"
        got, want = m(types.SimpleNamespace(**io["inputs"])), io["expected"]
        if isinstance(want, dict):
            assert list(got) == list(want), (list(got), list(want))
            assert all(torch.equal(got[k], v) for k, v in want.items())
        else:
            assert torch.equal(got, want)
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"
