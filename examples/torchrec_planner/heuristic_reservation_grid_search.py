"""TorchRec's planner with a storage reservation and a grid-search proposer, on 2 CPU ranks.

    python -m torch.distributed.run --nproc-per-node 2 \
        examples/torchrec_planner/heuristic_reservation_grid_search.py

`HeuristicalStorageReservation(percentage=0.15)` keeps 15% of each rank's memory plus the dense
part of the model and the batches' ids back from the tables; `GridSearchProposer` proposes
every combination of the tables' options and the planner keeps the placed one the performance
model rates best. Rank 0 prints how many proposals it rated, the plan, and the loss.
"""

from __future__ import annotations

import torch.distributed as dist
from _train import BATCH, train

from shardrec.distributed.planner import EmbeddingShardingPlanner, Topology
from shardrec.distributed.planner.proposers import GridSearchProposer
from shardrec.distributed.planner.storage_reservations import HeuristicalStorageReservation


def main() -> None:
    dist.init_process_group("gloo")
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=dist.get_world_size(), compute_device="cpu"),
        batch_size=BATCH,
        storage_reservation=HeuristicalStorageReservation(percentage=0.15),
        proposer=GridSearchProposer(),
    )
    train(planner)
    if dist.get_rank() == 0:
        print(f"proposer GridSearchProposer: {planner._num_proposals} proposals, "
              f"{planner._num_plans} placed")  # fmt: skip
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
