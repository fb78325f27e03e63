"""The cluster a plan is for: ranks, hosts, memory per rank and the cost model's bandwidths."""

from __future__ import annotations

import dataclasses
import functools
import pathlib

from shardrec_planner.calibration import Calibration
from shardrec_planner.host import HostInfo, detect_host
from shardrec_planner.planner_types import DeviceHardware, Perf, Storage

GiB = 1024**3

# Defaults for a GPU cluster (the numbers TorchRec uses), in bytes per second. A calibration file
# measured on the real machines replaces them: see `Topology.from_calibration`. On cpu the
# memory cap is this host's memory shared by its ranks instead of DEFAULT_DDR_CAP (`host`).
DEFAULT_HBM_CAP = 32 * GiB
DEFAULT_DDR_CAP = 128 * GiB
DEFAULT_HBM_MEM_BW = 897 * GiB
DEFAULT_DDR_MEM_BW = 51 * GiB
DEFAULT_INTRA_HOST_BW = 600 * GiB
DEFAULT_INTER_HOST_BW = 12.5 * GiB
DEFAULT_HBM_TO_DDR_BW = 32 * GiB
DEFAULT_UVM_CACHE_RATIO = 0.2

_DEVICES = ("cpu", "cuda", "mtia")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Topology:
    """World size, ranks per host, memory per rank (bytes) and bandwidths (bytes/s).

    `lookup_bw` is the rate an embedding lookup reads rows on the compute device (HBM for cuda,
    DDR for cpu); `intra_host_bw` / `inter_host_bw` the per-rank rate of collectives inside a host
    and across hosts; `hbm_to_ddr_bw` the rate a GPU reads host memory (UVM kernels), of which
    `uvm_cache_ratio` of the rows are cached on the device. None means the device's default;
    `from_calibration` fills them from a measurement. `local_world_size` defaults to world_size
    (one host), as in TorchRec.

    On cpu, `ddr_cap` left out is the host's memory divided by its ranks: `host` when given,
    else `detect_host()` (this machine's RAM, capped by a container limit), so a plan on a
    23 GiB machine is not checked against TorchRec's 128 GiB GPU-host default. `host` is kept
    only when it set the cap (the report prints it).
    """

    world_size: int
    compute_device: str = "cuda"
    local_world_size: int | None = None
    hbm_cap: int | None = None
    ddr_cap: int | None = None
    lookup_bw: float | None = None
    intra_host_bw: float = DEFAULT_INTRA_HOST_BW
    inter_host_bw: float = DEFAULT_INTER_HOST_BW
    hbm_to_ddr_bw: float = DEFAULT_HBM_TO_DDR_BW
    uvm_cache_ratio: float = DEFAULT_UVM_CACHE_RATIO
    host: HostInfo | None = None

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")
        if self.compute_device not in _DEVICES:
            raise ValueError(
                f"compute_device {self.compute_device!r} is not one of {list(_DEVICES)}"
            )
        local = self.world_size if self.local_world_size is None else self.local_world_size
        if local < 1 or self.world_size % local != 0:
            raise ValueError(
                f"local_world_size {local} must be >= 1 and divide world_size {self.world_size}"
            )
        object.__setattr__(self, "local_world_size", local)
        if self.hbm_cap is None:
            object.__setattr__(self, "hbm_cap", DEFAULT_HBM_CAP)
        if self.ddr_cap is None and self.compute_device == "cpu":
            host = self.host or detect_host()
            object.__setattr__(self, "host", host)
            object.__setattr__(self, "ddr_cap", max(1, host.memory_bytes // local))
        else:
            object.__setattr__(self, "host", None)
        if self.ddr_cap is None:
            object.__setattr__(self, "ddr_cap", DEFAULT_DDR_CAP)
        if self.lookup_bw is None:
            bw = DEFAULT_DDR_MEM_BW if self.compute_device == "cpu" else DEFAULT_HBM_MEM_BW
            object.__setattr__(self, "lookup_bw", bw)
        fields = (
            "hbm_cap",
            "ddr_cap",
            "lookup_bw",
            "intra_host_bw",
            "inter_host_bw",
            "hbm_to_ddr_bw",
        )
        for field in fields:
            value = getattr(self, field)
            if not value > 0:
                raise ValueError(f"{field} must be > 0, got {value!r}")
        if not 0.0 <= self.uvm_cache_ratio <= 1.0:
            raise ValueError(f"uvm_cache_ratio must be in [0, 1], got {self.uvm_cache_ratio}")

    @functools.cached_property
    def devices(self) -> list[DeviceHardware]:
        """TorchRec's per-rank view: each rank's storage (bytes) and the perf placed on it.

        A mutable list, made once per topology: TorchRec's storage reservations return a copy
        whose ranks have less storage. An accelerator rank has `hbm_cap` of HBM and `ddr_cap`
        of host memory; a cpu rank has no HBM.
        """
        hbm = 0 if self.compute_device == "cpu" else int(self.hbm_cap or 0)
        return [
            DeviceHardware(
                rank=rank,
                storage=Storage(hbm=hbm, ddr=int(self.ddr_cap or 0)),
                perf=Perf(fwd_compute=0, fwd_comms=0, bwd_compute=0, bwd_comms=0),
            )
            for rank in range(self.world_size)
        ]

    @property
    def local_size(self) -> int:
        """Ranks per host."""
        assert self.local_world_size is not None  # set in __post_init__
        return self.local_world_size

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

    @staticmethod
    def from_calibration(
        calibration: Calibration | str | pathlib.Path,
        *,
        world_size: int,
        compute_device: str | None = None,
        local_world_size: int | None = None,
        hbm_cap: int | None = None,
        ddr_cap: int | None = None,
    ) -> Topology:
        """A topology whose bandwidths are the measured ones (a `Calibration` or its JSON file).

        A single-machine calibration measures no cross-host link, so `inter_host_bw` is the
        measured intra-host rate unless the file states one.
        """
        cal = calibration if isinstance(calibration, Calibration) else Calibration.load(calibration)
        return Topology(
            world_size=world_size,
            compute_device=compute_device or cal.compute_device,
            local_world_size=local_world_size,
            hbm_cap=hbm_cap,
            ddr_cap=ddr_cap,
            lookup_bw=cal.lookup_bw,
            intra_host_bw=cal.intra_host_bw,
            inter_host_bw=cal.inter_host_bw,
        )
