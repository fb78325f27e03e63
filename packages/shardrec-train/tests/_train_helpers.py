"""Test helpers: a tiny raw ml-100k directory, and running the real `shardrec` command."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

# A small model: 8-dim embeddings, dense arch 16-8, over arch 16-1.
SMALL_MODEL = ["--embedding-dim", "8", "--dense-arch", "16,8", "--over-arch", "16,1"]

# Small synthetic shapes: 4 tables of 64 rows, 2 dense features, 8 batches of 32 per rank.
SYNTHETIC = [
    "--dataset",
    "synthetic",
    "--dataset-option",
    "num_embeddings=64",
    "--dataset-option",
    "num_sparse=4",
    "--dataset-option",
    "num_dense=2",
    "--dataset-option",
    "num_samples=512",
    "--dataset-option",
    "num_test_samples=128",
    *SMALL_MODEL,
    "--batch-size",
    "32",
]

GENRES = 19
AUC_LINE = re.compile(r"^test AUC (\d+\.\d+)$", re.MULTILINE)


def write_ml100k(
    folder: pathlib.Path, *, users: int = 30, items: int = 40, ratings: int = 600
) -> pathlib.Path:
    """A GroupLens-format ml-100k directory (u.data, u.item, u.user) with learnable ratings:
    users with an even id like even movies."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    occupations = ["engineer", "student", "writer", "other"]
    with open(folder / "u.user", "w", encoding="latin-1") as f:
        for u in range(1, users + 1):
            zip_code = "T8H1N" if u == 3 else f"{rng.integers(10000, 99999)}"
            gender = "M" if u % 2 else "F"
            f.write(f"{u}|{rng.integers(12, 70)}|{gender}|{occupations[u % 4]}|{zip_code}\n")
    with open(folder / "u.item", "w", encoding="latin-1") as f:
        for i in range(1, items + 1):
            flags = np.zeros(GENRES, dtype=int)
            flags[rng.choice(GENRES, size=int(rng.integers(1, 4)), replace=False)] = 1
            date = "" if i == 7 else f"01-Jan-{rng.integers(1950, 1998)}"
            f.write(
                f"{i}|Movie {i} (1990)|{date}||http://x/{i}|" + "|".join(map(str, flags)) + "\n"
            )
    with open(folder / "u.data", "w", encoding="latin-1") as f:
        for _ in range(ratings):
            u, i = int(rng.integers(1, users + 1)), int(rng.integers(1, items + 1))
            rating = 5 if (u + i) % 2 == 0 else int(rng.integers(1, 4))
            f.write(f"{u}\t{i}\t{rating}\t{881250949 + int(rng.integers(0, 10**6))}\n")
    return folder


def run_shardrec(args: list[str], *, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """`python -m shardrec_train <args>` as a user runs it; stdout and stderr captured."""
    env = dict(os.environ)
    for key in ("TORCHELASTIC_RUN_ID", "LOCAL_RANK", "RANK", "WORLD_SIZE"):
        env.pop(key, None)
    return subprocess.run(
        [sys.executable, "-m", "shardrec_train", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def checkpoint_tensors(checkpoint: pathlib.Path, tmp: pathlib.Path) -> dict[str, torch.Tensor]:
    """Every tensor of a DCP checkpoint (model and both optimizers), read without ranks."""
    flat = tmp / f"{checkpoint.parent.parent.name}-{checkpoint.name}.pt"
    dcp_to_torch_save(checkpoint, flat)
    state = torch.load(flat, weights_only=False)
    out: dict[str, torch.Tensor] = {}

    def walk(node: object, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        elif isinstance(node, torch.Tensor):
            out[prefix.rstrip(".")] = node

    walk(state, "")
    return out
