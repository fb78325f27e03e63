"""The `shardrec` command: `shardrec train` trains DLRM on sharded tables with torchrun.

Only the torch-free parts are imported here, so that `shardrec --help` answers at once; the
pieces that run the job live in their modules: `shardrec_train.build` (model, plan, DMP),
`.loop` (steps, evaluation), `.validate` (the launcher's checks), `.worker` (one rank),
`.checkpoints`, `.report` (summary and charts), `.sharding` (`--sharding-type`).
"""

from shardrec_train.cli import build_parser, main
from shardrec_train.options import (
    TrainOptions,
    add_train_arguments,
    number_problems,
    option,
    options_from_namespace,
)
from shardrec_train.versions import version_line, version_report

__all__ = [
    "TrainOptions",
    "add_train_arguments",
    "build_parser",
    "main",
    "number_problems",
    "option",
    "options_from_namespace",
    "version_line",
    "version_report",
]
