"""Raw-id (dynamic) tables in `shardrec train`: `--raw-ids` and the `--dynamic-*` flags.

A dataset read with `raw_ids` marks its id features `SparseFeature.raw_ids` (MovieLens: the
user and item ids of the files; Criteo TSV: the hex values). Each such feature's table is a
dynamic table (`shardrec_embedding.dynamic`) of `--dynamic-capacity` slots (default
`--dynamic-headroom` x the ids the dataset names), with the `--dynamic-*` policies.

How a run uses them: the model's EmbeddingBagCollection is built with the dynamic configs, so
the planner costs them as dynamic tables and DistributedModelParallel shards them as such
(`shardrec_sharding.dynamic`): the sharded collection maps raw ids itself, row_wise tables by
the id's hash (each rank owns a part of the id space and of the slots), table_wise on the
table's rank, column_wise / data_parallel with a replicated map. One step of each table per
training batch; evaluation (the model in `eval()`) only looks up. The id maps are in the
model's state, so checkpoints and `--resume` carry them (`shardrec_dmp.checkpoint_dynamic`).

`DynamicStats` adds each table's counters over the ranks (every rank calls it together),
for the progress line, the evaluation lines and the summary that rank 0 prints.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence

import torch
from torch import nn

from shardrec_collectives import ShardingEnv, all_reduce_sum
from shardrec_data import Batch, SparseFeature
from shardrec_embedding import EmbeddingBagConfig
from shardrec_embedding.dynamic import DynamicTable, DynamicTableConfig, DynamicTables, mix64
from shardrec_jagged import KeyedJaggedTensor
from shardrec_sharding.dynamic import ShardedDynamicTable
from shardrec_train.options import TrainOptions

RAW_ID_DATASETS = ("movielens-100k", "criteo-tsv")
"""Datasets with a raw-id mode (`raw_ids=True`)."""


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
    return out


def dynamic_table_configs(
    configs: Sequence[EmbeddingBagConfig], features: Sequence[SparseFeature], opts: TrainOptions
) -> tuple[list[EmbeddingBagConfig], list[EmbeddingBagConfig]]:
    """(the model's table configs, the raw-id features' configs among them).

    `configs[i]` reads `features[i]`. A raw-id feature's table gets `capacity` rows and, with
    `--raw-id-tables dynamic`, the `--dynamic-*` policies (`hash`: an ordinary table that the
    hash trick's rows index)."""
    model: list[EmbeddingBagConfig] = []
    raw: list[EmbeddingBagConfig] = []
    policy = dynamic_config(opts) if opts.raw_id_tables == "dynamic" else None
    for config, feature in zip(configs, features, strict=True):
        if not feature.raw_ids:
            model.append(config)
            continue
        table = dataclasses.replace(config, num_embeddings=capacity(opts, feature), dynamic=policy)
        model.append(table)
        raw.append(table)
    return model, raw


def _dynamic_tables(model: nn.Module) -> list[DynamicTable]:
    return [
        t
        for m in model.modules()
        if isinstance(m, DynamicTables)
        for t in m.tables.values()
        if isinstance(t, DynamicTable)
    ]


class DynamicStats:
    """The counters of the model's dynamic tables, added over the ranks.

    Each rank's `ShardedDynamicTable` counts its part: a partitioned (row_wise, table_wise)
    table's counters add up over its owners (its steps are counted by every owner: taken
    from the first), a replicated one's are the same on every replica (taken from rank 0).
    `stats()` is one all-reduce: every rank of `env` calls it at the same point."""

    def __init__(self, model: nn.Module, env: ShardingEnv) -> None:
        self._tables = _dynamic_tables(model)
        self._env = env

    def __bool__(self) -> bool:
        return bool(self._tables)

    def _counts(self, table: DynamicTable) -> list[int]:
        stats = table.stats()
        rank = self._env.rank
        if isinstance(table, ShardedDynamicTable) and not table.routing.replicated:
            owners = table.routing.owners
            mine = [stats[k] if rank in owners else 0 for k in STAT_KEYS]
            if owners and rank != owners[0]:
                mine[STAT_KEYS.index("steps")] = 0
            return mine
        return [stats[k] if rank == 0 else 0 for k in STAT_KEYS]

    def stats(self) -> dict[str, dict[str, int]]:
        """Per table: capacity, occupancy, admissions, rejections, evictions, unknown reads,
        steps (the whole table's, over all ranks)."""
        if not self._tables:
            return {}
        local = torch.tensor([self._counts(t) for t in self._tables], dtype=torch.int64)
        total = all_reduce_sum(self._env, local.to(self._env.device)).wait().cpu()
        return {
            t.name: dict(zip(STAT_KEYS, (int(v) for v in row), strict=True))
            for t, row in zip(self._tables, total, strict=True)
        }


STAT_KEYS = (
    "capacity",
    "occupancy",
    "admissions",
    "rejections",
    "evictions",
    "unknown_reads",
    "steps",
)
"""The counters of `DynamicTable.stats()` that `shardrec train` reports."""


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
    """One short field per table for the progress line:
    `user 943/1179 adm 943 rej 0 ev 0 unk 12` (occupancy/capacity, admissions, rejections,
    evictions, unknown-id reads)."""
    parts = []
    for name, s in stats.items():
        short = name.removeprefix("t_")
        parts.append(
            f"{short} {s['occupancy']}/{s['capacity']} adm {s['admissions']} "
            f"rej {s['rejections']} ev {s['evictions']} unk {s['unknown_reads']}"
        )
    return "; ".join(parts)
