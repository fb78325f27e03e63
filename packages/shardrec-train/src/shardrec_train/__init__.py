"""The `shardrec` command: `shardrec train` trains DLRM on sharded tables with torchrun."""

from shardrec_train.build import Built, build, build_model, make_plan, table_configs
from shardrec_train.checkpoints import History, latest_checkpoint
from shardrec_train.cli import build_parser, main
from shardrec_train.options import TrainOptions, add_train_arguments, options_from_namespace
from shardrec_train.sharding import forced_generators, forced_type_problem
from shardrec_train.validate import validate

__all__ = [
    "Built",
    "History",
    "TrainOptions",
    "add_train_arguments",
    "build",
    "build_model",
    "build_parser",
    "forced_generators",
    "forced_type_problem",
    "latest_checkpoint",
    "main",
    "make_plan",
    "options_from_namespace",
    "table_configs",
    "validate",
]
