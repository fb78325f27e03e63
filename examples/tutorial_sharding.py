"""Sharding: the same tables split four ways across two processes, each checked exactly.

TorchRec's sharding journey on shardrec: two ranks (processes on this machine, gloo), a planner
told which sharding type each table may use (`ParameterConstraints`), `collective_plan` so that
every rank holds the same plan, and `DistributedModelParallel` to shard by it. Each rank then
feeds its own batch and compares the sharded output with the plain collection's on that batch.

- table_wise: each table whole on one rank;
- row_wise: each table's rows split in blocks, one block per rank;
- column_wise: each table's embedding columns in slices, each slice placed on one rank (at 32
  columns the planner keeps one slice per table);
- table_row_wise: row blocks over the ranks of one host (here: both ranks).

Run: ``python examples/tutorial_sharding.py`` (starts 2 processes; docs/sharding-types.md draws
each type; ``SHARDREC_EXAMPLE_DEVICE=cuda``: one GPU per rank over NCCL, 2 GPUs).
"""

from __future__ import annotations

import copy
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import shardrec as torchrec
from shardrec.distributed import DistributedModelParallel
from shardrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from shardrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
from shardrec.distributed.types import ShardingEnv

WORLD_SIZE = 2
DEVICE_TYPE = os.environ.get("SHARDREC_EXAMPLE_DEVICE", "cpu")
SHARDING_TYPES = ["table_wise", "row_wise", "column_wise", "table_row_wise"]


def tables() -> list[torchrec.EmbeddingBagConfig]:
    """Two large and two small tables, 32 numbers per row."""
    sizes = {"large_0": 2048, "large_1": 2048, "small_0": 256, "small_1": 256}
    return [
        torchrec.EmbeddingBagConfig(name=name, embedding_dim=32, num_embeddings=rows,
                                    feature_names=[f"f_{name}"])
        for name, rows in sizes.items()
    ]  # fmt: skip


def batch_for(rank: int) -> torchrec.KeyedJaggedTensor:
    """Eight examples with 0..2 ids per feature; different on each rank."""
    g = torch.Generator().manual_seed(100 + rank)
    configs = tables()
    lengths = torch.randint(0, 3, (len(configs) * 8,), generator=g)
    per_feature = lengths.view(len(configs), 8).sum(1).tolist()
    values = torch.cat([
        torch.randint(0, t.num_embeddings, (n,), generator=g)
        for t, n in zip(configs, per_feature, strict=True)
    ])  # fmt: skip
    keys = [t.feature_names[0] for t in configs]
    return torchrec.KeyedJaggedTensor(keys=keys, values=values, lengths=lengths)


def run_rank(rank: int, port: str) -> None:
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = port
    device = torch.device("cuda", rank) if DEVICE_TYPE == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=WORLD_SIZE)
    pg = dist.group.WORLD
    for sharding_type in SHARDING_TYPES:
        torch.manual_seed(0)  # the same initial tables on every rank
        module = torchrec.EmbeddingBagCollection(tables=tables())
        plain = copy.deepcopy(module)
        constraints = {t.name: ParameterConstraints(sharding_types=[sharding_type])
                       for t in tables()}  # fmt: skip
        planner = EmbeddingShardingPlanner(
            topology=Topology(world_size=WORLD_SIZE, compute_device=device.type),
            constraints=constraints,
        )
        sharders = [EmbeddingBagCollectionSharder()]
        plan = planner.collective_plan(module, sharders, pg)
        model = DistributedModelParallel(
            module, env=ShardingEnv.from_process_group(pg), plan=plan, sharders=sharders,
            device=device,
        )  # fmt: skip
        batch = batch_for(rank)
        torch.testing.assert_close(
            model(batch.to(device)).wait().values().cpu(), plain(batch).values()
        )
        if rank == 0:
            print(f"== {sharding_type}\n{plan}")
        dist.barrier()
        print(f"rank {rank}: {sharding_type} output equals the plain collection's", flush=True)
    dist.destroy_process_group()


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return str(s.getsockname()[1])


if __name__ == "__main__":
    mp.spawn(run_rank, args=(free_port(),), nprocs=WORLD_SIZE)
