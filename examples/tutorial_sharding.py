# ruff: noqa: E402, F401, F811, F821, I001, SIM300, UP006, UP035
"""TorchRec's sharding tutorial notebook (../shared/seeds/sharding_tutorial.txt), run on shardrec.

The notebook's code cells in order, kept as written except for:

- `import shardrec as torchrec`, and `from torchrec.X import Y` written `from shardrec.X import Y`;
- `torch.multiprocessing` in place of the `multiprocess` package (imported under that name);
- `cuda` -> `cpu` (the module's device, `Topology(compute_device=...)`), `nccl` -> `gloo`;
- MASTER_PORT is a free port instead of 29500, chosen once: the forkserver that starts the ranks
  imports this file again and must keep the parent's port;
- the cells that run the simulation sit under `if __name__ == "__main__":`, so that the
  forkserver's import of this file defines the functions without running them, and there the
  forkserver is told to preload torch and shardrec (a speed-up only);
- besides table_wise and row_wise, whose output the notebook shows, it runs the two other types
  the notebook names, table_row_wise and column_wise (TorchRec itself runs neither on CPU).

Python 3.11's forkserver re-imports this file in every rank (it forks from a server that has
torch and shardrec loaded, so that is quick). The other types (data_parallel, which needs the
dense kernel the notebook's constraints leave out, and table_column_wise) and a check of every
sharded output against the unsharded module are in integration_tests/test_dmp_tutorials.py.

The notebook's shell cells (conda, pip, `sys.path`) are dropped. Run:
``python examples/tutorial_sharding.py``.
"""

import socket


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return str(s.getsockname()[1])


# Distributed Setup
import os
import torch
import shardrec as torchrec

os.environ["MASTER_ADDR"] = "localhost"
os.environ["MASTER_PORT"] = os.environ.get("MASTER_PORT") or _free_port()

# Constructing our embedding model
from shardrec.distributed.planner.types import ParameterConstraints
from shardrec.distributed.embedding_types import EmbeddingComputeKernel
from shardrec.distributed.types import ShardingType
from typing import Dict

large_table_cnt = 2
small_table_cnt = 2
large_tables = [
    torchrec.EmbeddingBagConfig(
        name="large_table_" + str(i),
        embedding_dim=64,
        num_embeddings=4096,
        feature_names=["large_table_feature_" + str(i)],
        pooling=torchrec.PoolingType.SUM,
    )
    for i in range(large_table_cnt)
]
small_tables = [
    torchrec.EmbeddingBagConfig(
        name="small_table_" + str(i),
        embedding_dim=64,
        num_embeddings=1024,
        feature_names=["small_table_feature_" + str(i)],
        pooling=torchrec.PoolingType.SUM,
    )
    for i in range(small_table_cnt)
]


def gen_constraints(
    sharding_type: ShardingType = ShardingType.TABLE_WISE,
) -> Dict[str, ParameterConstraints]:
    large_table_constraints = {
        "large_table_" + str(i): ParameterConstraints(
            sharding_types=[sharding_type.value],
            compute_kernels=[EmbeddingComputeKernel.BATCHED_FUSED.value],
        )
        for i in range(large_table_cnt)
    }
    small_table_constraints = {
        "small_table_" + str(i): ParameterConstraints(
            sharding_types=[sharding_type.value],
            compute_kernels=[EmbeddingComputeKernel.BATCHED_FUSED.value],
        )
        for i in range(small_table_cnt)
    }
    constraints = {**large_table_constraints, **small_table_constraints}
    return constraints


ebc = torchrec.EmbeddingBagCollection(device="cpu", tables=large_tables + small_tables)

# DistributedModelParallel in multiprocessing
import torch.nn as nn


def single_rank_execution(
    rank: int,
    world_size: int,
    constraints: Dict[str, ParameterConstraints],
    module: nn.Module,
    backend: str,
) -> None:
    import os
    import torch
    import torch.nn as nn
    import torch.distributed as dist
    from shardrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from shardrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from shardrec.distributed.model_parallel import DistributedModelParallel
    from shardrec.distributed.types import ModuleSharder
    from shardrec.distributed.types import ShardingEnv
    from typing import cast

    from typing import Optional

    def init_distributed_single_host(
        rank: int,
        world_size: int,
        backend: str,
        # pyre-fixme[11]: Annotation `ProcessGroup` is not defined as a type.
    ) -> dist.ProcessGroup:
        os.environ["RANK"] = f"{rank}"
        os.environ["WORLD_SIZE"] = f"{world_size}"
        dist.init_process_group(rank=rank, world_size=world_size, backend=backend)
        return dist.group.WORLD

    if backend == "nccl":
        device = torch.device(f"cuda:{rank}")
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    topology = Topology(world_size=world_size, compute_device="cpu")
    pg = init_distributed_single_host(rank, world_size, backend)
    planner = EmbeddingShardingPlanner(
        topology=topology,
        constraints=constraints,
    )
    sharders = [cast(ModuleSharder[torch.nn.Module], EmbeddingBagCollectionSharder())]
    plan: ShardingPlan = planner.collective_plan(module, sharders, pg)

    sharded_model = DistributedModelParallel(
        module,
        env=ShardingEnv.from_process_group(pg),
        plan=plan,
        sharders=sharders,
        device=device,
    )
    print(f"rank:{rank},sharding plan: {plan}")
    return sharded_model


# Multiprocessing Execution
import torch.multiprocessing as multiprocess


def spmd_sharing_simulation(
    sharding_type: ShardingType = ShardingType.TABLE_WISE,
    world_size=2,
):
    ctx = multiprocess.get_context("forkserver")
    processes = []
    for rank in range(world_size):
        p = ctx.Process(
            target=single_rank_execution,
            args=(rank, world_size, gen_constraints(sharding_type), ebc, "gloo"),
        )
        p.start()
        processes.append(p)

    for p in processes:
        p.join()
        assert 0 == p.exitcode


if __name__ == "__main__":
    # Not in the notebook: the forkserver imports torch and shardrec once, then forks each rank
    # from that warm process instead of starting a cold interpreter per rank.
    multiprocess.set_forkserver_preload(["torch", "shardrec"])

    # Table Wise Sharding
    spmd_sharing_simulation(ShardingType.TABLE_WISE)

    # Explore other sharding modes
    spmd_sharing_simulation(ShardingType.ROW_WISE)

    # The other sharding types the notebook names
    spmd_sharing_simulation(ShardingType.TABLE_ROW_WISE)
    spmd_sharing_simulation(ShardingType.COLUMN_WISE)
