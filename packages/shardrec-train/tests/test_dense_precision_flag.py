"""`shardrec train --dense-precision`: parsed, checked, and applied to the built model."""

from __future__ import annotations

import pathlib

import pytest
import torch
from _train_helpers import SYNTHETIC

from shardrec_data import load_dataset
from shardrec_models.dlrm import DENSE_PRECISIONS
from shardrec_train import build_parser, options_from_namespace
from shardrec_train.build import build_model
from shardrec_train.options import DENSE_PRECISIONS as FLAG_CHOICES


def test_flag_builds_a_bf16_dense_part(tmp_path: pathlib.Path) -> None:
    assert FLAG_CHOICES == DENSE_PRECISIONS  # spelled out in options.py (no torch import)
    data = load_dataset("synthetic", num_embeddings=[5, 7], ids_per_bag=[1, 3], num_dense=2)
    for extra, expected in (([], "fp32"), (["--dense-precision", "bf16"], "bf16")):
        ns = build_parser().parse_args(["train", *SYNTHETIC, "--out", str(tmp_path), *extra])
        opts = options_from_namespace(ns)
        assert opts.dense_precision == expected
        assert opts.to_dict()["dense_precision"] == expected  # recorded in summary.json
        assert build_model(opts, data, torch.device("cpu")).model.dense_precision == expected


def test_unknown_precision_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["train", *SYNTHETIC, "--dense-precision", "fp16"])
    assert exit_info.value.code == 2
    assert "--dense-precision: invalid choice: 'fp16'" in capsys.readouterr().err


def test_bf16_without_native_bfloat16_is_said_not_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shardrec_train import build as build_module

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.setattr(build_module, "cpu_has_native_bf16", lambda: False)
    note = build_module.dense_precision_note("bf16", cpu)
    assert note is not None and "without native bfloat16" in note and "emulated" in note
    assert build_module.dense_precision_note("fp32", cpu) is None
    assert build_module.dense_precision_note("bf16", cuda) is None
    monkeypatch.setattr(build_module, "cpu_has_native_bf16", lambda: True)
    assert build_module.dense_precision_note("bf16", cpu) is None
    # It runs anyway (emulated where the CPU lacks bfloat16): same model, a line for the user.
    monkeypatch.undo()
    assert isinstance(build_module.cpu_has_native_bf16(), bool)
