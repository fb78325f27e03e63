"""TorchRec 1.8 names around the estimators, against TorchRec's documented formulas by hand: the
perf-estimator registry, `compute_storage_usage` by storage-usage type, the perf's input-dist and
prefetch terms, bucketed row-wise shards, and TorchRec's default pooling factors."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
import torch
from _planner_models import make_ebc, sharder, table_info
from hypothesis import given, settings
from hypothesis import strategies as st

from shardrec_planner import CacheParams, ParameterConstraints, Shard, ShardingOption, Topology
from shardrec_planner.cache_params import MultiPassPrefetchConfig
from shardrec_planner.constants import CROSS_NODE_BANDWIDTH, HBM_TO_DDR_MEM_BW
from shardrec_planner.constraints import DefaultPoolingFactors
from shardrec_planner.enumerators import EmbeddingEnumerator, bucketed_row_shards
from shardrec_planner.estimator import Workload
from shardrec_planner.perf_estimator_factory import (
    DEFAULT_PERF_ESTIMATOR,
    EmbeddingPerfEstimatorFactory,
)
from shardrec_planner.shard_perf import EmbeddingPerfEstimator
from shardrec_planner.shard_storage import (
    EmbeddingStorageEstimator,
    PipelineType,
    StorageUsageType,
    compute_storage_usage,
)

TOPO = Topology(world_size=4, compute_device="cuda", local_world_size=2)


def test_factory_builds_registered_estimators() -> None:
    est = EmbeddingPerfEstimatorFactory.create(DEFAULT_PERF_ESTIMATOR, topology=TOPO)
    assert isinstance(est, EmbeddingPerfEstimator)

    class Mine:
        def __init__(self, topology: Topology, constraints: object, is_inference: bool) -> None:
            self.args = (topology, constraints, is_inference)

        def estimate(self, options: object, sharder_map: object = None) -> None:
            return None

    EmbeddingPerfEstimatorFactory.register("mine", Mine)
    try:
        made = EmbeddingPerfEstimatorFactory.create("mine", topology=TOPO, is_inference=True)
        assert made.args == (TOPO, None, True)
        assert "mine" in EmbeddingPerfEstimatorFactory.names()
    finally:
        EmbeddingPerfEstimatorFactory._registry.pop("mine")
    with pytest.raises(ValueError, match=r"no perf estimator registered as 'nope'.*'default'"):
        EmbeddingPerfEstimatorFactory.create("nope", topology=TOPO)
    with pytest.raises(TypeError, match="no estimate"):
        EmbeddingPerfEstimatorFactory.register("bad", int)


@pytest.mark.parametrize(
    ("device", "kernel", "usage", "tier", "extra"),
    [
        ("cuda", "fused", StorageUsageType.DEFAULT, "hbm", 0),
        ("cuda", "fused", StorageUsageType.BASE, "hbm", 0),
        ("cpu", "fused", StorageUsageType.BASE, "ddr", 0),
        ("cuda", "fused_uvm", StorageUsageType.BASE, "ddr", 0),
        ("cuda", "fused", StorageUsageType.BASE_QUANT, "hbm", 4),
        ("cuda", "quant_uvm", StorageUsageType.BASE_QUANT, "ddr", 4),
        ("tpu", "fused", StorageUsageType.DEFAULT, "hbm", 0),
    ],
)
def test_compute_storage_usage(
    device: str, kernel: str, usage: StorageUsageType, tier: str, extra: int
) -> None:
    t = torch.zeros(30, 6, dtype=torch.float16)
    assert compute_storage_usage(t, device, kernel, usage) == {tier: 30 * 6 * 2 + 30 * extra}


@pytest.mark.parametrize("st", ["table_wise", "row_wise"])
def test_input_dist_comms_by_hand(st: str) -> None:
    # 50 x 16 table, batch 10, pooling 2: 20 ids per rank; every id of the 4 ranks crosses the
    # input all-to-all once at 8 bytes, over the cross-host link (4 ranks, 2 per host).
    model = make_ebc([("t", 50, 16)])
    cons = {"t": ParameterConstraints(pooling_factors=[2.0])}
    enum = EmbeddingEnumerator(topology=TOPO, batch_size=10, constraints=cons)
    (option,) = enum.enumerate(model, [sharder(sharding_types=[st], compute_kernels=["fused"])])
    for shard in option.shards:
        assert shard.perf is not None
        assert shard.perf.input_dist_comms == pytest.approx(20 * 4 * 8 / CROSS_NODE_BANDWIDTH)
        assert shard.perf.prefetch_compute == 0.0


class _Stats:
    expected_lookups = 1000
    cacheability = 0.5

    def expected_miss_rate(self, clf: float) -> float:
        return 1.0 - clf


def test_prefetch_compute_by_hand() -> None:
    # fetched rows = expected_lookups * miss_rate(load factor) = 1000 * 0.75, divided over the
    # 4 row-wise shards, each row dim 16 x 4 bytes over the host-to-device link.
    model = make_ebc([("t", 50, 16)])
    cons = {
        "t": ParameterConstraints(
            compute_kernels=["fused_uvm_caching"],
            cache_params=CacheParams(load_factor=0.25, stats=_Stats()),
        )
    }
    enum = EmbeddingEnumerator(topology=TOPO, batch_size=10, constraints=cons)
    kernels = ["fused_uvm_caching"]
    (option,) = enum.enumerate(
        model, [sharder(sharding_types=["row_wise"], compute_kernels=kernels)]
    )
    for shard in option.shards:
        assert shard.perf is not None
        assert shard.perf.prefetch_compute == pytest.approx(750 / 4 * 16 * 4 / HBM_TO_DDR_MEM_BW)


@pytest.mark.parametrize(
    ("rows", "buckets", "world", "sizes"),
    [
        (100, 10, 8, [20, 20, 10, 10, 10, 10, 10, 10]),  # 10 buckets of 10 rows over 8 ranks
        (120, 4, 4, [30, 30, 30, 30]),
    ],
)
def test_bucketed_row_shards_take_whole_buckets(
    rows: int, buckets: int, world: int, sizes: list[int]
) -> None:
    shards = bucketed_row_shards(rows, 8, buckets, world)
    assert [s.size for s in shards] == [[n, 8] for n in sizes]
    assert [s.offset for s in shards] == [[sum(sizes[:r]), 0] for r in range(world)]
    with pytest.raises(ValueError, match="must be >= 1 and divide"):
        bucketed_row_shards(rows + 1, 8, buckets, world)


def test_fewer_buckets_than_ranks_are_refused() -> None:
    # TorchRec 1.8 refuses them too (a bucket cannot be split across ranks)
    with pytest.raises(ValueError, match=r"'t': total_num_buckets 2 is less than the world size 4"):
        bucketed_row_shards(60, 8, 2, 4, "t")


def test_default_pooling_factors() -> None:
    c = ParameterConstraints()
    assert isinstance(c.pooling_factors, DefaultPoolingFactors)
    assert list(c.pooling_factors) == [1.0]  # TorchRec's default
    # Our planner reads the default as 1.0 for each feature of the table.
    table = table_info(9, 4, ("a", "b", "c"))
    default = Workload.of(table, c, 8)
    explicit = Workload.of(table, ParameterConstraints(pooling_factors=[1.0, 1.0, 1.0]), 8)
    assert default == explicit == Workload(ids_local=24.0, bags_local=24.0, weighted=False)
    # and joins no length check: per-feature num_poolings alone are fine
    ParameterConstraints(num_poolings=[1.0, 2.0])
    with pytest.raises(ValueError, match="equal lengths"):
        ParameterConstraints(pooling_factors=[1.0], num_poolings=[1.0, 2.0])
    assert math.isclose(sum(ParameterConstraints().pooling_factors or []), 1.0)


def test_multipass_prefetch_shrinks_the_prefetch_buffer() -> None:
    # TorchRec's prefetch pipeline keeps 3 input copies plus (1 + 6 / passes) prefetched inputs
    # of a cached table on the device: more passes, less memory.
    model = make_ebc([("t", 50, 16)])

    def hbm(passes: int) -> int:
        cons = {
            "t": ParameterConstraints(
                compute_kernels=["fused_uvm_caching"],
                cache_params=CacheParams(
                    load_factor=0.5,
                    multipass_prefetch_config=MultiPassPrefetchConfig(num_passes=passes),
                ),
            )
        }
        storage = EmbeddingStorageEstimator(
            topology=TOPO, constraints=cons, pipeline_type=PipelineType.TRAIN_PREFETCH_SPARSE_DIST
        )
        enum = EmbeddingEnumerator(
            topology=TOPO, batch_size=10, constraints=cons, estimator=[storage]
        )
        kernels = ["fused_uvm_caching"]
        (option,) = enum.enumerate(
            model, [sharder(sharding_types=["table_wise"], compute_kernels=kernels)]
        )
        assert option.shards[0].storage is not None
        return option.shards[0].storage.hbm

    inputs = 10 * 4 * 8  # 10 ids a rank (pooling 1.0), 4 ranks, 8 bytes
    assert hbm(1) - hbm(6) == int((1 + 6 / 1) * inputs) - int((1 + 6 / 6) * inputs)
    with pytest.raises(ValueError, match="num_passes must be an int >= 1, got 0"):
        MultiPassPrefetchConfig(num_passes=0)


def _one_option() -> ShardingOption:
    model = make_ebc([("t", 50, 16)])
    enum = EmbeddingEnumerator(topology=TOPO, batch_size=10, estimator=[_NoEstimate()])
    (option,) = enum.enumerate(
        model, [sharder(sharding_types=["table_wise"], compute_kernels=["fused"])]
    )
    return option


class _NoEstimate:
    def estimate(self, options: object, sharder_map: object = None) -> None:
        return None


def test_sharder_data_map_stands_in_for_the_sharders() -> None:
    # TorchRec 1.8 passes per-module-type data (fused_params, storage usage type) instead of
    # the sharders; BASE_QUANT adds 4 bytes a row of the table on the device.
    estimator = EmbeddingStorageEstimator(topology=TOPO)
    hbm = {}
    for usage in (StorageUsageType.DEFAULT, StorageUsageType.BASE_QUANT):
        option = _one_option()
        data = types.SimpleNamespace(fused_params={}, storage_usage_type=usage)
        estimator.estimate([option], sharder_data_map={option.module_type_key: data})
        assert option.shards[0].storage is not None
        hbm[usage] = option.shards[0].storage.hbm
    assert hbm[StorageUsageType.BASE_QUANT] - hbm[StorageUsageType.DEFAULT] == 50 * 4


def test_an_empty_table_is_refused_with_its_shape() -> None:
    option = ShardingOption(
        name="t",
        tensor=torch.zeros(50, 0, device="meta"),
        module=("", make_ebc([("t", 50, 16)])),
        input_lengths=[1.0],
        batch_size=10,
        sharding_type="table_wise",
        partition_by="device",
        compute_kernel="fused",
        shards=[Shard(size=[50, 0], offset=[0, 0])],
    )
    for estimator in (EmbeddingStorageEstimator(topology=TOPO), EmbeddingPerfEstimator(TOPO)):
        with pytest.raises(ValueError, match=r"'t' has no elements .*tensor.shape=\(50, 0\)"):
            estimator.estimate([option], {option.module_type_key: sharder()})


@settings(max_examples=60, deadline=None)
@given(buckets=st.integers(1, 40), per_bucket=st.integers(1, 7), world=st.integers(1, 12))
def test_bucketed_row_shards_match_an_even_split_of_the_buckets(
    buckets: int, per_bucket: int, world: int
) -> None:
    # reference: numpy's even split of the bucket ids over the ranks (first ranks larger)
    world = min(world, buckets)  # fewer buckets than ranks: refused (above)
    parts = np.array_split(np.arange(buckets), world)
    shards = bucketed_row_shards(buckets * per_bucket, 3, buckets, world)
    assert [s.size[0] for s in shards] == [len(p) * per_bucket for p in parts]
    assert [s.offset[0] for s in shards] == [
        int(p[0]) * per_bucket if len(p) else buckets * per_bucket for p in parts
    ]
