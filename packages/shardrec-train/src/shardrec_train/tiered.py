"""`shardrec train --tiered`: tables on disk behind a row cache on each rank (docs/tiered.md).

1. which tables: every table, or those with at least `--tiered-min-rows` rows (`tiered_names`);
2. the plan: the planner with each of them constrained to TorchRec's `key_value` kernel and a
   sharding type other than data_parallel (`tier_constraints`), or `--sharding-type` with the
   kernel set to key_value; then every tiered table gets `KeyValueParams(ssd_storage_directory=
   --tiered-store-dir)` (default `OUT/tier-store`; each rank adds `rank-<r>`) and
   `CacheParams(load_factor, algorithm)` (`place_in_tier`). `--tiered-cache-rows N` becomes the
   load factor that gives the table's largest shard N rows;
3. before launch (`flag_problems`, `store_problems`): the flags agree, and the store directory
   can be created, is writable and has the bytes of the tiered tables (rows and optimizer
   state) free, each problem one line;
4. while training (`TierStats`): per table, summed over ranks, since the model was built: hits,
   misses (hit rate), bytes read and written, and the time spent loading rows, split into
   hidden (a background prefetch nobody waited for) and exposed (a forward waited: its own
   loads, or an unfinished prefetch). A lookup serving several tables times them together;
   its time is split over its tables by their share of the rows read.

Checkpoints hold the tiered tables as the in-memory ones (shardrec_dmp streams them from and
into the stores), so `--checkpoint-every` and `--resume` work as without `--tiered`.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from shardrec_collectives import ShardingEnv, all_reduce_sum
from shardrec_data import RecDataset
from shardrec_optim import EmbOptimType, state_shapes
from shardrec_planner import (
    CacheParams,
    KeyValueParams,
    ParameterConstraints,
    ParameterSharding,
    ShardingPlan,
    ShardingType,
)
from shardrec_planner.cache_params import CacheAlgorithm
from shardrec_planner.enums import EmbeddingComputeKernel
from shardrec_sharding import tiered_lookups
from shardrec_tiered import StoreLayout
from shardrec_train.options import TrainOptions

TIERABLE_TYPES = tuple(t.value for t in ShardingType if t is not ShardingType.DATA_PARALLEL)
"""Sharding types a tiered table may take (data_parallel tables use the dense kernel)."""

_FIELDS = ("hits", "misses", "bytes_read", "bytes_written", "hidden_s", "exposed_s")


def store_dir(opts: TrainOptions) -> pathlib.Path:
    """`--tiered-store-dir`, default `OUT/tier-store`."""
    return opts.tiered_store_dir if opts.tiered_store_dir is not None else opts.out / "tier-store"


def auto_tier(opts: TrainOptions, device: torch.device) -> bool:
    """Whether the planner may place tables on the disk tier on its own (when the model does
    not fit in the ranks' memory): on cpu, for tables with dense ids (not `--raw-ids`)."""
    return device.type == "cpu" and not opts.raw_ids


def tiered_names(opts: TrainOptions, tables: Sequence[tuple[str, int]]) -> list[str]:
    """The tables (name, rows) `--tiered` places on disk, in table order."""
    if not opts.tiered:
        return []
    return [name for name, rows in tables if rows >= opts.tiered_min_rows]


def flag_problems(opts: TrainOptions) -> list[str]:
    """The --tiered flags against each other and the rest (no dataset needed)."""
    problems: list[str] = []
    given = [
        flag
        for flag, value, default in (
            ("--tiered-min-rows", opts.tiered_min_rows, 0),
            ("--tiered-cache-rows", opts.tiered_cache_rows, None),
            ("--tiered-cache-fraction", opts.tiered_cache_fraction, 0.2),
            ("--tiered-cache-policy", opts.tiered_cache_policy, "lru"),
            ("--tiered-store-dir", opts.tiered_store_dir, None),
        )
        if value != default
    ]
    if not opts.tiered:
        if given:
            problems.append(f"{', '.join(given)} only apply with --tiered; add --tiered")
        return problems
    if opts.tiered_cache_fraction > 1:
        problems.append(
            f"--tiered-cache-fraction must be at most 1 (the whole shard cached), got "
            f"{opts.tiered_cache_fraction}"
        )
    if opts.sharding_type == ShardingType.DATA_PARALLEL.value:
        problems.append(
            "--tiered with --sharding-type data_parallel: replicated tables train with dense "
            f"gradients and cannot be tiered; use one of {', '.join(TIERABLE_TYPES)}"
        )
    if opts.raw_ids:
        problems.append(
            "--tiered with --raw-ids: raw-id (dynamic) tables cannot be tiered yet; drop one"
        )
    return problems


def table_bytes(opts: TrainOptions, rows: int) -> int:
    """Store bytes of one table of `rows` rows: weights and the optimizer's per-row state."""
    widths = tuple(
        (name, opts.embedding_dim if len(shape) == 2 else 1)
        for name, shape in state_shapes(EmbOptimType(opts.optimizer), 1, opts.embedding_dim).items()
    )
    return StoreLayout(table="t", num_rows=rows, dim=opts.embedding_dim, state=widths).file_bytes


def store_problems(opts: TrainOptions, dataset: RecDataset) -> list[str]:
    """The tiered tables, and a store directory that can hold them (every rank of this
    machine writes its shards under it)."""
    if not opts.tiered:
        return []
    tables = [(f"t_{f.name}", f.num_embeddings) for f in dataset.sparse_features]
    names = tiered_names(opts, tables)
    if not names:
        largest = max((rows for _, rows in tables), default=0)
        return [
            f"--tiered-min-rows {opts.tiered_min_rows}: no table has that many rows (the "
            f"largest has {largest}); lower it or drop it to tier every table"
        ]
    need = sum(table_bytes(opts, rows) for name, rows in tables if name in names)
    where = store_dir(opts)
    existing = where
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return [f"--tiered-store-dir {where}: {existing} is not a directory"]
    if not os.access(existing, os.W_OK | os.X_OK):
        return [
            f"--tiered-store-dir {where}: {existing} is not writable; the tiered tables need "
            f"{need} bytes there"
        ]
    free = shutil.disk_usage(existing).free
    if need > free:
        return [
            f"--tiered-store-dir {where}: {free} bytes free, the tiered tables ({len(names)}, "
            f"rows and optimizer state) need {need} bytes"
        ]
    return []


def tier_constraints(
    opts: TrainOptions, tables: Sequence[tuple[str, int]]
) -> dict[str, ParameterConstraints]:
    """Planner constraints placing the tiered tables on the key_value kernel."""
    return {
        name: ParameterConstraints(
            sharding_types=list(TIERABLE_TYPES), compute_kernels=["key_value"]
        )
        for name in tiered_names(opts, tables)
    }


def place_in_tier(opts: TrainOptions, plan: ShardingPlan, names: Sequence[str]) -> ShardingPlan:
    """`plan` with tables `names` on the key_value kernel, with the store and cache options."""
    policy = CacheAlgorithm.LFU if opts.tiered_cache_policy == "lfu" else CacheAlgorithm.LRU
    kv = KeyValueParams(ssd_storage_directory=str(store_dir(opts)))
    out: dict[str, dict[str, ParameterSharding]] = {}
    for path, module_plan in plan.plan.items():
        tables = dict(module_plan)
        for name in names:
            ps = tables.get(name)
            if ps is None:
                continue
            factor = opts.tiered_cache_fraction
            if opts.tiered_cache_rows is not None:
                largest = max((s.shard_sizes[0] for s in ps.shards), default=1)
                factor = min(1.0, opts.tiered_cache_rows / largest)
            tables[name] = dataclasses.replace(
                ps,
                compute_kernel=EmbeddingComputeKernel.KEY_VALUE,
                key_value_params=kv,
                cache_params=CacheParams(load_factor=factor, algorithm=policy),
            )
        out[path] = tables
    return dataclasses.replace(plan, plan=out)


def cache_error_line(err: Exception) -> str:
    """A cache smaller than one batch's rows of a shard, in the command's terms."""
    return (
        f"shardrec train: error: {err}; with --tiered, raise --tiered-cache-rows or "
        "--tiered-cache-fraction (or lower --batch-size)"
    )


def planned_tiered(plan: ShardingPlan) -> list[str]:
    """The plan's tables on the key_value kernel (the same list on every rank)."""
    return [
        name
        for module_plan in plan.plan.values()
        for name, ps in module_plan.items()
        if ps.compute_kernel is EmbeddingComputeKernel.KEY_VALUE
    ]


class TierStats:
    """The tiered tables' counters, summed over ranks (a collective: every rank calls
    `collect` at the same step). Counts from the moment it is made (the model's build, which
    writes every row once, is not counted)."""

    def __init__(self, model: nn.Module, names: Sequence[str], env: ShardingEnv) -> None:
        self._model, self._names, self._env = model, list(names), env
        self._base = self._local()

    def _local(self) -> torch.Tensor:
        """(tables, fields) of this rank's lookups; time split by each table's share of the
        rows read."""
        out = torch.zeros(len(self._names), len(_FIELDS), dtype=torch.float64)
        index = {n: i for i, n in enumerate(self._names)}
        for lookup in tiered_lookups(self._model):
            stats = lookup.stats()
            misses = sum(s["misses"] for s in stats.values())
            hidden = max(lookup.prefetch_seconds - lookup.exposed_seconds, 0.0)
            exposed = lookup.exposed_seconds + lookup.load_seconds
            for name, s in stats.items():
                if name not in index:
                    continue
                share = s["misses"] / misses if misses else 1.0 / len(stats)
                out[index[name]] = torch.tensor(
                    [
                        s["hits"],
                        s["misses"],
                        s["bytes_read"],
                        s["bytes_written"],
                        hidden * share,
                        exposed * share,
                    ],
                    dtype=torch.float64,
                )
        return out

    def collect(self) -> dict[str, dict[str, float]]:
        """Per tiered table: hits, misses, hit_rate, bytes_read, bytes_written, hidden_s,
        exposed_s (times: seconds summed over ranks)."""
        local = self._local() - self._base
        total = all_reduce_sum(self._env, local).wait()
        out: dict[str, dict[str, float]] = {}
        for name, row in zip(self._names, total.tolist(), strict=True):
            entry = dict(zip(_FIELDS, row, strict=True))
            looked = entry["hits"] + entry["misses"]
            entry["hit_rate"] = entry["hits"] / looked if looked else 0.0
            out[name] = entry
        return out


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def stats_text(stats: Mapping[str, Mapping[str, float]]) -> str:
    """One short field per tiered table for the progress line and the summary:
    `tier user hit 93.1% r 1.2 MiB w 0.8 MiB hidden 0.00 s exposed 0.21 s`."""
    parts = []
    for name, s in stats.items():
        looked = s["hits"] + s["misses"]
        rate = f"{100 * s['hit_rate']:.1f}%" if looked else "-"
        parts.append(
            f"tier {name.removeprefix('t_')} hit {rate} r {_bytes(s['bytes_read'])} "
            f"w {_bytes(s['bytes_written'])} hidden {s['hidden_s']:.2f} s "
            f"exposed {s['exposed_s']:.2f} s"
        )
    return "; ".join(parts)
