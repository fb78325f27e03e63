"""Raw-id (dynamic) tables: MovieLens-100k test AUC on raw ids, against pre-mapped ids and the
hash trick (issue 27's quality goal: the dynamic run within 0.002 of the pre-mapped run).

Run: ``.venv/bin/python benchmarks/dynamic_quality.py [--cache-dir DIR | --data-dir DIR]``.

Three `shardrec train` runs of the movielens-100k preset on one rank, same seed and flags:

1. pre-mapped: user / item ids re-indexed to ``[0, n)`` by the dataset (the usual run);
2. dynamic: ``--raw-ids``, the ids of the files into dynamic tables (``--dynamic-capacity``
   slots, default 1.25 x the distinct ids, LRU, ALWAYS admission), no mapping pass;
   ``--dynamic-headroom 1.0`` gives them the pre-mapped tables' rows (and so the same
   initializer scale, which depends on the rows);
3. hash trick: ``--raw-ids --raw-id-tables hash``, ``mix64(id) mod rows`` into ordinary tables
   of the same rows as the dynamic ones (colliding ids share a row).

``--dynamic-capacity`` below the distinct ids (943 users, 1682 items) makes the tables evict.
Prints each run's test AUC and the differences; AUC is not timing-sensitive, so a loaded
machine measures it as well as a quiet one (only the wall time differs).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile


def run(name: str, extra: list[str], common: list[str], out: pathlib.Path) -> dict[str, object]:
    target = out / name
    cmd = [sys.executable, "-m", "shardrec_train", "train", *common, *extra, "--out", str(target)]
    print(f"{name}: {' '.join(cmd[3:])}", flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr}")
    summary: dict[str, object] = json.loads((target / "summary.json").read_text())
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=pathlib.Path, default=None, help="raw ml-100k folder")
    parser.add_argument("--cache-dir", type=pathlib.Path, default=None, help="MovieLens cache")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=None, help="default: the preset's (4)")
    parser.add_argument("--dynamic-capacity", type=int, default=None)
    parser.add_argument(
        "--dynamic-headroom",
        type=float,
        default=None,
        help="slots per distinct id (1.0: the pre-mapped tables' sizes and init scale)",
    )
    parser.add_argument("--out", type=pathlib.Path, default=None)
    args = parser.parse_args()
    common = ["--dataset", "movielens-100k", "--nproc-per-node", "1", "--eval-every", "0"]
    common += ["--seed", str(args.seed)]
    if args.epochs is not None:
        common += ["--epochs", str(args.epochs)]
    if args.data_dir is not None:
        common += ["--data-dir", str(args.data_dir)]
    if args.cache_dir is not None:
        common += ["--dataset-option", f"cache_dir={args.cache_dir}"]
    sizes = (
        [] if args.dynamic_capacity is None else ["--dynamic-capacity", str(args.dynamic_capacity)]
    )
    out = args.out or pathlib.Path(tempfile.mkdtemp(prefix="dynamic-quality-"))
    runs = {
        "pre-mapped": run("premapped", [], common, out),
        "dynamic": run("dynamic", ["--raw-ids", *sizes], common, out),
        "hash trick": run("hash", ["--raw-ids", "--raw-id-tables", "hash", *sizes], common, out),
    }
    base = float(runs["pre-mapped"]["test_auc"])  # type: ignore[arg-type]
    print(f"\nmovielens-100k, 1 rank, seed {args.seed}, outputs in {out}")
    print(f"{'run':<12} {'test AUC':>9} {'vs pre-mapped':>14} {'test log loss':>14}")
    for name, s in runs.items():
        auc = float(s["test_auc"])  # type: ignore[arg-type]
        loss = float(s["test_log_loss"])  # type: ignore[arg-type]
        print(f"{name:<12} {auc:9.4f} {auc - base:+14.4f} {loss:14.4f}")
    stats = runs["dynamic"].get("dynamic_tables")
    if stats:
        print(f"dynamic tables at the end: {json.dumps(stats)}")


if __name__ == "__main__":
    main()
