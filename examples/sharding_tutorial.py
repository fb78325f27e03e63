"""TorchRec's sharding tutorial (../shared/seeds/sharding_tutorial.txt) on CPU with gloo.

The tutorial shards an EmbeddingBagCollection of two large (4096 rows) and two small (1024 rows)
tables of dim 64 over two ranks, once per sharding type, with the planner choosing placements
under per-table constraints, and prints each rank's plan. Differences from the notebook:

- gloo on CPU instead of NCCL on GPUs, and `torch.multiprocessing` instead of `multiprocess`;
- shardrec's component packages instead of `torchrec` (the umbrella package with TorchRec's
  module paths comes later), and the sharder's `shard()` instead of DistributedModelParallel
  (which lives in the next layer): the embedding module is the whole model here;
- every sharding type the tutorial names runs: table_wise and row_wise (shown in the notebook),
  column_wise and table_row_wise (described), plus data_parallel and table_column_wise;
- each rank also runs one batch and checks the sharded output against the unsharded module.

Run: ``.venv/bin/python examples/sharding_tutorial.py [--types table_wise row_wise ...]``.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import (
    EmbeddingComputeKernel,
    EmbeddingShardingPlanner,
    ParameterConstraints,
    ShardingType,
    Topology,
)
from shardrec_sharding import EmbeddingBagCollectionSharder

large_table_cnt = 2
small_table_cnt = 2
large_tables = [
    EmbeddingBagConfig(
        name="large_table_" + str(i),
        embedding_dim=64,
        num_embeddings=4096,
        feature_names=["large_table_feature_" + str(i)],
        pooling=PoolingType.SUM,
    )
    for i in range(large_table_cnt)
]
small_tables = [
    EmbeddingBagConfig(
        name="small_table_" + str(i),
        embedding_dim=64,
        num_embeddings=1024,
        feature_names=["small_table_feature_" + str(i)],
        pooling=PoolingType.SUM,
    )
    for i in range(small_table_cnt)
]


def gen_constraints(
    sharding_type: ShardingType = ShardingType.TABLE_WISE,
) -> dict[str, ParameterConstraints]:
    kernel = (
        EmbeddingComputeKernel.DENSE
        if sharding_type is ShardingType.DATA_PARALLEL
        else EmbeddingComputeKernel.BATCHED_FUSED
    )
    large_table_constraints = {
        "large_table_" + str(i): ParameterConstraints(
            sharding_types=[sharding_type.value],
            compute_kernels=[kernel.value],
        )
        for i in range(large_table_cnt)
    }
    small_table_constraints = {
        "small_table_" + str(i): ParameterConstraints(
            sharding_types=[sharding_type.value],
            compute_kernels=[kernel.value],
        )
        for i in range(small_table_cnt)
    }
    constraints = {**large_table_constraints, **small_table_constraints}
    return constraints


def sample_batch(rank: int) -> KeyedJaggedTensor:
    """A small batch for `rank`: 3 samples, 0-4 ids per bag."""
    g = torch.Generator().manual_seed(rank)
    keys = [t.feature_names[0] for t in large_tables + small_tables]
    rows = [t.num_embeddings for t in large_tables + small_tables]
    lengths = torch.randint(0, 5, (len(keys) * 3,), generator=g)
    per_key = lengths.view(len(keys), 3).sum(1).tolist()
    values = torch.cat(
        [torch.randint(0, r, (n,), generator=g) for r, n in zip(rows, per_key, strict=True)]
    )
    return KeyedJaggedTensor(keys, values, lengths=lengths, stride=3)


def single_rank_execution(
    rank: int,
    world_size: int,
    constraints: dict[str, ParameterConstraints],
    module: nn.Module,
    backend: str,
    port: int,
) -> None:
    def init_distributed_single_host(rank: int, world_size: int, backend: str) -> dist.ProcessGroup:
        os.environ["MASTER_ADDR"] = "localhost"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group(rank=rank, world_size=world_size, backend=backend)
        group = dist.group.WORLD
        assert group is not None
        return group

    device = torch.device("cpu")
    topology = Topology(world_size=world_size, compute_device="cpu")
    pg = init_distributed_single_host(rank, world_size, backend)
    planner = EmbeddingShardingPlanner(topology=topology, constraints=constraints)
    sharder = EmbeddingBagCollectionSharder()
    plan = planner.collective_plan(module, [sharder], pg)
    module_plan = plan.get_plan_for_module("")
    assert module_plan is not None
    assert isinstance(module, EmbeddingBagCollection)
    sharded_model = sharder.shard(module, module_plan, ShardingEnv.from_process_group(pg), device)
    print(f"rank:{rank},sharding plan: {plan}")
    # Not in the notebook: the sharded module computes what the unsharded one does.
    batch = sample_batch(rank)
    torch.testing.assert_close(sharded_model(batch).wait().values(), module(batch).values())
    dist.destroy_process_group()


def spmd_sharing_simulation(
    sharding_type: ShardingType = ShardingType.TABLE_WISE, world_size: int = 2
) -> None:
    # The tutorial builds the module on "cuda"; here it is materialized on CPU, and every rank
    # copies its shards of these weights (sharding keeps a materialized module's weights).
    ebc = EmbeddingBagCollection(tables=large_tables + small_tables, device="cpu")
    with torch.no_grad():  # same weights in every process, whatever their seeds
        for p in ebc.parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(0)))
    port = 29500 + sum(map(ord, sharding_type.value)) % 400
    mp.spawn(  # type: ignore[attr-defined,no-untyped-call]  # untyped re-export in torch's stubs
        single_rank_execution,
        args=(world_size, gen_constraints(sharding_type), ebc, "gloo", port),
        nprocs=world_size,
        join=True,
    )


SHOWN = ["table_wise", "row_wise", "column_wise", "table_row_wise"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--types",
        nargs="*",
        default=[*SHOWN, "data_parallel", "table_column_wise"],
        help="sharding types to run (default: all)",
    )
    args = parser.parse_args()
    for name in args.types:
        print(f"\n### {name}")
        spmd_sharing_simulation(ShardingType(name))


if __name__ == "__main__":
    main()
