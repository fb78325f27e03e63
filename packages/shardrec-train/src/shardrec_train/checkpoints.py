"""Where a run keeps its checkpoints and its history, and how `--resume` finds them.

    OUT/checkpoints/step_<k>/   shardrec_dmp.save: model, fused + dense optimizer state
    OUT/history.json            train loss per step, test metrics per evaluation (rank 0)

A `step_<k>` directory exists only once every rank finished writing it (`save` writes
`step_<k>.partial` and renames), so resuming is "load the highest `step_<k>` that verifies":
one whose files fail their checksums (or hold anything but tensors and plain values) is
renamed `step_<k>.corrupt`, kept for inspection, and the next older one is tried. The history
is rewritten after each checkpoint; on resume, entries after step k are dropped, so charts and
the summary of a resumed run cover the whole run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
from collections.abc import Callable, Mapping

from shardrec_dmp import CheckpointError, saved_shapes

_STEP_DIR = re.compile(r"^step_(\d+)$")
CORRUPT = ".corrupt"
"""Suffix of a checkpoint directory that failed verification (never resumed from again)."""


def checkpoint_dir(out: pathlib.Path) -> pathlib.Path:
    return out / "checkpoints"


def step_path(out: pathlib.Path, step: int) -> pathlib.Path:
    return checkpoint_dir(out) / f"step_{step}"


def checkpoints_newest_first(out: pathlib.Path) -> list[tuple[int, pathlib.Path]]:
    """`(step, path)` of every finished checkpoint under `out`, the highest step first."""
    folder = checkpoint_dir(out)
    if not folder.is_dir():
        return []
    found = [(int(m[1]), e.name) for e in folder.iterdir() if (m := _STEP_DIR.match(e.name))]
    return [(step, folder / name) for step, name in sorted(found, reverse=True)]


def latest_checkpoint(out: pathlib.Path) -> tuple[int, pathlib.Path] | None:
    """`(step, path)` of the newest finished checkpoint under `out`, or None."""
    found = checkpoints_newest_first(out)
    return found[0] if found else None


def set_aside(path: pathlib.Path) -> pathlib.Path:
    """Rename a checkpoint that failed verification to `step_<k>.corrupt` (`.corrupt-2`, ...):
    kept for inspection, never resumed from, and not replaced when step k is saved again."""
    target, n = path.with_name(path.name + CORRUPT), 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}{CORRUPT}-{n}")
    os.replace(path, target)
    return target


def resume_latest(
    out: pathlib.Path, load_one: Callable[[pathlib.Path], None], *, lead: bool
) -> tuple[int, pathlib.Path]:
    """Load the newest checkpoint that verifies with `load_one` (every rank, in step: the
    `CheckpointError` of a damaged one is raised on every rank); returns `(step, path)`.

    A checkpoint that fails is renamed aside by the lead rank, which says so. Verification
    precedes reading, so a failed checkpoint has not changed the model; one whose data turned
    out crafted after verification may have, and the older checkpoint overwrites it.
    """
    failures: list[str] = []
    for step, path in checkpoints_newest_first(out):
        try:
            load_one(path)
        except (CheckpointError, FileNotFoundError) as err:  # no manifest: not verifiable
            failures.append(str(err))
            if lead:
                kept = set_aside(path)
                print(
                    f"resume: {path.name} does not verify: {err}\n"
                    f"resume: kept it as {kept} for inspection; falling back to the previous "
                    "checkpoint",
                    flush=True,
                )
            continue
        return step, path
    raise CheckpointError(
        f"resume: no checkpoint under {checkpoint_dir(out)} verifies ({len(failures)} tried, "
        f"each renamed *{CORRUPT}); start a new run with another --out"
        + (f"; the newest failed with: {failures[0]}" if failures else "")
    )


def _shape(shape: tuple[int, ...] | None) -> str:
    return "absent" if shape is None else str(list(shape))


def shape_problems(
    out: pathlib.Path,
    expected: Mapping[str, tuple[int, ...]],
    *,
    skip: Callable[[str], bool] = lambda key: False,
) -> list[str]:
    """One line if the model of the checkpoint `--resume` would start from (the newest one
    whose metadata reads) has other tensors or shapes than `expected` (what these flags build:
    state_dict key -> shape); checked before launch, from the manifest and `.metadata` only.
    Keys for which `skip` is true are not compared."""
    unreadable: list[str] = []
    for _, path in checkpoints_newest_first(out):
        try:
            saved = saved_shapes(path)
        except (CheckpointError, ValueError, OSError) as err:
            unreadable.append(str(err))
            continue
        model = {
            k.removeprefix("model."): v
            for k, v in saved.items()
            if k.startswith("model.") and not skip(k.removeprefix("model."))
        }
        diffs = [
            f"{key}: {_shape(model.get(key))} saved, {_shape(expected.get(key))} with these flags"
            for key in sorted(model.keys() | expected.keys())
            if model.get(key) != expected.get(key)
        ]
        if not diffs:
            return []
        more = f"; and {len(diffs) - 3} more" if len(diffs) > 3 else ""
        return [
            f"--resume: {path} holds a model of another shape ({'; '.join(diffs[:3])}{more}); "
            "pass the model flags of the run that wrote it, or choose another --out"
        ]
    if unreadable:
        return [f"--resume: no checkpoint under {checkpoint_dir(out)} can be read: {unreadable[0]}"]
    return []


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
