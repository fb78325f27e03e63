"""The generator each test gives table `index` for a sharding type, on `world` ranks.

Shared by test_forward, test_training and test_sequence; the placement itself is
`shardrec_testing.placements`' (the DMP tests use the same one).
"""

from __future__ import annotations

import shardrec_planner
from shardrec_planner import ParameterShardingGenerator
from shardrec_testing.placements import placement_kwargs


def generator_for(
    kind: str, index: int, world: int, kernel: str | None = None
) -> ParameterShardingGenerator:
    kwargs = placement_kwargs(kind, index, world)
    if kind != "data_parallel":  # replicated tables always use the dense kernel
        kwargs["compute_kernel"] = kernel
    generator: ParameterShardingGenerator = getattr(shardrec_planner, kind)(**kwargs)
    return generator
