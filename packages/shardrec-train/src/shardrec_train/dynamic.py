"""Raw-id (dynamic) tables in `shardrec train`: `--raw-ids` and the `--dynamic-*` flags.

A dataset read with `raw_ids` marks its id features `SparseFeature.raw_ids` (MovieLens: the
user and item ids of the files; Criteo TSV: the hex values). Each such feature's table is a
dynamic table (`shardrec_embedding.dynamic`) of `--dynamic-capacity` slots (default
`--dynamic-headroom` x the ids the dataset names), with the `--dynamic-*` policies.

How a run uses them (`RawIdRemap`): the sharded model holds each dynamic table as an ordinary
table of `capacity` rows; the tables' id maps (`DynamicTables`, one per run, registered on the
model as `raw_id_tables` so that checkpoints carry them) turn each batch's raw ids into slots
before the model sees the batch, one training step per batch (evaluation batches only look
up: unknown ids read a zero row, or the table's default row with `--dynamic-unknown-id
DEFAULT_ROW`... dropped from their bags). A slot the policy frees is reset in the sharded
table (the initializer) and in the fused optimizer state (zeros) before reuse.

Runs on one rank (`--nproc-per-node 1`): the id maps are per process, and sharding them by
the id's hash is the sharded dynamic tables' work (docs/dynamic.md, issue 27).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence

import torch
from torch import nn

from shardrec_data import Batch, SparseFeature
from shardrec_embedding import EmbeddingBagConfig
from shardrec_embedding.dynamic import DynamicTableConfig, DynamicTables, mix64
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import CombinedOptimizer
from shardrec_train.options import TrainOptions

RAW_ID_DATASETS = ("movielens-100k", "criteo-tsv")
"""Datasets with a raw-id mode (`raw_ids=True`)."""

ATTRIBUTE = "raw_id_tables"
"""Name of the `DynamicTables` submodule on the model (its state is in the checkpoints)."""


def dynamic_config(opts: TrainOptions) -> DynamicTableConfig:
    """The `--dynamic-*` policies as a `DynamicTableConfig` (capacity: the table's rows)."""
    return DynamicTableConfig(
        eviction=opts.dynamic_eviction,  # type: ignore[arg-type]  # validated to the enum
        ttl_steps=opts.dynamic_ttl_steps,
        admission=opts.dynamic_admission,  # type: ignore[arg-type]
        admission_threshold=opts.dynamic_admission_threshold,
        admission_probability=opts.dynamic_admission_probability,
        admission_seed=opts.seed,
        unknown_id=opts.dynamic_unknown_id,  # type: ignore[arg-type]
    )


def capacity(opts: TrainOptions, feature: SparseFeature) -> int:
    """Slots of `feature`'s dynamic table."""
    if opts.dynamic_capacity is not None:
        return opts.dynamic_capacity
    return max(1, math.ceil(opts.dynamic_headroom * feature.num_embeddings))


def problems(opts: TrainOptions) -> list[str]:
    """The `--dynamic-*` flags that do not fit together (one line each)."""
    out: list[str] = []
    if opts.dynamic_eviction == "TTL" and opts.dynamic_ttl_steps is None:
        out.append("--dynamic-eviction TTL needs --dynamic-ttl-steps N (steps a row may go unseen)")
    if opts.dynamic_ttl_steps is not None and opts.dynamic_eviction != "TTL":
        out.append(
            f"--dynamic-ttl-steps is for --dynamic-eviction TTL (got {opts.dynamic_eviction})"
        )
    if opts.dynamic_admission_probability > 1:
        out.append(
            "--dynamic-admission-probability must be in (0, 1], got "
            f"{opts.dynamic_admission_probability}"
        )
    if opts.raw_ids and opts.dataset not in RAW_ID_DATASETS:
        out.append(
            f"--raw-ids: dataset {opts.dataset} has no raw ids; datasets with raw ids: "
            f"{', '.join(RAW_ID_DATASETS)}"
        )
    if opts.raw_ids and opts.world_size > 1:
        out.append(
            f"--raw-ids runs on one rank for now (got {opts.world_size} ranks): use "
            "--nproc-per-node 1 (sharded dynamic tables: docs/dynamic.md)"
        )
    return out


def dynamic_table_configs(
    configs: Sequence[EmbeddingBagConfig], features: Sequence[SparseFeature], opts: TrainOptions
) -> tuple[list[EmbeddingBagConfig], list[EmbeddingBagConfig]]:
    """(the model's table configs, the dynamic ones).

    `configs[i]` reads `features[i]`. A raw-id feature's table gets `capacity` rows; the
    model's copy is static (it sees slots), the dynamic copy carries the policies."""
    model: list[EmbeddingBagConfig] = []
    dynamic: list[EmbeddingBagConfig] = []
    policy = dynamic_config(opts)
    for config, feature in zip(configs, features, strict=True):
        if not feature.raw_ids:
            model.append(config)
            continue
        rows = capacity(opts, feature)
        model.append(dataclasses.replace(config, num_embeddings=rows))
        dynamic.append(dataclasses.replace(config, num_embeddings=rows, dynamic=policy))
    return model, dynamic


def table_name(path: str) -> str | None:
    """`...embedding_bags.<table>.weight` -> `<table>`."""
    parts = path.split(".")
    if len(parts) >= 3 and parts[-1] == "weight" and parts[-3] == "embedding_bags":
        return parts[-2]
    return None


def _constant(param: torch.Tensor) -> Callable[[], torch.Tensor]:
    return lambda: param


class RawIdRemap:
    """The run's dynamic tables: raw ids -> slots for each batch, the counters, the resets.

    `tables` is registered on the model (`ATTRIBUTE`) before it is sharded; call `bind` once
    the model is sharded (the rows and optimizer state a freed slot resets)."""

    def __init__(self, configs: Sequence[EmbeddingBagConfig]) -> None:
        self.tables = DynamicTables(configs, owner="shardrec train")
        self._names = [c.name for c in configs]

    def attach(self, model: nn.Module) -> None:
        model.add_module(ATTRIBUTE, self.tables)

    def bind(self, model: nn.Module, optimizer: CombinedOptimizer) -> None:
        """Freed slots reset their row of the sharded table and its fused optimizer state."""
        found = {}
        for path, param in model.named_parameters():
            name = table_name(path)
            if name in self._names:
                found[name] = param
        missing = sorted(set(self._names) - set(found))
        if missing:
            raise RuntimeError(f"shardrec train: dynamic tables {missing} have no weight")
        for name, param in found.items():
            self.tables.bind_weight(name, _constant(param))
        self.tables.track_optimizer(optimizer)

    def batch(self, batch: Batch, *, training: bool) -> Batch:
        """`batch` with the dynamic features' raw ids as slots (one step when training)."""
        remapped = self.tables.remap(
            batch.sparse_features, training=training, owner="shardrec train"
        )
        return Batch(
            dense_features=batch.dense_features,
            sparse_features=remapped.features,
            labels=batch.labels,
        )

    def batches(self, batches: Iterator[Batch], *, training: bool) -> Iterator[Batch]:
        for b in batches:
            yield self.batch(b, training=training)

    def stats(self) -> dict[str, dict[str, int]]:
        """Per table: capacity, occupancy, admissions, rejections, evictions, unknown reads."""
        return self.tables.stats()


class HashTrick:
    """`--raw-id-tables hash`: the baseline a dynamic table replaces. Each raw id reads row
    `mix64(id) mod rows` of an ordinary table (colliding ids share a row); no state."""

    def __init__(self, configs: Sequence[EmbeddingBagConfig]) -> None:
        self._rows = {f: c.num_embeddings for c in configs for f in c.feature_names}

    def batch(self, batch: Batch, *, training: bool) -> Batch:
        kjt = batch.sparse_features
        values = kjt.values().clone()
        opk = kjt.offset_per_key()
        for i, key in enumerate(kjt.keys()):
            rows = self._rows.get(key)
            if rows is not None:
                part = values[opk[i] : opk[i + 1]].to(torch.int64)
                values[opk[i] : opk[i + 1]] = torch.remainder(mix64(part), rows).to(values.dtype)
        features = KeyedJaggedTensor(
            keys=kjt.keys(),
            values=values,
            weights=kjt.weights_or_none(),
            lengths=kjt.lengths(),
            offsets=kjt.offsets(),
            stride=kjt.stride(),
            length_per_key=kjt.length_per_key(),
            offset_per_key=opk,
        )
        return Batch(
            dense_features=batch.dense_features, sparse_features=features, labels=batch.labels
        )

    def batches(self, batches: Iterator[Batch], *, training: bool) -> Iterator[Batch]:
        for b in batches:
            yield self.batch(b, training=training)

    def stats(self) -> dict[str, dict[str, int]]:
        return {}


def progress_text(stats: dict[str, dict[str, int]]) -> str:
    """One short field per table for the progress line: `user 943/1179 +943 -0 x0 ?12`."""
    parts = []
    for name, s in stats.items():
        short = name.removeprefix("t_")
        parts.append(
            f"{short} {s['occupancy']}/{s['capacity']} adm {s['admissions']} "
            f"rej {s['rejections']} ev {s['evictions']} unk {s['unknown_reads']}"
        )
    return "; ".join(parts)
