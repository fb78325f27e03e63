"""Introduction: embedding tables, a plan, a sharded model, and training it, on one CPU process.

The journey of TorchRec's introduction, on shardrec (`import shardrec as torchrec`):

1. describe the tables (`EmbeddingBagConfig`) and build an `EmbeddingBagCollection`;
2. start a process group (one rank, gloo: a laptop is enough) and let the planner choose where
   each table lives;
3. wrap the collection in `DistributedModelParallel` (DMP), which shards it by that plan, and
   check that the sharded model computes what the plain one does;
4. train with the optimizer fused into the backward pass (no `optimizer.step()`: the tables
   update as their gradients are computed) and check each step against `torch.optim.SGD` on the
   plain collection.

On several ranks the same code shards the tables across them: examples/tutorial_sharding.py.
Run: ``python examples/tutorial_intro.py`` (``SHARDREC_EXAMPLE_DEVICE=cuda``: on one GPU, over
NCCL).
"""

from __future__ import annotations

import copy
import os
import socket

import torch
import torch.distributed as dist

import shardrec as torchrec
from shardrec.distributed import DistributedModelParallel
from shardrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from shardrec.distributed.planner import EmbeddingShardingPlanner, Topology

LEARNING_RATE = 0.1
DEVICE = torch.device(os.environ.get("SHARDREC_EXAMPLE_DEVICE", "cpu"))


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return str(s.getsockname()[1])


def make_batch(seed: int) -> torchrec.KeyedJaggedTensor:
    """Four examples, each with 0..3 user ids and 0..3 item ids."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (2 * 4,), generator=g)
    n_user, n_item = int(lengths[:4].sum()), int(lengths[4:].sum())
    values = torch.cat([torch.randint(0, 1000, (n_user,), generator=g),
                        torch.randint(0, 500, (n_item,), generator=g)])  # fmt: skip
    return torchrec.KeyedJaggedTensor(keys=["user", "item"], values=values, lengths=lengths)


def main() -> None:
    # 1. Tables: 1000 users and 500 items, 16 numbers each; bags pooled by sum.
    torch.manual_seed(0)
    tables = [
        torchrec.EmbeddingBagConfig(name="user_table", embedding_dim=16, num_embeddings=1000,
                                    feature_names=["user"]),
        torchrec.EmbeddingBagConfig(name="item_table", embedding_dim=16, num_embeddings=500,
                                    feature_names=["item"]),
    ]  # fmt: skip
    ebc = torchrec.EmbeddingBagCollection(tables=tables)
    plain = copy.deepcopy(ebc)  # the reference: never sharded, trained by torch.optim.SGD
    batch = make_batch(0)
    print(batch)

    # 2. A process group of one rank, and a plan for it.
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ["MASTER_PORT"] = free_port()
    dist.init_process_group("nccl" if DEVICE.type == "cuda" else "gloo", rank=0, world_size=1)
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": "exact_sgd", "learning_rate": LEARNING_RATE}
    )
    planner = EmbeddingShardingPlanner(topology=Topology(world_size=1, compute_device=DEVICE.type))
    plan = planner.collective_plan(ebc, [sharder], dist.group.WORLD)
    print(plan)

    # 3. Shard by the plan; the outputs match the plain collection.
    model = DistributedModelParallel(ebc, plan=plan, sharders=[sharder], device=DEVICE)
    pooled = model(batch.to(DEVICE)).wait()
    print("pooled features:", pooled.keys(), "shape", tuple(pooled.values().shape))
    torch.testing.assert_close(pooled.values().cpu(), plain(batch).values())
    print("sharded output equals the plain collection's: ok")
    print(model.fused_optimizer)

    # 4. Train: pull the pooled embeddings towards 1. The fused optimizer updates in backward.
    reference_opt = torch.optim.SGD(plain.parameters(), lr=LEARNING_RATE)
    for step in range(3):
        batch = make_batch(step + 1)
        loss = (model(batch.to(DEVICE)).wait().values() - 1).pow(2).sum()
        loss.backward()
        reference_opt.zero_grad()
        (plain(batch).values() - 1).pow(2).sum().backward()
        reference_opt.step()
        print(f"step {step}: loss {loss.item():.4f}")
    after = model(batch.to(DEVICE)).wait().values().cpu()
    torch.testing.assert_close(after, plain(batch).values())
    print("after 3 fused steps, equal to torch.optim.SGD on the plain collection: ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
