"""Where a run keeps its checkpoints and its history, and how `--resume` finds them.

    OUT/checkpoints/step_<k>/   shardrec_dmp.save: model, fused + dense optimizer state
    OUT/history.json            train loss per step, test metrics per evaluation (rank 0)

A `step_<k>` directory exists only once every rank finished writing it (`save` writes
`step_<k>.partial` and renames), so resuming is "load the highest `step_<k>`". The history is
rewritten after each checkpoint; on resume, entries after step k are dropped, so charts and
the summary of a resumed run cover the whole run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re

_STEP_DIR = re.compile(r"^step_(\d+)$")


def checkpoint_dir(out: pathlib.Path) -> pathlib.Path:
    return out / "checkpoints"


def step_path(out: pathlib.Path, step: int) -> pathlib.Path:
    return checkpoint_dir(out) / f"step_{step}"


def latest_checkpoint(out: pathlib.Path) -> tuple[int, pathlib.Path] | None:
    """`(step, path)` of the newest finished checkpoint under `out`, or None."""
    folder = checkpoint_dir(out)
    if not folder.is_dir():
        return None
    found = [(int(m[1]), e.name) for e in folder.iterdir() if (m := _STEP_DIR.match(e.name))]
    if not found:
        return None
    step, name = max(found)
    return step, folder / name


@dataclasses.dataclass
class History:
    """What the charts and the summary are drawn from (rank 0 holds the real one).

    `train_loss`: (step, mean loss over all ranks); `evals`: (step, {metric: value}).
    """

    train_loss: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    evals: list[tuple[int, dict[str, float]]] = dataclasses.field(default_factory=list)

    def truncate(self, step: int) -> None:
        """Forget everything recorded after `step` (the steps a resume redoes)."""
        self.train_loss = [(s, v) for s, v in self.train_loss if s <= step]
        self.evals = [(s, m) for s, m in self.evals if s <= step]

    def to_json(self) -> str:
        return json.dumps(
            {
                "train_loss": [[s, v] for s, v in self.train_loss],
                "evals": [{"step": s, **m} for s, m in self.evals],
            }
        )

    @staticmethod
    def from_json(text: str) -> History:
        data = json.loads(text)
        evals = []
        for entry in data.get("evals", []):
            step = int(entry.pop("step"))
            evals.append((step, {k: float(v) for k, v in entry.items()}))
        return History(
            train_loss=[(int(s), float(v)) for s, v in data.get("train_loss", [])],
            evals=evals,
        )

    def write(self, out: pathlib.Path) -> None:
        """Atomically replace OUT/history.json."""
        path = out / "history.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(self.to_json())
        os.replace(tmp, path)

    @staticmethod
    def read(out: pathlib.Path) -> History:
        path = out / "history.json"
        return History.from_json(path.read_text()) if path.is_file() else History()
