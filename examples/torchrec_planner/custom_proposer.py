"""TorchRec's planner with a user-written `Proposer`, on 2 CPU ranks.

    python -m torch.distributed.run --nproc-per-node 2 examples/torchrec_planner/custom_proposer.py

`TableWiseProposer` proposes one plan: every table table-wise with its fastest kernel (the
enumerator's estimates). The planner asks it for proposals, its partitioner places them, its
performance model rates them and it tells the proposer how each went (`feedback`).
"""

from __future__ import annotations

import torch.distributed as dist
from _train import BATCH, train

from shardrec.distributed.planner import EmbeddingShardingPlanner, Topology
from shardrec.distributed.planner.types import Proposer, ShardingOption
from shardrec.distributed.planner.types import Topology as StorageTopology


class TableWiseProposer(Proposer):
    """One proposal: each table's fastest table-wise option."""

    def __init__(self) -> None:
        self._proposal: list[ShardingOption] | None = None
        self.ratings: list[float | None] = []

    def load(self, search_space: list[ShardingOption], enumerator: object = None) -> None:
        best: dict[str, ShardingOption] = {}
        for option in search_space:
            if option.sharding_type != "table_wise":
                continue
            if option.fqn not in best or option.total_perf < best[option.fqn].total_perf:
                best[option.fqn] = option
        self._proposal = list(best.values())

    def propose(self) -> list[ShardingOption] | None:
        proposal, self._proposal = self._proposal, None
        return proposal

    def feedback(
        self,
        partitionable: bool,
        plan: list[ShardingOption] | None = None,
        perf_rating: float | None = None,
        storage_constraint: StorageTopology | None = None,
    ) -> None:
        self.ratings.append(perf_rating if partitionable else None)


def main() -> None:
    dist.init_process_group("gloo")
    topology = Topology(world_size=dist.get_world_size(), compute_device="cpu")
    proposer = TableWiseProposer()
    planner = EmbeddingShardingPlanner(topology=topology, batch_size=BATCH, proposer=proposer)
    train(planner)
    if dist.get_rank() == 0:
        asked = planner._num_proposals
        print(f"proposer TableWiseProposer: {asked} proposals, ratings {proposer.ratings}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
