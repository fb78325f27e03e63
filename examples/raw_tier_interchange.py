"""A raw-id table trained in memory, moved into a raw-id tier (rows behind a cache), and back.

One process (gloo): a dynamic table planned `fused` (in memory) trains a few steps and is
saved with `shardrec_dmp.save`; the same model planned `ssd_virtual_table` (RocksDB, when
shardrec-kvstore is installed; else `dram_virtual_table`) with a cache of 4 rows loads that
checkpoint: every held id's row and optimizer state goes into the store. The tier is saved
and loaded back into the in-memory table: every id keeps its vector.

Run: ``python examples/raw_tier_interchange.py`` (docs/tiered.md, "In memory <-> raw-id tier").
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import socket
import tempfile

import torch
import torch.distributed as dist

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel, load, save
from shardrec_embedding import DynamicTableConfig, EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import (
    KeyValueParams,
    ShardingPlan,
    construct_module_sharding_plan,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder

USERS = torch.tensor([-7_263_115_903_442_100_001, 2**62 + 5, 17, -1, 2**40 + 3, 99, -(2**50), 8])
TIER = "ssd_virtual_table" if importlib.util.find_spec("shardrec_kvstore") else "dram_virtual_table"


class Model(torch.nn.Module):
    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection([
            EmbeddingBagConfig(name="user", num_embeddings=capacity, embedding_dim=8,
                               feature_names=["u"], weight_init_min=-0.1, weight_init_max=0.1,
                               dynamic=DynamicTableConfig()),
        ])  # fmt: skip

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        return self.sparse(kjt).values().pow(2).sum()


def wrap(kernel: str, capacity: int, store: str) -> DistributedModelParallel:
    model = Model(capacity)
    plan = construct_module_sharding_plan(
        model.sparse, {"user": table_wise(rank=0, compute_kernel=kernel)}, world_size=1
    )
    plan["user"] = dataclasses.replace(
        plan["user"], key_value_params=KeyValueParams(ssd_storage_directory=store)
    )
    return DistributedModelParallel(
        model,
        env=ShardingEnv.from_process_group(dist.group.WORLD),
        plan=ShardingPlan(plan={"sparse": plan}),
        sharders=[EmbeddingBagCollectionSharder(
            fused_params={"optimizer": "exact_row_wise_adagrad", "learning_rate": 0.1})],
    )  # fmt: skip


def vectors(dmp: DistributedModelParallel) -> dict[int, torch.Tensor]:
    """raw id -> row of every id the table holds (the tier's store, or the in-memory slots)."""
    part = dmp.sharded_modules["sparse"].dynamic_tables.table("user")  # type: ignore[union-attr]
    cache = getattr(part, "cache", None)
    if cache is not None:
        from shardrec_tiered.raw_checkpoint import store_ids

        ids = store_ids(cache)
        rows = torch.from_numpy(cache.store.read(ids.numpy()))[:, :8]
        return dict(zip(ids.tolist(), rows, strict=True))
    ids, slots = part.items()
    weight = dmp.sharded_modules["sparse"].embedding_bags["user"].weight.detach()  # type: ignore[index]
    return dict(zip(ids.tolist(), weight[slots].clone(), strict=True))


def main(tmp: str) -> None:
    memory = wrap("fused", 100, f"{tmp}/unused")
    for step in range(3):
        ids = USERS[
            torch.randint(0, len(USERS), (6,), generator=torch.Generator().manual_seed(step))
        ]
        kjt = KeyedJaggedTensor(["u"], ids, lengths=torch.full((3,), 2))
        memory(kjt).backward()
    save(f"{tmp}/memory", memory, {"fused": memory.fused_optimizer})
    tier = wrap(TIER, 4, f"{tmp}/store")  # a cache of 4 rows, every id in the store
    load(f"{tmp}/memory", tier, {"fused": tier.fused_optimizer})
    trained = vectors(memory)
    moved = vectors(tier)
    assert moved.keys() == trained.keys()
    assert all(torch.equal(moved[i], trained[i]) for i in trained)
    print(f"{TIER}: all {len(trained)} ids in the store with their trained rows")
    save(f"{tmp}/tier", tier, {"fused": tier.fused_optimizer})
    back = wrap("fused", 100, f"{tmp}/unused")
    load(f"{tmp}/tier", back, {"fused": back.fused_optimizer})
    returned = vectors(back)
    assert returned.keys() == trained.keys()
    assert all(torch.equal(returned[i], trained[i]) for i in trained)
    print(f"back in memory: all {len(trained)} ids kept their vectors")


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = str(s.getsockname()[1])
    os.environ.update(MASTER_ADDR="localhost", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=0, world_size=1)
    with tempfile.TemporaryDirectory() as tmp:
        main(tmp)
    dist.destroy_process_group()
