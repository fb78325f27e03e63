"""The `Topology` a planner gets when it is given none: TorchRec's, from the environment.

World size: the default process group's size, else `WORLD_SIZE`. Ranks per host:
`LOCAL_WORLD_SIZE` (or an MPI launcher's equivalent) when it divides the world size, else the
world size. Compute device: `cuda` when a GPU is available, else `cpu`. Hosts per pod:
`TOPOLOGY_DOMAIN_MULTIPLE` when set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch

from shardrec_collectives import get_local_size
from shardrec_collectives.job import job_world_size
from shardrec_planner.topology import Topology

__all__ = ["topology_from_environment"]


def topology_from_environment(*, environ: Mapping[str, str] | None = None) -> Topology:
    """TorchRec's default topology (see the module docstring)."""
    env = os.environ if environ is None else environ
    world_size = job_world_size(environ=env)
    pod = env.get("TOPOLOGY_DOMAIN_MULTIPLE")
    return Topology(
        world_size=world_size,
        local_world_size=get_local_size(world_size, environ=env),
        compute_device="cuda" if torch.cuda.is_available() else "cpu",
        pod_size=int(pod) if pod is not None and pod.isdigit() and int(pod) > 0 else None,
    )
