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
