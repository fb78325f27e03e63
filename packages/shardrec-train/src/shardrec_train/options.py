"""The `shardrec train` options: the argparse parser and the frozen `TrainOptions` it yields.

Model and training flags left out take a per-dataset preset (`PRESETS`, tuned for
MovieLens-100k on 2 CPU ranks: docs/bench/train_movielens.md), else `GENERIC`; `shardrec train
--help` shows both.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import pathlib

from shardrec_optim import EmbOptimType
from shardrec_planner import ShardingType

DATASETS = ("movielens-100k", "criteo-tsv", "criteo-npy", "synthetic")
MODELS = ("dlrm", "dlrm_dcn")
BACKENDS = ("auto", "gloo", "nccl")
DENSE_OPTIMIZERS = ("adam", "adagrad", "sgd")
DEFAULT_COLLECTIVE_TIMEOUT_S = 600.0
FORCEABLE_SHARDING_TYPES = (
    ShardingType.DATA_PARALLEL,
    ShardingType.TABLE_WISE,
    ShardingType.COLUMN_WISE,
    ShardingType.ROW_WISE,
    ShardingType.TABLE_ROW_WISE,
    ShardingType.TABLE_COLUMN_WISE,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainOptions:
    """Everything one training run needs; built by `parse_train_args`.

    `batch_size` is per rank (the global batch is `batch_size * world_size`).
    `max_steps` 0 means "all epochs". `eval_every` / `checkpoint_every` 0 mean "only at the end".
    """

    dataset: str
    data_dir: pathlib.Path | None
    dataset_options: tuple[tuple[str, str], ...]
    model: str
    epochs: int
    batch_size: int
    embedding_dim: int
    dense_arch: tuple[int, ...]
    over_arch: tuple[int, ...]
    dcn_num_layers: int
    dcn_low_rank_dim: int
    learning_rate: float
    embedding_lr: float
    optimizer: EmbOptimType
    dense_optimizer: str
    sharding_type: ShardingType | None
    eval_every: int
    checkpoint_every: int
    resume: bool
    out: pathlib.Path
    seed: int
    max_steps: int
    backend: str
    pipeline: bool
    nproc_per_node: int
    nnodes: int
    collective_timeout: float = DEFAULT_COLLECTIVE_TIMEOUT_S

    @property
    def world_size(self) -> int:
        """Ranks of the whole job: nodes times processes per node."""
        return self.nnodes * self.nproc_per_node

    def to_dict(self) -> dict[str, object]:
        """JSON-ready view (paths and enums as strings)."""
        out: dict[str, object] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, pathlib.Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = [list(v) if isinstance(v, tuple) else v for v in value]
            elif value is not None and not isinstance(value, bool | int | float | str):
                value = str(value)
            out[f.name] = value
        return out


def _int_list(text: str) -> tuple[int, ...]:
    """`"64,32"` -> `(64, 32)`; argparse turns the ValueError into a one-line usage error."""
    try:
        values = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers like 64,32, got {text!r}"
        ) from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers like 64,32, got {text!r}"
        )
    return values


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def _optimizer(text: str) -> EmbOptimType:
    try:
        return EmbOptimType(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _sharding_type(text: str) -> ShardingType:
    try:
        st = ShardingType(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if st not in FORCEABLE_SHARDING_TYPES:
        raise argparse.ArgumentTypeError(
            f"sharding type {text!r} cannot be forced for every table; choose one of "
            f"{[s.value for s in FORCEABLE_SHARDING_TYPES]}"
        )
    return st


PRESETS: dict[str, dict[str, object]] = {
    # Tuned on MovieLens-100k, 2 gloo ranks (docs/bench/train_movielens.md).
    "movielens-100k": {
        "model": "dlrm_dcn",
        "embedding_dim": 32,
        "epochs": 4,
        "batch_size": 512,
        "learning_rate": 3e-3,
        "embedding_lr": 0.05,
    },
}
"""Per-dataset defaults of the model and training flags; a flag given on the command line wins."""

GENERIC: dict[str, object] = {
    "model": "dlrm",
    "embedding_dim": 16,
    "over_arch": (64, 32, 1),
    "dcn_num_layers": 2,
    "dcn_low_rank_dim": 16,
    "epochs": 1,
    "batch_size": 256,
    "learning_rate": 2e-3,
    "embedding_lr": 0.05,
}
"""Defaults for datasets without a preset."""


def _show(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


def _preset_help(dest: str) -> str:
    per = [f"{name}: {_show(v[dest])}" for name, v in PRESETS.items() if dest in v]
    text = f"default {_show(GENERIC[dest])}"
    return f" ({text}; {', '.join(per)})" if per else f" ({text})"


def preset(dataset: str, dest: str) -> object:
    """The default of flag `dest` for `dataset`."""
    return PRESETS.get(dataset, {}).get(dest, GENERIC[dest])


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `shardrec train` (docs/train.md lists them with their meaning)."""
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", required=True, choices=DATASETS, help="what to train on")
    data.add_argument(
        "--data-dir",
        type=pathlib.Path,
        help="dataset files (criteo-tsv/-npy: required; movielens-100k: a raw ml-100k "
        "directory with u.data/u.item/u.user, or the download cache when absent)",
    )
    data.add_argument(
        "--dataset-option",
        dest="dataset_options",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra option passed to shardrec_data.load_dataset (repeatable), e.g. "
        "num_samples=4096 for synthetic data",
    )
    model = parser.add_argument_group("model")
    model.add_argument("--model", choices=MODELS, default=None, help=_preset_help("model"))
    model.add_argument(
        "--embedding-dim",
        type=int,
        default=None,
        help="width of every table" + _preset_help("embedding_dim"),
    )
    model.add_argument(
        "--dense-arch",
        type=_int_list,
        default=None,
        metavar="N,N,...",
        help="bottom MLP sizes; must end with --embedding-dim (default: 64,<embedding-dim>)",
    )
    model.add_argument(
        "--over-arch",
        type=_int_list,
        default=None,
        metavar="N,N,...,1",
        help="top MLP sizes, ending with 1" + _preset_help("over_arch"),
    )
    model.add_argument(
        "--dcn-num-layers", type=int, default=None, help="dlrm_dcn" + _preset_help("dcn_num_layers")
    )
    model.add_argument(
        "--dcn-low-rank-dim",
        type=int,
        default=None,
        help="dlrm_dcn" + _preset_help("dcn_low_rank_dim"),
    )
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", type=int, default=None, help=_preset_help("epochs"))
    train.add_argument(
        "--batch-size", type=int, default=None, help="per rank" + _preset_help("batch_size")
    )
    train.add_argument(
        "--learning-rate",
        type=float,
        default=None,
        help="dense optimizer" + _preset_help("learning_rate"),
    )
    train.add_argument(
        "--embedding-lr",
        type=float,
        default=None,
        help="fused table optimizer" + _preset_help("embedding_lr"),
    )
    train.add_argument(
        "--optimizer",
        type=_optimizer,
        default=EmbOptimType.EXACT_ROWWISE_ADAGRAD,
        help="fused optimizer of the embedding tables (default exact_row_wise_adagrad)",
    )
    train.add_argument(
        "--dense-optimizer", choices=DENSE_OPTIMIZERS, default="adam", help="default %(default)s"
    )
    train.add_argument(
        "--sharding-type",
        type=_sharding_type,
        default=None,
        help="force one sharding type for every table (default: the planner decides)",
    )
    train.add_argument("--max-steps", type=int, default=0, help="stop after this many steps")
    train.add_argument("--seed", type=int, default=0, help="model init and data order")
    train.add_argument(
        "--no-pipeline",
        dest="pipeline",
        action="store_false",
        help="plain loop instead of TrainPipelineSparseDist",
    )
    run = parser.add_argument_group("evaluation, checkpoints, output")
    run.add_argument("--eval-every", type=int, default=0, help="steps; 0: only at the end")
    run.add_argument("--checkpoint-every", type=int, default=0, help="steps; 0: only at the end")
    run.add_argument(
        "--resume", action="store_true", help="continue from the latest OUT/checkpoints/step_<k>"
    )
    run.add_argument("--out", type=pathlib.Path, default=None, help="default runs/<dataset>-<time>")
    launch = parser.add_argument_group("launch (torchrun's own flags)")
    launch.add_argument(
        "--nproc-per-node", type=int, default=2, help="ranks on this machine (default %(default)s)"
    )
    launch.add_argument(
        "--backend",
        choices=BACKENDS,
        default="auto",
        help="auto: nccl when CUDA GPUs are visible, else gloo",
    )
    launch.add_argument("--nnodes", type=int, default=1, help="machines in the job")
    launch.add_argument("--node-rank", type=int, default=None, help="static rendezvous only")
    launch.add_argument("--rdzv-backend", default=None, help="e.g. c10d (torchrun's default)")
    launch.add_argument("--rdzv-endpoint", default=None, help="HOST:PORT of the rendezvous")
    launch.add_argument("--rdzv-id", default=None, help="job id shared by every node")
    launch.add_argument("--master-addr", default=None, help="static rendezvous: rank 0's host")
    launch.add_argument("--master-port", type=int, default=None)
    launch.add_argument("--max-restarts", type=int, default=None, help="torchrun restarts")
    launch.add_argument(
        "--collective-timeout",
        type=float,
        default=DEFAULT_COLLECTIVE_TIMEOUT_S,
        metavar="SECONDS",
        help="process-group timeout: a collective (or joining) waits at most this long; a rank "
        "whose heartbeat is silent for half of it stops the job, naming it (default %(default)g)",
    )


TORCHRUN_FLAGS = (
    "nnodes",
    "node_rank",
    "rdzv_backend",
    "rdzv_endpoint",
    "rdzv_id",
    "master_addr",
    "master_port",
    "max_restarts",
)
"""Flags handed to torchrun unchanged (dest names)."""


def default_out(dataset: str, now: datetime.datetime | None = None) -> pathlib.Path:
    """`runs/<dataset>-<YYYYmmdd-HHMMSS>` (UTC)."""
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y%m%d-%H%M%S")
    return pathlib.Path("runs") / f"{dataset}-{stamp}"


def options_from_namespace(ns: argparse.Namespace) -> TrainOptions:
    """The parsed namespace as `TrainOptions`: flags left out take the dataset's preset
    (numbers are range-checked by `validate`)."""

    def pick(dest: str) -> object:
        value = getattr(ns, dest)
        return preset(ns.dataset, dest) if value is None else value

    dim = int(str(pick("embedding_dim")))
    dense = tuple(ns.dense_arch) if ns.dense_arch is not None else (64, dim)
    over = pick("over_arch")
    assert isinstance(over, tuple)
    return TrainOptions(
        dataset=ns.dataset,
        data_dir=ns.data_dir,
        dataset_options=tuple(ns.dataset_options),
        model=str(pick("model")),
        epochs=int(str(pick("epochs"))),
        batch_size=int(str(pick("batch_size"))),
        embedding_dim=dim,
        dense_arch=dense,
        over_arch=tuple(int(v) for v in over),
        dcn_num_layers=int(str(pick("dcn_num_layers"))),
        dcn_low_rank_dim=int(str(pick("dcn_low_rank_dim"))),
        learning_rate=float(str(pick("learning_rate"))),
        embedding_lr=float(str(pick("embedding_lr"))),
        optimizer=ns.optimizer,
        dense_optimizer=ns.dense_optimizer,
        sharding_type=ns.sharding_type,
        eval_every=ns.eval_every,
        checkpoint_every=ns.checkpoint_every,
        resume=ns.resume,
        out=ns.out if ns.out is not None else default_out(ns.dataset),
        seed=ns.seed,
        max_steps=ns.max_steps,
        backend=ns.backend,
        pipeline=ns.pipeline,
        nproc_per_node=ns.nproc_per_node,
        nnodes=ns.nnodes,
        collective_timeout=ns.collective_timeout,
    )
