"""TorchRec's planner with per-table constraints carrying `CacheParams`, on 2 CPU ranks.

    python -m torch.distributed.run --nproc-per-node 2 \
        examples/torchrec_planner/cache_params_constraints.py

`ParameterConstraints(cache_params=CacheParams(...))` asks for a software-managed cache of the
table's rows in device memory (TorchRec's UVM caching kernels, on GPUs). On CPU the rows already
live in host memory, so the tables train with the plain fused kernel; the plan carries each
table's cache settings (`ParameterSharding.cache_params`), as TorchRec's does. Table `t3` is
also constrained to table-wise sharding.
"""

from __future__ import annotations

import torch.distributed as dist
from _train import BATCH, train

from shardrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
from shardrec.distributed.types import CacheAlgorithm, CacheParams


def main() -> None:
    dist.init_process_group("gloo")
    constraints = {
        "t0": ParameterConstraints(
            cache_params=CacheParams(algorithm=CacheAlgorithm.LRU, load_factor=0.2)
        ),
        "t1": ParameterConstraints(cache_params=CacheParams(algorithm=CacheAlgorithm.LFU)),
        "t3": ParameterConstraints(sharding_types=["table_wise"]),
    }
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=dist.get_world_size(), compute_device="cpu"),
        batch_size=BATCH,
        constraints=constraints,
    )
    train(planner)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
