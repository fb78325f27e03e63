"""`shardrec`: the console script (also `python -m shardrec_train`).

    shardrec train --dataset movielens-100k --nproc-per-node 2
    shardrec preprocess-criteo day_0.tsv day_1.tsv --out-dir criteo_npy/
    shardrec version            (shardrec --version: one line)

`train` outside torchrun validates every argument (one line per problem on stderr, exit
status 2, no process started) and re-launches itself under torchrun; inside torchrun it trains
(docs/train.md).

Parsing and the range checks import no torch: `--help`, `--version` and a mistyped flag
answer in a fraction of a second; torch is imported only once the arguments are known good.
"""

from __future__ import annotations

import argparse
import difflib
import os
import pathlib
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

from shardrec_train.launch import inside_torchrun, launch, torchrun_command
from shardrec_train.options import add_train_arguments, number_problems, options_from_namespace
from shardrec_train.versions import version_line

PROG = "shardrec"
USAGE_ERROR = 2
FREQUENCY_THRESHOLD = 1
"""`shardrec_data.criteo_preprocess.DEFAULT_FREQUENCY_THRESHOLD` (a test keeps them equal;
spelled out so that `--help` imports no torch)."""


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (no usage block) and exit status 2; an
    unknown flag names the closest known one."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [s for action in parser._actions for s in action.option_strings if s.startswith("--")]


def unknown_flag_problem(parser: argparse.ArgumentParser, args: Sequence[str]) -> str | None:
    """'unrecognized argument --epoch-count; did you mean --epochs?' for the first flag of
    `args` that the chosen command does not know (argparse's own prefix matching counts as
    known), or None."""
    commands = {
        name: sub
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, sub in action.choices.items()
    }
    command = next((a for a in args if a in commands), None)
    known = _flags(parser) + (_flags(commands[command]) if command else [])
    for arg in args:
        if not arg.startswith("--") or arg == "--":
            continue
        name = arg.split("=", 1)[0]
        if any(flag.startswith(name) for flag in known):
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]}?" if close else ""
        where = f"{PROG} {command}" if command else PROG
        return f"unrecognized argument {name} for `{where}`{hint}"
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Train sharded recommendation models (docs/train.md).")
    parser.add_argument("--version", action="version", version=version_line())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    train = commands.add_parser(
        "train",
        help="train DLRM / DLRM_DCN on N ranks with torchrun",
        description="Train DLRM or DLRM_DCN with sharded embedding tables on N ranks.",
    )
    add_train_arguments(train)
    pre = commands.add_parser(
        "preprocess-criteo",
        help="Criteo TSV days -> the per-day .npy layout",
        description="Convert Criteo TSV files (label, 13 integers, 26 hex) to the per-day .npy "
        "layout `--dataset criteo-npy` reads: log-transformed dense features, contiguous ids.",
    )
    # The only command line of shardrec_data.preprocess_criteo (shardrec_data has none:
    # importing it imports torch, and parsing here must not; see the module docstring).
    pre.add_argument("tsv_paths", nargs="+", type=pathlib.Path, help="TSV files, in day order")
    pre.add_argument("--out-dir", required=True, type=pathlib.Path, help="output directory")
    pre.add_argument(
        "--frequency-threshold",
        type=int,
        default=FREQUENCY_THRESHOLD,
        help="ids seen fewer times than this share one row (default %(default)s)",
    )
    commands.add_parser(
        "version",
        help="versions of every shardrec package, torch, and the kernel backends",
        description="Print the version of each installed shardrec package and of torch, and "
        "which kernel backends (fbgemm or torch-native) load here.",
    )
    return parser


def _error(line: str) -> None:
    print(f"{PROG} train: error: {line}", file=sys.stderr)


def run_train(ns: argparse.Namespace, train_argv: Sequence[str], environ: Mapping[str, str]) -> int:
    opts = options_from_namespace(ns)
    if inside_torchrun(environ):
        from shardrec_train.worker import train_worker

        return train_worker(opts, environ)
    problems = number_problems(opts)
    if not problems:
        # The checks that need torch (GPUs, checkpoints, the dataset itself).
        from shardrec_train.validate import validate

        problems, _ = validate(opts)
    for line in problems:
        _error(line)
    if problems:
        return USAGE_ERROR
    return launch(
        torchrun_command(ns, train_argv, opts.out), ns.nproc_per_node, threads=opts.threads
    )


def run_preprocess(ns: argparse.Namespace) -> int:
    """`shardrec_data.preprocess_criteo`; a bad argument is one line and status 2."""
    from shardrec_data import preprocess_criteo

    try:
        sizes = preprocess_criteo(ns.tsv_paths, ns.out_dir, ns.frequency_threshold)
    except (ValueError, FileNotFoundError, TypeError) as err:
        print(f"{PROG} preprocess-criteo: error: {err}", file=sys.stderr)
        return USAGE_ERROR
    print(f"wrote {len(ns.tsv_paths)} day(s) to {ns.out_dir}; table sizes {sizes}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `shardrec` console script; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    problem = unknown_flag_problem(parser, args)
    if problem is not None and not {"-h", "--help"} & set(args):
        parser.error(problem)
    ns = parser.parse_args(args)  # exits 2 with one usage line on a syntax error
    if ns.command == "train":
        return run_train(ns, args[args.index("train") + 1 :], os.environ)
    if ns.command == "version":
        from shardrec_train.versions import version_report

        print(version_report())
        return 0
    return run_preprocess(ns)
