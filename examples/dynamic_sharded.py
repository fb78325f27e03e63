"""Raw-id (dynamic) tables sharded over two processes, checkpointed, and loaded into one.

Two ranks (gloo) train an EmbeddingBagCollection whose `user` table takes raw 64-bit ids
and whose `item` table takes raw ids admitted on their 2nd sighting, through
`DistributedModelParallel` with the planner's plan (`user` constrained to row_wise: each rank
owns the ids of its hash part and its row block's slots); they save a DCP
checkpoint; then one process loads it (the ids re-partitioned by their hash) and checks that
every saved id kept its vector.

Run: ``python examples/dynamic_sharded.py`` (docs/dynamic.md, "Sharding" and "Checkpoints").
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel, load, save
from shardrec_embedding import (
    DynamicTableConfig,
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    dynamic_table_stats,
)
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_sharding.dynamic import DynamicShardedEmbeddingBagCollection

USERS = torch.tensor([-7_263_115_903_442_100_001, 2**62 + 5, 17, -1, 2**40 + 3, 99])


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(
            [
                EmbeddingBagConfig(
                    name="user", num_embeddings=1000, embedding_dim=16, feature_names=["user_id"],
                    dynamic=DynamicTableConfig(eviction="LRU"),
                ),
                EmbeddingBagConfig(
                    name="item", num_embeddings=1000, embedding_dim=16, feature_names=["item_id"],
                    dynamic=DynamicTableConfig(admission="THRESHOLD", admission_threshold=2),
                ),
            ]
        )  # fmt: skip

    def forward(self, kjt: KeyedJaggedTensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.sparse(kjt).values()
        return out.pow(2).sum(), out


def batch(rank: int, step: int) -> KeyedJaggedTensor:
    g = torch.Generator().manual_seed(100 * rank + step)
    users = USERS[torch.randint(0, len(USERS), (4,), generator=g)]
    items = torch.randint(-(2**63), 2**63 - 1, (4,), generator=g) % 7  # raw ids, few distinct
    return KeyedJaggedTensor(
        keys=["user_id", "item_id"],
        values=torch.cat([users, items]),
        lengths=torch.ones(8, dtype=torch.int32),  # batch of 4
    )


def wrap(pg: dist.ProcessGroup) -> DistributedModelParallel:
    """The model sharded by the planner, `user` constrained to row_wise."""
    model, world = Model(), dist.get_world_size(pg)
    sharders = [
        EmbeddingBagCollectionSharder(
            fused_params={"optimizer": "exact_row_wise_adagrad", "learning_rate": 0.1}
        )
    ]
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=world, compute_device="cpu"),
        constraints={"user": ParameterConstraints(sharding_types=["row_wise"])},
    )
    plan = planner.collective_plan(model, sharders, pg)
    return DistributedModelParallel(
        model, env=ShardingEnv.from_process_group(pg), plan=plan, sharders=sharders
    )


def vectors(dmp: DistributedModelParallel) -> dict[int, torch.Tensor]:
    """raw user id -> its row, of the user ids this rank's map holds."""
    sharded = next(m for m in dmp.modules() if isinstance(m, DynamicShardedEmbeddingBagCollection))
    if "user" not in sharded.embedding_bags:
        return {}  # the table lives on another rank
    ids, slots = sharded.dynamic_tables.table("user").items()
    weight = sharded.embedding_bags["user"].weight.detach()
    return dict(zip(ids.tolist(), weight[slots].clone(), strict=True))


def train_and_save(rank: int, port: str, path: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    dmp = wrap(dist.group.WORLD)
    kinds = {t: p.sharding_type.value for t, p in dmp.plan.plan["sparse"].items()}
    for step in range(3):
        loss, _ = dmp(batch(rank, step))
        loss.backward()
        dmp.fused_optimizer.step()
    print(f"rank {rank} {kinds}: {dynamic_table_stats(dmp)}")
    save(path, dmp, {"fused": dmp.fused_optimizer})
    torch.save(vectors(dmp), f"{out}.{rank}")
    dist.destroy_process_group()


def load_on_one(path: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT=free_port())
    dist.init_process_group("gloo", rank=0, world_size=1)
    dmp = wrap(dist.group.WORLD)
    load(path, dmp, {"fused": dmp.fused_optimizer})  # ids re-partitioned by their hash
    saved = {**torch.load(f"{out}.0"), **torch.load(f"{out}.1")}
    loaded = vectors(dmp)
    assert loaded.keys() == saved.keys()
    assert all(torch.equal(loaded[i], saved[i]) for i in saved)
    print(f"1 rank: all {len(saved)} user ids kept their vectors")
    dist.destroy_process_group()


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return str(s.getsockname()[1])


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        ckpt, vecs = os.path.join(tmp, "ckpt"), os.path.join(tmp, "vectors")
        mp.spawn(train_and_save, args=(free_port(), ckpt, vecs), nprocs=2)
        load_on_one(ckpt, vecs)
    sys.exit(0)
