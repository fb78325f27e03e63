"""The planner prices a dynamic (raw-id) table as its rows plus, per slot, the id map and policy
metadata (docs/dynamic.md), adds a map probe per id to its cost, and says so in the report."""

from __future__ import annotations

import pytest
from torch import nn

from shardrec_embedding import DynamicTableConfig, EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_planner import EmbeddingShardingPlanner, EmbeddingTableSharder, Topology
from shardrec_planner.dynamic_storage import PER_SLOT_BYTES, STAMP_BYTES, dynamic_bytes_per_row
from shardrec_planner.enumerators import EmbeddingEnumerator
from shardrec_planner.report import format_report

ROWS, DIM = 4096, 16


def _config(dynamic: DynamicTableConfig | None) -> EmbeddingBagConfig:
    return EmbeddingBagConfig(
        name="t", embedding_dim=DIM, num_embeddings=ROWS, feature_names=["f"], dynamic=dynamic
    )


class _Model(nn.Module):
    def __init__(self, dynamic: DynamicTableConfig | None) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection([_config(dynamic)], device="meta")


@pytest.mark.parametrize(
    ("dynamic", "expected"),
    [
        # 33 B of per-slot state; 16384 buckets x 16 B (load factor 0.5); no eviction: no stamp
        (DynamicTableConfig(eviction="NONE"), PER_SLOT_BYTES + 16 * 16384 / ROWS),
        # TTL reads last_seen directly: no stamp either
        (DynamicTableConfig(eviction="TTL", ttl_steps=5), PER_SLOT_BYTES + 16 * 16384 / ROWS),
        # LRU (the default) and LFU: plus the one-byte recent-step stamp per slot
        (DynamicTableConfig(), PER_SLOT_BYTES + STAMP_BYTES + 16 * 16384 / ROWS),
        (DynamicTableConfig(eviction="LFU"), PER_SLOT_BYTES + STAMP_BYTES + 16 * 16384 / ROWS),
        # plus the THRESHOLD sketch: 2 x 8192 cells x 8 B
        (
            DynamicTableConfig(admission="THRESHOLD", admission_threshold=2),
            PER_SLOT_BYTES + STAMP_BYTES + (16 * 16384 + 2 * 8 * 8192) / ROWS,
        ),
    ],
    ids=["none", "ttl", "lru", "lfu", "threshold"],
)
def test_bytes_per_slot_formula(dynamic: DynamicTableConfig, expected: float) -> None:
    assert dynamic_bytes_per_row([_config(dynamic)], "t") == pytest.approx(expected)
    assert dynamic_bytes_per_row([_config(None)], "t") == 0.0


def _ddr(dynamic: DynamicTableConfig | None) -> dict[str, int]:
    topology = Topology(world_size=2, compute_device="cpu")
    options = EmbeddingEnumerator(topology, batch_size=64).enumerate(
        _Model(dynamic), [EmbeddingTableSharder(EmbeddingBagCollection)]
    )
    return {
        f"{o.sharding_type}/{o.compute_kernel}": sum(s.storage.ddr for s in o.shards)
        for o in options
    }


def test_enumerator_storage_adds_map_per_slot() -> None:
    static, dyn = _ddr(None), _ddr(DynamicTableConfig())
    per_slot = dynamic_bytes_per_row([_config(DynamicTableConfig())], "t")
    assert static.keys() == dyn.keys()
    for key in static:
        slots = ROWS * (2 if key.startswith("data_parallel") else 1)  # a replica per rank
        assert dyn[key] - static[key] == pytest.approx(per_slot * slots, abs=4), key


def test_planner_prices_memory_and_lookup_and_reports_it() -> None:
    topology = Topology(world_size=2, compute_device="cpu")
    plans = {}
    for kind, dynamic in (("static", None), ("dynamic", DynamicTableConfig())):
        plans[kind] = EmbeddingShardingPlanner(topology=topology, batch_size=64).plan(
            _Model(dynamic), [EmbeddingTableSharder(EmbeddingBagCollection)]
        )
    static, dyn = (plans[k].stats.tables[0] for k in ("static", "dynamic"))  # type: ignore[union-attr]
    assert dyn.memory_bytes > static.memory_bytes
    assert dyn.cost_s > static.cost_s or dyn.sharding_type != static.sharding_type
    assert "dynamic (raw-id)" in format_report(plans["dynamic"])
    assert "dynamic (raw-id)" not in format_report(plans["static"])
