"""Topology's TorchRec arguments, the comms models and TopologyFactory's precedence rules."""

from __future__ import annotations

import logging

import pytest

from shardrec_planner import Topology
from shardrec_planner.constants import (
    CROSS_NODE_BANDWIDTH,
    DDR_MEM_BW,
    HBM_MEM_BW,
    INTRA_NODE_BANDWIDTH,
    SSD_CAP,
)
from shardrec_planner.errors import InvalidValueError
from shardrec_planner.topology_factory import (
    HardwareConfig,
    KernelConfig,
    TopologyFactory,
    TrainerConfig,
)
from shardrec_planner.topology_parts import BasicCommsBandwidths, CustomTopologyData
from shardrec_planner.topology_parts import CollectiveType as Coll
from shardrec_planner.topology_parts import GeneralizedCommsBandwidth as CommsModel

GiB = 1024**3


def test_rates_are_torchrec_per_ms_and_the_cost_model_gets_per_second() -> None:
    topo = Topology(world_size=4, compute_device="cuda", intra_host_bw=300.0, inter_host_bw=20.0)
    assert (topo.intra_host_bw, topo.inter_host_bw) == (300.0, 20.0)
    assert topo.intra_host_bytes_per_s == 300_000.0
    assert topo.inter_host_bytes_per_s == 20_000.0
    default = Topology(world_size=2)
    assert default.intra_host_bw == INTRA_NODE_BANDWIDTH
    assert default.inter_host_bw == CROSS_NODE_BANDWIDTH
    # our lookup rate follows TorchRec's memory rate of the compute device, in bytes/s
    assert default.lookup_bandwidth == pytest.approx(HBM_MEM_BW * 1000)
    cpu = Topology(world_size=2, compute_device="cpu", ddr_cap=GiB, ddr_mem_bw=10.0)
    assert cpu.lookup_bandwidth == pytest.approx(10_000.0)
    assert Topology(world_size=2, compute_device="cpu", ddr_cap=GiB).lookup_bandwidth == (
        pytest.approx(DDR_MEM_BW * 1000)
    )
    assert Topology(world_size=2, hbm_to_ddr_mem_bw=5.0).hbm_to_ddr_bandwidth == 5000.0


def test_generalized_comms_bandwidths_replace_the_two_rates() -> None:
    comms = BasicCommsBandwidths(intra_host_bw=200.0, inter_host_bw=100.0)
    topo = Topology(world_size=2, generalized_comms_bandwidths=comms, intra_host_bw=1.0)
    assert (topo.intra_host_bw, topo.inter_host_bw) == (200.0, 100.0)
    assert topo.comms_bandwidths is comms
    assert isinstance(comms, CommsModel)
    # the default model is the two-rate one, equal to an explicit default BasicCommsBandwidths
    assert Topology(world_size=2).comms_bandwidths == BasicCommsBandwidths()
    # TorchRec's rule: all-reduce at one NIC per rank; others intra-host only within one host
    assert comms.get_bw(8, 16, Coll.ALL_REDUCE) == 800.0
    assert comms.get_bw(8, 8, Coll.ALL_TO_ALL) == 200.0
    assert comms.get_bw(8, 16, Coll.REDUCE_SCATTER) == 100.0
    with pytest.raises(ValueError, match="intra_host_bw must be > 0"):
        BasicCommsBandwidths(intra_host_bw=0.0)


def test_devices_have_torchrec_capacities_and_custom_per_rank_data() -> None:
    topo = Topology(world_size=2, hbm_cap=4 * GiB, ddr_cap=8 * GiB)
    assert [d.storage.ssd for d in topo.devices] == [SSD_CAP, SSD_CAP]
    custom = CustomTopologyData(
        data={"hbm_cap": [2 * GiB, 6 * GiB], "ssd_cap": [0, 5]}, world_size=2
    )
    topo = Topology(world_size=2, custom_topology_data=custom, hbm_cap=80 * GiB)
    assert [d.storage.hbm for d in topo.devices] == [2 * GiB, 6 * GiB]
    assert [d.storage.ssd for d in topo.devices] == [0, 5]
    # our search plans against the smallest rank
    assert topo.device_memory == 2 * GiB
    cpu = Topology(world_size=2, compute_device="cpu", ddr_cap=GiB, custom_topology_data=custom)
    assert [d.storage.hbm for d in cpu.devices] == [0, 0]  # a cpu rank has no HBM


@pytest.mark.parametrize(
    ("data", "world_size", "message"),
    [
        ({"hbm": [1, 2]}, 2, r"keys \['hbm'\] are not supported"),
        ({"hbm_cap": [1]}, 2, "has 1 values for world_size 2"),
        ({"ddr_cap": [1, -1]}, 2, "must be >= 0"),
    ],
)
def test_bad_custom_topology_data(
    data: dict[str, list[int]], world_size: int, message: str
) -> None:
    with pytest.raises(InvalidValueError, match=message):
        CustomTopologyData(data=data, world_size=world_size)


def test_custom_data_for_another_world_size_is_refused() -> None:
    custom = CustomTopologyData(data={"hbm_cap": [1, 2, 3]}, world_size=3)
    with pytest.raises(ValueError, match="custom_topology_data is for world_size 3"):
        Topology(world_size=2, custom_topology_data=custom)


def test_host_larger_than_the_job_and_pods() -> None:
    topo = Topology(world_size=2, local_world_size=8)
    assert topo.local_world_size == 8  # as given (TorchRec's value)
    assert (topo.local_size, topo.num_hosts) == (2, 1)  # both ranks on one host
    assert Topology(world_size=16, local_world_size=8, pod_size=2).intra_group_size == 16
    with pytest.raises(ValueError, match="pod_size=3 must be between 1 and world_size=2"):
        Topology(world_size=2, pod_size=3)
    with pytest.raises(ValueError, match="local_world_size 3 must be >= 1 and divide"):
        Topology(world_size=4, local_world_size=3)


def test_configs_validate() -> None:
    assert HardwareConfig().get_validation_issues(compute_device="cuda") == []
    issues = HardwareConfig(
        hbm_cap_bytes=0, ddr_cap_bytes=-1, ssd_cap_bytes=0
    ).get_validation_issues(compute_device="cuda")
    assert [i.split("=")[0] for i in issues] == ["hbm_cap_bytes", "ddr_cap_bytes"]
    assert HardwareConfig(hbm_cap_bytes=0).get_validation_issues(compute_device="cpu") == []
    assert (
        "inter_host_bw"
        in HardwareConfig(intra_host_bw=1.0, inter_host_bw=2.0).get_validation_issues()[0]
    )
    with pytest.raises(ValueError, match="world_size must be provided"):
        TrainerConfig().validate()
    with pytest.raises(
        ValueError, match=r"pod_size \(16\) cannot be greater than world_size \(8\)"
    ):
        TrainerConfig(world_size=8, pod_size=16).validate()
    with pytest.raises(ValueError, match="compute_device must be one of"):
        KernelConfig(compute_device="tpu").validate()
    assert TrainerConfig(additional_params={"k": 1}).get_param("k") == 1


def test_factory_precedence_trainer_then_hardware_then_defaults(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hardware = HardwareConfig(hbm_cap_bytes=80 * GiB, ddr_cap_bytes=512 * GiB, ssd_cap_bytes=GiB)
    topo = TopologyFactory.create_topology(
        trainer_config=TrainerConfig(world_size=4, local_world_size=2, hbm_cap_bytes=79 * GiB),
        hardware_config=hardware,
    )
    assert topo.created_by_factory and topo._created_by_factory
    assert (topo.world_size, topo.local_world_size) == (4, 2)
    storage = topo.devices[3].storage
    assert (storage.hbm, storage.ddr, storage.ssd) == (79 * GiB, 512 * GiB, GiB)
    # rates: TorchRec's defaults unless the kernel config asks for the hardware's
    assert (topo.hbm_mem_bw, topo.intra_host_bw) == (HBM_MEM_BW, INTRA_NODE_BANDWIDTH)
    measured = TopologyFactory.create_topology(
        trainer_config=TrainerConfig(world_size=2),
        hardware_config=HardwareConfig(hbm_mem_bw=7.0, intra_host_bw=9.0, inter_host_bw=3.0),
        kernel_config=KernelConfig(use_hardware_based_bandwidth=True, bwd_compute_multiplier=3.0),
    )
    assert (measured.hbm_mem_bw, measured.intra_host_bw, measured.inter_host_bw) == (7.0, 9.0, 3.0)
    assert measured.bwd_compute_multiplier == 3.0
    dry = TopologyFactory.create_topology(
        trainer_config=TrainerConfig(
            world_size=2, hbm_cap_bytes=80 * GiB, is_dry_run=True, dry_run_hbm_bytes=GiB
        ),
    )
    assert dry.devices[0].storage.hbm == GiB
    with caplog.at_level(logging.WARNING, logger="shardrec_planner"):
        TopologyFactory.create_topology(
            trainer_config=TrainerConfig(world_size=2, ddr_cap_bytes=100 * GiB),
            hardware_config=HardwareConfig(ddr_cap_bytes=200 * GiB),
        )
    assert "TrainerConfig ddr_cap (100.0 GiB) differs from HardwareConfig ddr_cap" in caplog.text
    with pytest.raises(ValueError, match="compute_device must be one of"):
        TopologyFactory.create_topology(
            trainer_config=TrainerConfig(world_size=2),
            kernel_config=KernelConfig(compute_device="x"),
        )
