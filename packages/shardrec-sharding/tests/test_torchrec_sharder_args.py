"""TorchRec's sharder constructor and kernel lists, and the clear refusal of a virtual table
with no capacity, all before any collective (a local env with no process group)."""

from __future__ import annotations

import logging

import pytest
import torch

from shardrec_collectives import ShardingEnv
from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
)
from shardrec_planner import (
    BoundsCheckMode,
    ShardingType,
    construct_module_sharding_plan,
    row_wise,
    sharded_kernels,
    table_wise,
)
from shardrec_sharding import (
    EmbeddingBagCollectionSharder,
    EmbeddingCollectionSharder,
    ShardedEmbeddingBagCollection,
)
from shardrec_sharding._assembly import _warn_device_placement
from shardrec_sharding.layout import check_plan

LOCAL = ShardingEnv.from_local(2, 0)


def test_positional_fused_params_and_qcomm_registry() -> None:
    sharder = EmbeddingBagCollectionSharder({"optimizer": "exact_sgd"}, None)
    assert sharder.fused_params == {"optimizer": "exact_sgd"}
    # TorchRec passes {} (or only lookup keys) when the optimizer comes from elsewhere
    assert EmbeddingBagCollectionSharder({}, {}).fused_params == {}
    assert EmbeddingBagCollectionSharder({"cache_load_factor": 0.2}).fused_params is not None
    # A registry is accepted (test_qcomm_sharded.py); a malformed one is refused.
    with pytest.raises(ValueError, match=r"qcomm_codecs_registry: unknown key 'forward'"):
        EmbeddingBagCollectionSharder(None, {"forward": object()})
    with pytest.raises(TypeError, match=r"\['POOLED_EMBEDDINGS_ALL_TO_ALL'\] = 1: expected"):
        EmbeddingBagCollectionSharder(None, {"POOLED_EMBEDDINGS_ALL_TO_ALL": 1})
    with pytest.raises(ValueError, match="unknown fused_params"):
        EmbeddingBagCollectionSharder({"optimizer": "exact_sgd", "nope": 1})


@pytest.mark.parametrize("sharder", [EmbeddingBagCollectionSharder(), EmbeddingCollectionSharder()])
def test_kernel_lists_are_torchrecs(sharder) -> None:  # type: ignore[no-untyped-def]
    for device in ("cpu", "cuda"):
        for st in sharder.sharding_types(device):
            assert sharder.compute_kernels(st, device) == sharded_kernels(st, device)
    assert sharder.compute_kernels("row_wise", "cuda") == [
        "fused",
        "fused_uvm",
        "fused_uvm_caching",
        "key_value",
        "ssd_virtual_table",
        "dram_virtual_table",
    ]
    assert sharder.compute_kernels("row_wise", "cpu") == ["fused"]


def test_virtual_tables_without_a_capacity_are_refused_by_the_sharded_modules() -> None:
    # On the meta device a virtual table with no capacity is kept as declared (the planner
    # plans it); the sharded modules ask for the capacity (shardrec_embedding.virtual).
    space = 1 << 50
    ebc = EmbeddingBagCollection(
        [
            EmbeddingBagConfig(
                name="t", num_embeddings=space, embedding_dim=4, use_virtual_table=True
            )
        ],
        device="meta",
    )
    plan = construct_module_sharding_plan(ebc, {"t": row_wise()}, world_size=2)
    fix = r"pass dynamic=DynamicTableConfig\(capacity=N\) beside it"
    with pytest.raises(
        ValueError, match=rf"table 't': use_virtual_table=True with num_embeddings {space} .*{fix}"
    ):
        ShardedEmbeddingBagCollection(ebc, plan, LOCAL)
    ec = EmbeddingCollection(
        [EmbeddingConfig(name="t", num_embeddings=space, embedding_dim=4, use_virtual_table=True)],
        device="meta",
    )
    ec_plan = construct_module_sharding_plan(ec, {"t": table_wise(rank=0)}, world_size=2)
    with pytest.raises(ValueError, match=fix):
        EmbeddingCollectionSharder().shard(ec, ec_plan, LOCAL)


def test_virtual_tables_with_a_capacity_and_bucketed_plain_tables_pass_the_plan_check() -> None:
    from shardrec_embedding import DynamicTableConfig

    configs = [
        EmbeddingBagConfig(name="v", num_embeddings=1 << 50, embedding_dim=4,
                           use_virtual_table=True, total_num_buckets=4,
                           dynamic=DynamicTableConfig(capacity=8)),
        EmbeddingBagConfig(name="b", num_embeddings=12, embedding_dim=4, total_num_buckets=4),
    ]  # fmt: skip
    ebc = EmbeddingBagCollection(configs)
    runs = {c.name: c for c in ebc.embedding_bag_configs()}
    assert runs["v"].dynamic is not None and runs["v"].num_embeddings == 8
    plan = construct_module_sharding_plan(ebc, {"v": row_wise(), "b": row_wise()}, world_size=2)
    tables = check_plan(ebc.embedding_bag_configs(), plan, 2, list(ShardingType))
    assert [(t.config.name, [s.rows for s in t.shards]) for t in tables] == [
        ("v", [4, 4]),
        ("b", [6, 6]),
    ]


def test_lookup_fused_params_are_named_as_not_applied(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="shardrec_sharding._assembly"):
        EmbeddingBagCollectionSharder(
            {"optimizer": "exact_sgd", "cache_load_factor": 0.2, "stochastic_rounding": True}
        )
    (record,) = caplog.records
    assert "'cache_load_factor': 0.2" in record.getMessage()
    assert "'stochastic_rounding': True" in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="shardrec_sharding._assembly"):
        EmbeddingBagCollectionSharder({"optimizer": "exact_sgd", "stochastic_rounding": False})
        EmbeddingBagCollectionSharder({"bounds_check_mode": BoundsCheckMode.FATAL})
    assert caplog.records == []


def test_uvm_tables_off_the_cpu_are_named_as_device_resident(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ebc = EmbeddingBagCollection(
        [EmbeddingBagConfig(name=n, num_embeddings=10, embedding_dim=4) for n in ("u", "v")]
    )
    plan = construct_module_sharding_plan(
        ebc,
        {"u": row_wise(compute_kernel="fused_uvm_caching"), "v": row_wise()},
        world_size=2,
        device_type="cuda",
    )
    tables = check_plan(ebc.embedding_bag_configs(), plan, 2, list(ShardingType))
    with caplog.at_level(logging.WARNING, logger="shardrec_sharding._assembly"):
        _warn_device_placement(tables, torch.device("cpu"))
        assert caplog.records == []
        _warn_device_placement(tables, torch.device("cuda", 0))
    (record,) = caplog.records
    assert "table 'u': plan kernel fused_uvm_caching runs as fused" in record.getMessage()
    assert "10 x 4 rows" in record.getMessage()
