"""The machine a CPU plan runs on: its memory and cores, as the operating system reports them.

A CPU rank keeps its tables in host memory, so the planner's per-rank cap on CPU is this
host's memory shared by its ranks (`Topology` derives it; `Topology(ddr_cap=...)` or
`Topology(host=HostInfo(...))` overrides it for a machine other than this one).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

_CGROUP_LIMITS = (
    pathlib.Path("/sys/fs/cgroup/memory.max"),  # cgroup v2
    pathlib.Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class HostInfo:
    """One machine: `memory_bytes` of RAM its processes may use, `cores` they may run on.

    `source` says where the numbers came from (`"detected"` by `detect_host`, `"given"`
    otherwise); the plan report prints it.
    """

    memory_bytes: int
    cores: int
    source: str = "given"

    def __post_init__(self) -> None:
        if self.memory_bytes < 1:
            raise ValueError(f"HostInfo.memory_bytes must be >= 1, got {self.memory_bytes}")
        if self.cores < 1:
            raise ValueError(f"HostInfo.cores must be >= 1, got {self.cores}")


def _cgroup_limit() -> int | None:
    """The container's memory limit in bytes, when one is set (`max` or absent: None)."""
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            return int(text)
    return None


def detect_host() -> HostInfo:
    """This machine: physical memory (capped by a container's cgroup limit) and the cores this
    process may run on (its CPU affinity)."""
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    limit = _cgroup_limit()
    memory = min(physical, limit) if limit is not None else physical
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    return HostInfo(memory_bytes=memory, cores=cores, source="detected")
