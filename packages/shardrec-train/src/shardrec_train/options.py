"""The `shardrec train` options, each declared once: a `TrainOptions` field with its `option`.

A field's annotation gives the flag's type (`int`, `float`, `str`, `pathlib.Path`, `bool`; a
`parse` function for anything else), and its `option(...)` the help text, the group in
`--help`, the choices and the range `number_problems` checks. `add_train_arguments` derives
the argparse flags from the fields and `options_from_namespace` the `TrainOptions` from the
parsed namespace, so adding an option is adding one field:

    collective_timeout: float = option("seconds", group=LAUNCH, default=600.0, above=0)

Model and training flags left out take a per-dataset preset (`PRESETS`, tuned for
MovieLens-100k on 2 CPU ranks: docs/bench/train_movielens.md), else `GENERIC`; `shardrec train
--help` shows both.

This module imports no torch (nor any package that does): `shardrec --help` and argument
errors answer in well under a second.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import math
import pathlib
import typing
from collections.abc import Callable, Mapping
from typing import Any

DATASETS = ("movielens-100k", "criteo-tsv", "criteo-npy", "synthetic")
MODELS = ("dlrm", "dlrm_dcn")
BACKENDS = ("auto", "gloo", "nccl")
DENSE_OPTIMIZERS = ("adam", "adagrad", "sgd")
DENSE_PRECISIONS = ("fp32", "bf16")
"""shardrec_models.DENSE_PRECISIONS, spelled out so that parsing imports no torch (a test keeps
them equal)."""
EMBEDDING_OPTIMIZERS = (
    "exact_row_wise_adagrad",
    "row_wise_adagrad",
    "exact_adagrad",
    "exact_sgd",
    "sgd",
    "adam",
    "partial_row_wise_adam",
    "lamb",
    "partial_row_wise_lamb",
    "lars_sgd",
)
"""`shardrec_optim.EmbOptimType` values (a test keeps the two equal; spelled out here so that
parsing imports no torch)."""
EVICTION_POLICIES = ("NONE", "LRU", "LFU", "TTL")
ADMISSION_POLICIES = ("ALWAYS", "THRESHOLD", "PROBABILITY")
UNKNOWN_ID_POLICIES = ("ZERO", "DEFAULT_ROW")
RAW_ID_TABLES = ("dynamic", "hash")
"""`shardrec_embedding.dynamic`'s policy names (a test keeps them equal; spelled out so that
parsing imports no torch)."""
TIER_POLICIES = ("lru", "lfu")
"""`shardrec_tiered.CachePolicy` values (spelled out so that parsing imports no torch)."""
FORCEABLE_SHARDING_TYPES = (
    "data_parallel",
    "table_wise",
    "column_wise",
    "row_wise",
    "table_row_wise",
    "table_column_wise",
)
"""`shardrec_planner.ShardingType` values `--sharding-type` can force on every table
(grid_shard needs a per-table choice of column blocks, so only the planner picks it)."""

DATA = "data"
MODEL = "model"
TRAINING = "training"
OUTPUT = "evaluation, checkpoints, output"
LAUNCH = "launch (torchrun's own flags)"
GROUPS = (DATA, MODEL, TRAINING, OUTPUT, LAUNCH)
"""The sections of `shardrec train --help`, in order."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Flag:
    """How one `TrainOptions` field appears on the command line (built by `option`)."""

    help: str
    group: str
    choices: tuple[str, ...] | None = None
    parse: Callable[[str], object] | None = None
    metavar: str | None = None
    at_least: int | None = None
    above: float | None = None
    preset: bool = False
    default_from: Callable[[Mapping[str, Any]], object] | None = None
    repeat: bool = False
    torchrun: bool = False
    flag: str | None = None

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(f"Flag.group {self.group!r} is not one of {GROUPS}")


def option(
    help: str,
    *,
    group: str,
    default: object = dataclasses.MISSING,
    choices: tuple[str, ...] | None = None,
    parse: Callable[[str], object] | None = None,
    metavar: str | None = None,
    at_least: int | None = None,
    above: float | None = None,
    preset: bool = False,
    default_from: Callable[[Mapping[str, Any]], object] | None = None,
    repeat: bool = False,
    torchrun: bool = False,
    flag: str | None = None,
) -> Any:  # a dataclass field: its type is the annotation it is assigned to
    """A `TrainOptions` field and its flag.

    `default`: the value when the flag is left out (none: the flag is required, unless
    `preset` or `default_from` supplies one from the other options). `at_least` / `above`:
    the range `number_problems` checks. `repeat`: the flag may be given several times (a
    tuple). `torchrun`: handed to torchrun unchanged. `flag`: the spelling when it is not
    `--field-name` (e.g. `--no-pipeline`).
    """
    meta = Flag(
        help=help,
        group=group,
        choices=choices,
        parse=parse,
        metavar=metavar,
        at_least=at_least,
        above=above,
        preset=preset,
        default_from=default_from,
        repeat=repeat,
        torchrun=torchrun,
        flag=flag,
    )
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata={"flag": meta})
    return dataclasses.field(default=default, metadata={"flag": meta})


def _torchrun(help: str) -> Any:  # a dataclasses.field, as `option`
    """An optional flag torchrun takes as it is (`None`: torchrun's own default)."""
    return option(help, group=LAUNCH, default=None, torchrun=True)


def _int_list(text: str) -> tuple[int, ...]:
    """`"64,32"` -> `(64, 32)`; argparse turns the error into a one-line usage error."""
    try:
        values = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        values = ()
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


def default_out(dataset: str, now: datetime.datetime | None = None) -> pathlib.Path:
    """`runs/<dataset>-<YYYYmmdd-HHMMSS>` (UTC)."""
    stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y%m%d-%H%M%S")
    return pathlib.Path("runs") / f"{dataset}-{stamp}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainOptions:
    """Everything one training run needs; `options_from_namespace` builds it from a command line.

    `batch_size` is per rank (the global batch is `batch_size * world_size`).
    `max_steps` 0 means "all epochs". `eval_every` None means `loop.EVALS_PER_RUN` (10) evaluations
    spread over the run; `eval_every` / `checkpoint_every` 0 mean "only at the end".
    """

    # data
    dataset: str = option("what to train on", group=DATA, choices=DATASETS)
    # `option` returns a dataclasses.field (RUF009 does not know it).
    data_dir: pathlib.Path | None = option(  # noqa: RUF009
        "dataset files (criteo-tsv/-npy: required; movielens-100k: a raw ml-100k directory "
        "with u.data/u.item/u.user, or the download cache when absent)",
        group=DATA,
        default=None,
    )
    dataset_options: tuple[tuple[str, str], ...] = option(
        "extra option passed to shardrec_data.load_dataset (repeatable), e.g. "
        "num_samples=4096 for synthetic data",
        group=DATA,
        default=(),
        parse=_key_value,
        metavar="KEY=VALUE",
        repeat=True,
        flag="--dataset-option",
    )
    raw_ids: bool = option(
        "read the dataset's id features as raw ids (movielens-100k: user / item ids of the "
        "files; criteo-tsv: the hex values, no modulo) into dynamic (raw-id) tables, with no "
        "mapping pass (docs/dynamic.md); same as --dataset-option raw_ids=true",
        group=DATA,
        default=False,
    )
    raw_id_tables: str = option(
        "with --raw-ids: dynamic (a slot per id, collision-free) or hash (the hash trick "
        "baseline: hash(id) modulo the same number of rows, colliding ids share a row)",
        group=DATA,
        default="dynamic",
        choices=RAW_ID_TABLES,
    )
    dynamic_capacity: int | None = option(
        "slots of every dynamic table (default: --dynamic-headroom x the ids its feature names)",
        group=DATA,
        default=None,
        at_least=1,
    )
    dynamic_headroom: float = option(
        "without --dynamic-capacity, each dynamic table gets this many slots per id the "
        "dataset names (its feature's size hint)",
        group=DATA,
        default=1.25,
        above=0,
    )
    dynamic_eviction: str = option(
        "dynamic tables: what frees slots when a table is full",
        group=DATA,
        default="LRU",
        choices=EVICTION_POLICIES,
    )
    dynamic_ttl_steps: int | None = option(
        "dynamic tables, --dynamic-eviction TTL: steps a row may go unseen",
        group=DATA,
        default=None,
        at_least=1,
    )
    dynamic_admission: str = option(
        "dynamic tables: which new ids get a slot",
        group=DATA,
        default="ALWAYS",
        choices=ADMISSION_POLICIES,
    )
    dynamic_admission_threshold: int = option(
        "dynamic tables, THRESHOLD admission: sightings before an id gets a slot",
        group=DATA,
        default=1,
        at_least=1,
    )
    dynamic_admission_probability: float = option(
        "dynamic tables, PROBABILITY admission: chance per sighting",
        group=DATA,
        default=1.0,
        above=0,
    )
    dynamic_unknown_id: str = option(
        "dynamic tables: what an id without a slot reads at evaluation",
        group=DATA,
        default="ZERO",
        choices=UNKNOWN_ID_POLICIES,
    )
    # model
    model: str = option("the model", group=MODEL, choices=MODELS, preset=True)
    embedding_dim: int = option("width of every table", group=MODEL, preset=True, at_least=1)
    dense_arch: tuple[int, ...] = option(
        "bottom MLP sizes; must end with --embedding-dim (default: 64,<embedding-dim>)",
        group=MODEL,
        parse=_int_list,
        metavar="N,N,...",
        default_from=lambda o: (64, o["embedding_dim"]),
    )
    over_arch: tuple[int, ...] = option(
        "top MLP sizes, ending with 1", group=MODEL, parse=_int_list, metavar="N,...,1", preset=True
    )
    dcn_num_layers: int = option("dlrm_dcn cross layers", group=MODEL, preset=True, at_least=1)
    dcn_low_rank_dim: int = option("dlrm_dcn low rank", group=MODEL, preset=True, at_least=1)
    dense_precision: str = option(
        "bf16: dense arch, interaction and over arch under bfloat16 autocast (float32 master "
        "weights; tables unchanged); fp32: plain float32",
        group=MODEL,
        default="fp32",
        choices=DENSE_PRECISIONS,
    )
    # training
    epochs: int = option("passes over the train split", group=TRAINING, preset=True, at_least=1)
    batch_size: int = option("per rank", group=TRAINING, preset=True, at_least=1)
    learning_rate: float = option("dense optimizer", group=TRAINING, preset=True, above=0)
    embedding_lr: float = option(
        "fused table optimizer (data_parallel tables train with the dense optimizer instead)",
        group=TRAINING,
        preset=True,
        above=0,
    )
    optimizer: str = option(
        "fused optimizer of the embedding tables (shardrec_optim.EmbOptimType)",
        group=TRAINING,
        default="exact_row_wise_adagrad",
        choices=EMBEDDING_OPTIMIZERS,
    )
    dense_optimizer: str = option(
        "optimizer of the dense part", group=TRAINING, default="adam", choices=DENSE_OPTIMIZERS
    )
    sharding_type: str | None = option(
        "force one sharding type for every table (default: the planner decides)",
        group=TRAINING,
        default=None,
        choices=FORCEABLE_SHARDING_TYPES,
    )
    host_memory_gib: float | None = option(
        "CPU runs: GiB of memory the ranks of one machine share for their tables; the "
        "planner's per-rank cap is this / --nproc-per-node (default: this machine's, detected)",
        group=TRAINING,
        default=None,
        above=0,
    )
    max_steps: int = option(
        "stop after this many steps; 0: all epochs", group=TRAINING, default=0, at_least=0
    )
    seed: int = option("model init and data order", group=TRAINING, default=0, at_least=0)
    pipeline: bool = option(
        "plain loop instead of TrainPipelineSparseDist",
        group=TRAINING,
        default=True,
        flag="--no-pipeline",
    )
    # tiered tables (shardrec_train/tiered.py, docs/tiered.md)
    tiered: bool = option(
        "place tables on disk behind an in-memory row cache on each rank (the key_value "
        "kernel): every table, or those with --tiered-min-rows rows",
        group=TRAINING,
        default=False,
    )
    tiered_min_rows: int = option(
        "with --tiered: only tables with at least this many rows go to disk; 0: every table",
        group=TRAINING,
        default=0,
        at_least=0,
    )
    tiered_cache_rows: int | None = option(
        "with --tiered: cached rows of each tiered table on each rank (its largest shard gets "
        "this many, smaller shards in proportion; default: --tiered-cache-fraction)",
        group=TRAINING,
        default=None,
        at_least=1,
    )
    tiered_cache_fraction: float = option(
        "with --tiered: cached fraction of each shard's rows (TorchRec's "
        "CacheParams.load_factor), at most 1",
        group=TRAINING,
        default=0.2,
        above=0,
    )
    tiered_cache_policy: str = option(
        "with --tiered: which cached row a miss replaces",
        group=TRAINING,
        default="lru",
        choices=TIER_POLICIES,
    )
    tiered_store_dir: pathlib.Path | None = option(  # noqa: RUF009  # a dataclasses.field
        "with --tiered: where the tables' stores go, a rank-<r> directory per rank (default "
        "OUT/tier-store); needs the tables' bytes free",
        group=TRAINING,
        default=None,
    )
    # evaluation, checkpoints, output
    eval_every: int | None = option(
        "steps between test evaluations; 0: only at the end (default: 10 evaluations spread "
        "over the run)",
        group=OUTPUT,
        default=None,
        at_least=0,
    )
    checkpoint_every: int = option(
        "steps between checkpoints; 0: only at the end", group=OUTPUT, default=0, at_least=0
    )
    resume: bool = option(
        "continue from the latest OUT/checkpoints/step_<k>", group=OUTPUT, default=False
    )
    out: pathlib.Path = option(  # noqa: RUF009  # a dataclasses.field
        "run directory (default runs/<dataset>-<time>)",
        group=OUTPUT,
        default_from=lambda o: default_out(o["dataset"]),
    )
    # launch
    nproc_per_node: int = option("ranks on this machine", group=LAUNCH, default=2, at_least=1)
    threads: int | None = option(
        "intra-op threads per rank (torch.set_num_threads); default: OMP_NUM_THREADS when set, "
        "else the cores this process may use divided by --nproc-per-node, at least 1",
        group=LAUNCH,
        default=None,
        at_least=1,
    )
    backend: str = option(
        "auto: nccl when CUDA GPUs are visible, else gloo",
        group=LAUNCH,
        default="auto",
        choices=BACKENDS,
    )
    nnodes: int = option("machines in the job", group=LAUNCH, default=1, at_least=1, torchrun=True)
    node_rank: int | None = _torchrun("static rendezvous only")
    rdzv_backend: str | None = _torchrun("e.g. c10d (torchrun's default)")
    rdzv_endpoint: str | None = _torchrun("HOST:PORT of the rendezvous")
    rdzv_id: str | None = _torchrun("job id shared by every node")
    master_addr: str | None = _torchrun("static rendezvous: rank 0's host")
    master_port: int | None = _torchrun("static rendezvous: rank 0's port")
    max_restarts: int | None = _torchrun("torchrun restarts")
    collective_timeout: float = option(
        "process-group timeout in seconds: a collective (or joining) waits at most this long; a "
        "rank whose heartbeat is silent for half of it stops the job, naming it",
        group=LAUNCH,
        default=600.0,
        above=0,
        metavar="SECONDS",
    )

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
            out[f.name] = value
        return out


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


def preset(dataset: str, dest: str) -> object:
    """The default of flag `dest` for `dataset`."""
    return PRESETS.get(dataset, {}).get(dest, GENERIC[dest])


def _show(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, tuple) else str(value)


@dataclasses.dataclass(frozen=True)
class _Field:
    """One option, as the parser sees it: the field, its flag, its value type."""

    name: str
    meta: Flag
    kind: type
    default: object

    @property
    def spelling(self) -> str:
        return self.meta.flag or "--" + self.name.replace("_", "-")

    @property
    def required(self) -> bool:
        m = self.meta
        return self.default is dataclasses.MISSING and not (m.preset or m.default_from)

    def help_text(self) -> str:
        m = self.meta
        if m.preset:
            per = [f"{n}: {_show(v[self.name])}" for n, v in PRESETS.items() if self.name in v]
            text = f"default {_show(GENERIC[self.name])}"
            return f"{m.help} ({text}; {', '.join(per)})" if per else f"{m.help} ({text})"
        if self.default in (dataclasses.MISSING, None) or self.kind is bool or m.default_from:
            return m.help
        return f"{m.help} (default {_show(self.default)})"


@functools.cache
def fields() -> tuple[_Field, ...]:
    """Every option of `TrainOptions`, in declaration order."""
    hints = typing.get_type_hints(TrainOptions)
    out: list[_Field] = []
    for f in dataclasses.fields(TrainOptions):
        kind = hints[f.name]
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if typing.get_origin(kind) is not tuple and len(args) == 1:
            kind = args[0]  # `X | None` -> X
        out.append(_Field(f.name, f.metadata["flag"], typing.get_origin(kind) or kind, f.default))
    return tuple(out)


METAVARS: dict[type, str] = {int: "N", float: "X", pathlib.Path: "PATH", str: "TEXT"}
"""How `--help` names a value of each type."""

TORCHRUN_FLAGS = tuple(f.name for f in fields() if f.meta.torchrun)
"""Options handed to torchrun unchanged (field names = argparse dests)."""


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `shardrec train`, one per `TrainOptions` field (docs/train.md lists them)."""
    groups = {name: parser.add_argument_group(name) for name in GROUPS}
    for f in fields():
        group, m = groups[f.meta.group], f.meta
        if f.kind is bool:
            action = "store_false" if f.default else "store_true"
            group.add_argument(f.spelling, dest=f.name, action=action, help=m.help)
            continue
        parse = m.parse or f.kind
        metavar = m.metavar or METAVARS.get(f.kind) if m.choices is None else None
        kwargs: dict[str, Any] = {"dest": f.name, "help": f.help_text(), "metavar": metavar}
        if m.choices is not None:
            kwargs["choices"] = m.choices
        if m.repeat:
            kwargs.update(action="append", default=[])
        else:  # the static default; None where a preset or the other options decide
            static = f.default if not (m.preset or m.default_from or f.required) else None
            kwargs["default"] = static
        group.add_argument(f.spelling, type=parse, required=f.required, **kwargs)


def options_from_namespace(ns: argparse.Namespace) -> TrainOptions:
    """The parsed namespace as `TrainOptions`: flags left out take their default, the
    dataset's preset or a value derived from the other options (`number_problems` checks
    the ranges)."""
    values: dict[str, Any] = {}
    for f in fields():
        value = getattr(ns, f.name)
        if f.meta.repeat:
            value = tuple(value)
        elif value is None and f.meta.preset:
            value = preset(ns.dataset, f.name)
        elif value is None and f.meta.default_from is not None:
            value = f.meta.default_from(values)
        elif value is None:
            value = f.default
        values[f.name] = value
    return TrainOptions(**values)


def number_problems(opts: TrainOptions) -> list[str]:
    """Range checks of the numeric options (argparse already checked their syntax), one line
    each, and the shapes of the two MLPs."""
    problems: list[str] = []
    for f in fields():
        value = getattr(opts, f.name)
        if value is None:
            continue
        if f.meta.at_least is not None and value < f.meta.at_least:
            problems.append(f"{f.spelling} must be >= {f.meta.at_least}, got {value}")
        if f.meta.above is not None and not f.meta.above < value < math.inf:
            problems.append(f"{f.spelling} must be a finite number > {f.meta.above:g}, got {value}")
    if opts.dense_arch[-1] != opts.embedding_dim:
        arch = ",".join(map(str, opts.dense_arch))
        problems.append(
            f"--dense-arch {arch} must end with --embedding-dim {opts.embedding_dim} (the dense "
            f"output meets the embeddings in the interaction), e.g. "
            f"{','.join(map(str, [*opts.dense_arch[:-1], opts.embedding_dim]))}"
        )
    if opts.over_arch[-1] != 1:
        arch = ",".join(map(str, opts.over_arch))
        problems.append(f"--over-arch {arch} must end with 1 (one logit per sample)")
    return problems
