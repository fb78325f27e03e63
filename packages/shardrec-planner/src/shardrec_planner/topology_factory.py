"""TorchRec's structured way to build a `Topology`: three configs and a factory.

`TopologyFactory.create_topology(trainer_config=, hardware_config=, kernel_config=)` resolves each
`Topology` argument by precedence: what the trainer states (`TrainerConfig`, e.g. a memory
override, a dry run's pretend capacities) over what the hardware reports (`HardwareConfig`), over
TorchRec's defaults (`shardrec_planner.constants`). `KernelConfig` names the compute device and
TorchRec's perf multipliers. Units are TorchRec's: bytes, and bytes per millisecond for rates.

As in TorchRec the configs accept any values when built and are checked by `validate()`, which
the factory calls: a trainer or kernel config that cannot make a topology raises `ValueError`;
hardware readings that look like detection failures (a zero HBM on a GPU, an intra-host link
slower than the network) are logged as one warning, because the trainer's values may override
them. A trainer capacity more than 5% away from the detected one is also logged.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from shardrec_planner.constants import (
    BWD_COMPUTE_MULTIPLIER,
    WEIGHTED_FEATURE_BWD_COMPUTE_MULTIPLIER,
)
from shardrec_planner.topology import Topology
from shardrec_planner.topology_parts import CustomTopologyData, GeneralizedCommsBandwidth

logger = logging.getLogger(__name__)
# TorchRec's `static_logger` (its library logger): here the parent of every planner module's
# logger, so what the planner warns about reaches it.
static_logger = logging.getLogger("shardrec_planner")

# A trainer-given capacity this far from the detected one is probably a stale static config.
CAP_OVERRIDE_THRESHOLD = 0.05
_HBM_DEVICES = ("cuda", "mtia")
_DEVICES = ("cuda", "mtia", "cpu")
# What a KernelConfig passes on to the Topology, under the same names.
_KERNEL_FIELDS = (
    "compute_device",
    "bwd_compute_multiplier",
    "weighted_feature_bwd_compute_multiplier",
    "uneven_sharding_perf_multiplier",
    "generalized_comms_bandwidths",
)
# Rates (bytes/ms) a HardwareConfig may report, under Topology's argument names.
_HARDWARE_RATES = (
    "intra_host_bw",
    "inter_host_bw",
    "hbm_mem_bw",
    "ddr_mem_bw",
    "hbm_to_ddr_mem_bw",
    "ssd_mem_bw",
)


class TopologyConfigBase:
    """What the three configs share: `additional_params`, a free-form dict for extra data (e.g.
    `{"custom_topology_data": CustomTopologyData(...)}`), read with `get_param` / `has_param`."""

    additional_params: dict[str, Any]

    def get_param(self, key: str, default: object = None) -> Any:
        return self.additional_params.get(key, default)

    def has_param(self, key: str) -> bool:
        return key in self.additional_params


@dataclasses.dataclass(frozen=True, kw_only=True)
class _RankCapacities:
    """The per-rank capacities (bytes) that both the hardware and the trainer may give; None =
    not given. The factory takes the trainer's over the hardware's, one by one."""

    hbm_cap_bytes: int | None = None
    ddr_cap_bytes: int | None = None
    ssd_cap_bytes: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class HardwareConfig(TopologyConfigBase, _RankCapacities):
    """What the machines report: capacities per rank (bytes) and rates (bytes/ms); None = not
    detected (the default is used)."""

    intra_host_bw: float | None = None
    inter_host_bw: float | None = None
    hbm_mem_bw: float | None = None
    ddr_mem_bw: float | None = None
    hbm_to_ddr_mem_bw: float | None = None
    ssd_mem_bw: float | None = None
    additional_params: dict[str, Any] = dataclasses.field(default_factory=dict)

    def get_validation_issues(self, compute_device: str | None = None) -> list[str]:
        """Every reading that cannot be right, one line each (empty when all look sane).

        HBM is checked only for devices that have it (`cuda`, `mtia`); DDR must be > 0; SSD
        >= 0 (a host may have none); each rate > 0; the intra-host rate at least the network's.
        """
        issues: list[str] = []
        hbm = self.hbm_cap_bytes
        if hbm is not None and compute_device in _HBM_DEVICES and hbm <= 0:
            issues.append(f"hbm_cap_bytes={hbm} is non-positive")
        if self.ddr_cap_bytes is not None and self.ddr_cap_bytes <= 0:
            issues.append(f"ddr_cap_bytes={self.ddr_cap_bytes} is non-positive")
        if self.ssd_cap_bytes is not None and self.ssd_cap_bytes < 0:
            issues.append(f"ssd_cap_bytes={self.ssd_cap_bytes} is negative")
        for name in _HARDWARE_RATES:
            value = getattr(self, name)
            if value is not None and value <= 0:
                issues.append(f"{name}={value} is non-positive")
        intra, inter = self.intra_host_bw, self.inter_host_bw
        if intra is not None and inter is not None and intra < inter:
            issues.append(
                f"intra_host_bw ({intra:.0f}) < inter_host_bw ({inter:.0f}); the link inside a "
                "host is normally much faster than the network"
            )
        return issues

    def validate(self, compute_device: str | None = None) -> None:
        """Log the issues as one warning; never raises (trainer values may override them)."""
        issues = self.get_validation_issues(compute_device)
        if issues:
            logger.warning("HardwareConfig validation: " + "; ".join(issues))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainerConfig(TopologyConfigBase, _RankCapacities):
    """What the trainer states; it wins over the hardware's readings. A dry run
    (`is_dry_run`) plans for `dry_run_hbm_bytes` / `dry_run_ddr_bytes` instead."""

    world_size: int | None = None
    local_world_size: int | None = None
    is_dry_run: bool = False
    dry_run_hbm_bytes: int | None = None
    dry_run_ddr_bytes: int | None = None
    pod_size: int | None = None
    additional_params: dict[str, Any] = dataclasses.field(default_factory=dict)

    def validate(self) -> None:
        """Raise `ValueError` when no topology can be made from this config."""
        if self.world_size is None:
            raise ValueError("world_size must be provided in TrainerConfig")
        if self.pod_size is not None and self.pod_size > self.world_size:
            raise ValueError(
                f"pod_size ({self.pod_size}) cannot be greater than world_size "
                f"({self.world_size}); a pod is a group of hosts within the job"
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class KernelConfig(TopologyConfigBase):
    """The compute device and TorchRec's perf multipliers. With `use_hardware_based_bandwidth`
    the factory takes the rates the hardware reports; `generalized_comms_bandwidths` replaces
    the two collective rates with a comms model."""

    compute_device: str = "cuda"
    bwd_compute_multiplier: float = BWD_COMPUTE_MULTIPLIER
    weighted_feature_bwd_compute_multiplier: float = WEIGHTED_FEATURE_BWD_COMPUTE_MULTIPLIER
    uneven_sharding_perf_multiplier: float = 1.0
    use_hardware_based_bandwidth: bool = False
    generalized_comms_bandwidths: GeneralizedCommsBandwidth | None = None
    additional_params: dict[str, Any] = dataclasses.field(default_factory=dict)

    def validate(self) -> None:
        """Raise `ValueError` for a compute device a topology cannot have."""
        if self.compute_device not in _DEVICES:
            raise ValueError(
                f"compute_device must be one of {list(_DEVICES)}, got '{self.compute_device}'"
            )


def _first(*values: int | None) -> int | None:
    """The first value given (not None): trainer over hardware."""
    return next((v for v in values if v is not None), None)


def _warn_if_cap_override(name: str, trainer: int | None, hardware: int | None) -> None:
    if trainer is None or hardware is None or hardware <= 0:
        return
    ratio = abs(trainer - hardware) / hardware
    if ratio > CAP_OVERRIDE_THRESHOLD:
        logger.warning(
            f"TopologyFactory: TrainerConfig {name} ({trainer / 1024**3:.1f} GiB) differs from "
            f"HardwareConfig {name} ({hardware / 1024**3:.1f} GiB) by {ratio:.0%}; using the "
            "TrainerConfig value (a static config overriding detected hardware?)"
        )


class TopologyFactory:
    """Builds a `Topology` from the three configs (module docstring: the precedence)."""

    @staticmethod
    def create_topology(
        trainer_config: TrainerConfig,
        hardware_config: HardwareConfig | None = None,
        kernel_config: KernelConfig | None = None,
    ) -> Topology:
        hardware = hardware_config or HardwareConfig()
        kernel = kernel_config or KernelConfig()
        trainer_config.validate()
        hardware.validate(compute_device=kernel.compute_device)
        kernel.validate()
        trainer = trainer_config
        assert trainer.world_size is not None  # checked by validate()
        hbm = _first(trainer.hbm_cap_bytes, hardware.hbm_cap_bytes)
        ddr = _first(trainer.ddr_cap_bytes, hardware.ddr_cap_bytes)
        ssd = _first(trainer.ssd_cap_bytes, hardware.ssd_cap_bytes)
        if trainer.is_dry_run:
            hbm = _first(trainer.dry_run_hbm_bytes, hbm)
            ddr = _first(trainer.dry_run_ddr_bytes, ddr)
        else:
            _warn_if_cap_override("hbm_cap", trainer.hbm_cap_bytes, hardware.hbm_cap_bytes)
            _warn_if_cap_override("ddr_cap", trainer.ddr_cap_bytes, hardware.ddr_cap_bytes)
        custom = trainer.get_param("custom_topology_data")
        if custom is not None and not isinstance(custom, CustomTopologyData):
            raise TypeError(
                "TrainerConfig additional_params['custom_topology_data'] must be a "
                f"CustomTopologyData, got {type(custom).__name__}"
            )
        # Left out, a value takes Topology's default: TorchRec's constants.
        given: dict[str, Any] = {"hbm_cap": hbm, "ddr_cap": ddr, "ssd_cap": ssd}
        given |= {"local_world_size": trainer.local_world_size, "pod_size": trainer.pod_size}
        given |= {name: getattr(kernel, name) for name in _KERNEL_FIELDS}
        if kernel.use_hardware_based_bandwidth:
            given |= {name: getattr(hardware, name) for name in _HARDWARE_RATES}
        given = {name: value for name, value in given.items() if value is not None}
        return Topology(
            world_size=trainer.world_size,
            custom_topology_data=custom,
            created_by_factory=True,
            **given,
        )
