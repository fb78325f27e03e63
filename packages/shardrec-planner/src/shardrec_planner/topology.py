"""The cluster a plan is for: ranks, hosts, memory per rank and the cost model's bandwidths."""

from __future__ import annotations

import dataclasses
import functools
import math
import pathlib

from shardrec_planner.calibration import Calibration
from shardrec_planner.constants import (
    BWD_COMPUTE_MULTIPLIER,
    CROSS_NODE_BANDWIDTH,
    DDR_MEM_BW,
    HBM_MEM_BW,
    HBM_TO_DDR_MEM_BW,
    INTRA_NODE_BANDWIDTH,
    SSD_CAP,
    SSD_MEM_BW,
    WEIGHTED_FEATURE_BWD_COMPUTE_MULTIPLIER,
)
from shardrec_planner.hashing import hash_sha256_to_int, topology_hash_components
from shardrec_planner.host import HostInfo, detect_host
from shardrec_planner.planner_types import DeviceHardware, Perf, Storage
from shardrec_planner.topology_parts import (
    BasicCommsBandwidths,
    CustomTopologyData,
    GeneralizedCommsBandwidth,
)

GiB = 1024**3
MS_PER_S = 1000

# Defaults for a GPU cluster (the numbers TorchRec uses). A calibration file measured on the real
# machines replaces the lookup and collective rates: see `Topology.from_calibration`. On cpu the
# memory cap is this host's memory shared by its ranks instead of DEFAULT_DDR_CAP (`host`).
DEFAULT_HBM_CAP = 32 * GiB
DEFAULT_DDR_CAP = 128 * GiB
DEFAULT_UVM_CACHE_RATIO = 0.2

_DEVICES = ("cpu", "cuda", "mtia")
# TorchRec's rates, bytes per millisecond (TorchRec's unit, kept so its values mean the same here).
_RATES_PER_MS = (
    "hbm_mem_bw",
    "ddr_mem_bw",
    "ssd_mem_bw",
    "hbm_to_ddr_mem_bw",
    "intra_host_bw",
    "inter_host_bw",
)
_MULTIPLIERS = (
    "bwd_compute_multiplier",
    "weighted_feature_bwd_compute_multiplier",
    "uneven_sharding_perf_multiplier",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Topology:
    """World size, ranks per host, memory per rank (bytes) and bandwidths.

    TorchRec's arguments, in TorchRec's units: capacities `hbm_cap`, `ddr_cap`, `ssd_cap` (bytes
    per rank; `custom_topology_data` gives each rank its own), `pod_size` (hosts per NVLink
    domain), rates `hbm_mem_bw`, `ddr_mem_bw`, `ssd_mem_bw`, `hbm_to_ddr_mem_bw`,
    `intra_host_bw`, `inter_host_bw` in bytes per millisecond (`generalized_comms_bandwidths`
    replaces the last two), TorchRec's perf multipliers, and `created_by_factory` (set by
    `TopologyFactory`; shardrec does not warn on direct construction, its documented way).
    `local_world_size` defaults to world_size (one host), as in TorchRec; a host larger than the
    job (`local_world_size > world_size`) means every rank is on one host.

    Our cost model's own rates, bytes per second: `lookup_bw` (the rate an embedding lookup
    reads rows on the compute device) defaults to `hbm_mem_bw` (cuda, mtia) or `ddr_mem_bw`
    (cpu), `hbm_to_ddr_bw` (a GPU reading host memory, UVM kernels) to `hbm_to_ddr_mem_bw`,
    and collectives run at `intra_host_bw` / `inter_host_bw`, all converted from per-ms;
    `uvm_cache_ratio` of a cached UVM table's rows sit on the device. The disk tier (tiered
    `key_value` tables, disk_tier.py): `ssd_cap` bytes of disk per rank (TorchRec's 2 TiB
    default) and `disk_bw`, the bytes per second a rank reads and writes rows at random on it
    (default `ssd_mem_bw` converted). `from_calibration` fills them from a measurement.

    On cpu, `ddr_cap` left out is the host's memory divided by its ranks: `host` when given,
    else `detect_host()` (this machine's RAM, capped by a container limit), so a plan on a
    23 GiB machine is not checked against TorchRec's 128 GiB GPU-host default. `host` is kept
    only when it set the cap (the report prints it). With `custom_topology_data` our search
    plans every rank against the smallest rank's capacity (its caps are uniform); `devices`
    keeps each rank's own.
    """

    world_size: int
    compute_device: str = "cuda"
    local_world_size: int | None = None
    hbm_cap: int | None = None
    ddr_cap: int | None = None
    ssd_cap: int | None = None
    pod_size: int | None = None
    hbm_mem_bw: float = HBM_MEM_BW
    ddr_mem_bw: float = DDR_MEM_BW
    ssd_mem_bw: float = SSD_MEM_BW
    hbm_to_ddr_mem_bw: float = HBM_TO_DDR_MEM_BW
    intra_host_bw: float = INTRA_NODE_BANDWIDTH
    inter_host_bw: float = CROSS_NODE_BANDWIDTH
    bwd_compute_multiplier: float = BWD_COMPUTE_MULTIPLIER
    custom_topology_data: CustomTopologyData | None = None
    weighted_feature_bwd_compute_multiplier: float = WEIGHTED_FEATURE_BWD_COMPUTE_MULTIPLIER
    uneven_sharding_perf_multiplier: float = 1.0
    generalized_comms_bandwidths: GeneralizedCommsBandwidth | None = None
    created_by_factory: bool = False
    lookup_bw: float | None = None
    hbm_to_ddr_bw: float | None = None
    disk_bw: float | None = None
    uvm_cache_ratio: float = DEFAULT_UVM_CACHE_RATIO
    host: HostInfo | None = None

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")
        if self.compute_device not in _DEVICES:
            raise ValueError(
                f"compute_device {self.compute_device!r} is not one of {list(_DEVICES)}"
            )
        local = self.world_size if not self.local_world_size else self.local_world_size
        if local < 1 or (local < self.world_size and self.world_size % local != 0):
            raise ValueError(
                f"local_world_size {local} must be >= 1 and divide world_size {self.world_size} "
                "(or be at least world_size: every rank on one host)"
            )
        object.__setattr__(self, "local_world_size", local)
        if self.pod_size is not None and not 1 <= self.pod_size <= self.world_size:
            raise ValueError(
                f"pod_size={self.pod_size} must be between 1 and world_size={self.world_size}"
            )
        comms = self.generalized_comms_bandwidths
        if comms is not None:
            object.__setattr__(self, "intra_host_bw", float(comms.intra_host_bw))
            object.__setattr__(self, "inter_host_bw", float(comms.inter_host_bw))
        self._init_caps(local)
        if self.lookup_bw is None:
            per_ms = self.ddr_mem_bw if self.compute_device == "cpu" else self.hbm_mem_bw
            object.__setattr__(self, "lookup_bw", per_ms * MS_PER_S)
        if self.hbm_to_ddr_bw is None:
            object.__setattr__(self, "hbm_to_ddr_bw", self.hbm_to_ddr_mem_bw * MS_PER_S)
        if self.disk_bw is None:
            object.__setattr__(self, "disk_bw", self.ssd_mem_bw * MS_PER_S)
        for field in (
            "hbm_cap",
            "ddr_cap",
            "lookup_bw",
            "hbm_to_ddr_bw",
            "disk_bw",
            *_RATES_PER_MS,
        ):
            value = getattr(self, field)
            if not value > 0 or not math.isfinite(value):
                raise ValueError(f"{field} must be > 0, got {value!r} (a finite number)")
        for field in _MULTIPLIERS:
            value = getattr(self, field)
            if not value >= 0 or not math.isfinite(value):
                raise ValueError(f"{field} must be >= 0, got {value!r} (a finite number)")
        ssd = self.ssd_cap
        assert ssd is not None  # set by _init_caps
        if not ssd >= 0:
            raise ValueError(f"ssd_cap must be >= 0 bytes, got {ssd!r}")
        if not 0.0 <= self.uvm_cache_ratio <= 1.0:
            raise ValueError(f"uvm_cache_ratio must be in [0, 1], got {self.uvm_cache_ratio}")

    def _init_caps(self, local: int) -> None:
        """Set the scalar caps: the per-rank data's smallest value, else as given, else the
        defaults."""
        custom = self.custom_topology_data
        if custom is not None:
            if custom.world_size != self.world_size:
                raise ValueError(
                    f"custom_topology_data is for world_size {custom.world_size}, the topology "
                    f"has {self.world_size}; give one value per rank"
                )
            for key in CustomTopologyData.supported_fields:
                if custom.has_data(key):  # over the scalar, as in TorchRec
                    object.__setattr__(self, key, min(custom.get_data(key)))
        if self.hbm_cap is None:
            object.__setattr__(self, "hbm_cap", DEFAULT_HBM_CAP)
        if self.ssd_cap is None:
            object.__setattr__(self, "ssd_cap", SSD_CAP)
        if self.ddr_cap is None and self.compute_device == "cpu":
            host = self.host or detect_host()
            object.__setattr__(self, "host", host)
            per_rank = min(local, self.world_size)
            object.__setattr__(self, "ddr_cap", max(1, host.memory_bytes // per_rank))
        else:
            object.__setattr__(self, "host", None)
        if self.ddr_cap is None:
            object.__setattr__(self, "ddr_cap", DEFAULT_DDR_CAP)

    @functools.cached_property
    def devices(self) -> list[DeviceHardware]:
        """TorchRec's per-rank view: each rank's storage (bytes) and the perf placed on it.

        A mutable list, made once per topology: TorchRec's storage reservations return a copy
        whose ranks have less storage. An accelerator rank has `hbm_cap` of HBM, a cpu rank
        none; every rank has `ddr_cap` of host memory and `ssd_cap` of disk, or its own value
        from `custom_topology_data`.
        """
        n = self.world_size
        hbm = [0 if self.compute_device == "cpu" else int(self.hbm_cap or 0)] * n
        ddr = [int(self.ddr_cap or 0)] * n
        ssd = [int(self.ssd_cap or 0)] * n
        custom = self.custom_topology_data
        if custom is not None:
            if custom.has_data("hbm_cap") and self.compute_device != "cpu":
                hbm = custom.get_data("hbm_cap")
            ddr = custom.get_data("ddr_cap") if custom.has_data("ddr_cap") else ddr
            ssd = custom.get_data("ssd_cap") if custom.has_data("ssd_cap") else ssd
        return [
            DeviceHardware(
                rank=rank,
                storage=Storage(hbm=hbm[rank], ddr=ddr[rank], ssd=ssd[rank]),
                perf=Perf(fwd_compute=0, fwd_comms=0, bwd_compute=0, bwd_comms=0),
            )
            for rank in range(n)
        ]

    @property
    def local_size(self) -> int:
        """Ranks per host this job uses: `local_world_size`, at most `world_size`."""
        assert self.local_world_size is not None  # set in __post_init__
        return min(self.local_world_size, self.world_size)

    @property
    def intra_group_size(self) -> int:
        """Ranks joined by the fast intra-host link: `pod_size` hosts of `local_world_size`."""
        assert self.local_world_size is not None  # set in __post_init__
        return self.local_world_size * (self.pod_size or 1)

    @property
    def comms_bandwidths(self) -> GeneralizedCommsBandwidth:
        """The comms model (bytes/ms): the one given, else the two-rate model of this topology."""
        if self.generalized_comms_bandwidths is not None:
            return self.generalized_comms_bandwidths
        return BasicCommsBandwidths(
            intra_host_bw=self.intra_host_bw, inter_host_bw=self.inter_host_bw
        )

    @property
    def intra_host_bytes_per_s(self) -> float:
        """Our cost model's intra-host collective rate, bytes per second."""
        return self.intra_host_bw * MS_PER_S

    @property
    def inter_host_bytes_per_s(self) -> float:
        """Our cost model's cross-host collective rate, bytes per second."""
        return self.inter_host_bw * MS_PER_S

    @property
    def _created_by_factory(self) -> bool:
        """TorchRec's attribute name for `created_by_factory`."""
        return self.created_by_factory

    def _hash(self) -> int:
        """A hash of this topology stable across processes and machines (TorchRec's
        `Topology._hash`): its fields and every rank's exact storage, SHA-256 based."""
        return hash_sha256_to_int(topology_hash_components(self, round_unit=None))

    @property
    def num_hosts(self) -> int:
        return self.world_size // self.local_size

    @property
    def device_memory(self) -> int:
        """Bytes one rank can hold tables in: HBM on accelerators, DDR on cpu."""
        cap = self.ddr_cap if self.compute_device == "cpu" else self.hbm_cap
        assert cap is not None  # set in __post_init__
        return cap

    @property
    def host_memory(self) -> float:
        """Bytes of host memory per rank that UVM kernels may use (0 on cpu: no separate tier)."""
        if self.compute_device == "cpu":
            return 0.0
        assert self.ddr_cap is not None  # set in __post_init__
        return float(self.ddr_cap)

    def memory_text(self) -> str:
        """Where the per-rank memory cap comes from, for the plan report."""
        cap = self.device_memory
        if self.host is not None:
            host = self.host
            return (
                f"memory per rank: {cap / GiB:.1f} GiB = host memory {host.memory_bytes / GiB:.1f} "
                f"GiB ({host.source}; {host.cores} cores) / {self.local_size} ranks per host; "
                "override with Topology(ddr_cap=...)"
            )
        kind = "ddr_cap" if self.compute_device == "cpu" else "hbm_cap"
        return f"memory per rank: {cap / GiB:.1f} GiB ({kind})"

    @property
    def lookup_bandwidth(self) -> float:
        assert self.lookup_bw is not None  # set in __post_init__
        return self.lookup_bw

    @property
    def hbm_to_ddr_bandwidth(self) -> float:
        """Bytes per second a GPU reads host memory at (UVM kernels)."""
        assert self.hbm_to_ddr_bw is not None  # set in __post_init__
        return self.hbm_to_ddr_bw

    @property
    def disk_bandwidth(self) -> float:
        """Bytes per second a rank reads or writes rows of a tiered table's store at."""
        assert self.disk_bw is not None  # set in __post_init__
        return self.disk_bw

    @property
    def disk_cap(self) -> float:
        """Bytes of disk per rank for tiered tables' stores (`ssd_cap`)."""
        assert self.ssd_cap is not None  # set in __post_init__
        return float(self.ssd_cap)

    @staticmethod
    def from_calibration(
        calibration: Calibration | str | pathlib.Path,
        *,
        world_size: int,
        compute_device: str | None = None,
        local_world_size: int | None = None,
        hbm_cap: int | None = None,
        ddr_cap: int | None = None,
        ssd_cap: int | None = None,
    ) -> Topology:
        """A topology whose bandwidths are the measured ones (a `Calibration` or its JSON file).

        A calibration that measured the disk (`calibrate(disk_dir=...)`) sets `disk_bw` and,
        unless `ssd_cap` is given, the disk per rank: the free space it found shared by the
        host's ranks.

        A single-machine calibration measures no cross-host link, so `inter_host_bw` is the
        measured intra-host rate unless the file states one. The file is in bytes per second;
        the topology's collective rates are TorchRec's bytes per millisecond.
        """
        cal = calibration if isinstance(calibration, Calibration) else Calibration.load(calibration)
        if ssd_cap is None and cal.disk_free_bytes is not None:
            ranks = min(local_world_size or world_size, world_size)
            ssd_cap = max(1, cal.disk_free_bytes // ranks)
        return Topology(
            world_size=world_size,
            compute_device=compute_device or cal.compute_device,
            local_world_size=local_world_size,
            hbm_cap=hbm_cap,
            ddr_cap=ddr_cap,
            ssd_cap=ssd_cap,
            lookup_bw=cal.lookup_bw,
            disk_bw=cal.disk_bw,
            intra_host_bw=cal.intra_host_bw / MS_PER_S,
            inter_host_bw=cal.inter_host_bw / MS_PER_S,
        )
