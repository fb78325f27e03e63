"""A two-tower retrieval model trained sharded on 2 ranks, then gathered for serving.

Written as a TorchRec program (`import shardrec as torchrec`; cpu for cuda, gloo for nccl):

1. the planner builds its topology from the environment
   (`EmbeddingShardingPlanner(constraints=...)`) and `collective_plan(model)` plans with the
   default sharders on the default process group;
2. `DistributedModelParallel` shards the query tower's table row-wise and the candidate tower's
   table column-wise; `TrainPipelineSparseDist` trains it with an in-batch softmax loss;
3. `state_dict_to_device` + `state_dict_gather` (TorchRec's
   `torchrec.inference.state_dict_transform`) gather the sharded state into an unsharded copy
   of the model on rank 0, which scores every candidate for a batch of queries: its scores must
   equal the sharded model's.

Run: ``torchrun --nproc-per-node 2 examples/retrieval_two_tower.py`` (a few seconds on CPU).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

import shardrec as torchrec
from shardrec.datasets.utils import Batch
from shardrec.distributed import DistributedModelParallel
from shardrec.distributed.model_parallel import get_default_sharders
from shardrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints
from shardrec.distributed.train_pipeline import TrainPipelineSparseDist
from shardrec.inference.state_dict_transform import state_dict_gather, state_dict_to_device
from shardrec.optim import RowWiseAdagrad
from shardrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
from shardrec.optim.keyed import KeyedOptimizerWrapper
from shardrec.optim.optimizers import in_backward_optimizer_filter

NUM_USERS = 40
NUM_ITEMS = 120
DIM = 16
BATCH = 32
STEPS = 20


class TwoTower(nn.Module):
    """A query tower over the user's ids and a candidate tower over the item's ids."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.ebc = torchrec.EmbeddingBagCollection(
            tables=[
                torchrec.EmbeddingBagConfig(name="user_table", embedding_dim=DIM,
                                            num_embeddings=NUM_USERS, feature_names=["user_id"]),
                torchrec.EmbeddingBagConfig(name="item_table", embedding_dim=DIM,
                                            num_embeddings=NUM_ITEMS, feature_names=["item_id"]),
            ],
            device=device,
        )  # fmt: skip
        self.query_proj = nn.Linear(DIM, DIM, device=device)
        self.candidate_proj = nn.Linear(DIM, DIM, device=device)

    def forward(self, kjt: torchrec.KeyedJaggedTensor) -> tuple[torch.Tensor, torch.Tensor]:
        pooled = self.ebc(kjt).to_dict()
        return self.query_proj(pooled["user_id"]), self.candidate_proj(pooled["item_id"])


class TwoTowerTrainTask(nn.Module):
    """In-batch softmax: query i's positive is candidate i, the other candidates negatives."""

    def __init__(self, two_tower: TwoTower) -> None:
        super().__init__()
        self.two_tower = two_tower

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        query, candidate = self.two_tower(batch.sparse_features)
        logits = query @ candidate.T
        loss = nn.functional.cross_entropy(logits, torch.arange(len(logits)))
        return loss, logits.detach()


def make_batch(seed: int) -> Batch:
    """Users and the items they liked: user u likes items (u * 7 + k) % NUM_ITEMS."""
    g = torch.Generator().manual_seed(seed)
    users = torch.randint(0, NUM_USERS, (BATCH,), generator=g)
    items = (users * 7 + torch.randint(0, 3, (BATCH,), generator=g)) % NUM_ITEMS
    kjt = torchrec.KeyedJaggedTensor.from_lengths_sync(
        keys=["user_id", "item_id"],
        values=torch.cat([users, items]),
        lengths=torch.ones(2 * BATCH, dtype=torch.int32),
    )
    return Batch(dense_features=torch.zeros(BATCH, 0), sparse_features=kjt,
                 labels=torch.ones(BATCH))  # fmt: skip


def main() -> None:
    dist.init_process_group(backend="gloo")
    rank = dist.get_rank()
    device = torch.device("cpu")
    torch.manual_seed(0)
    model = TwoTowerTrainTask(TwoTower(device=torch.device("meta")))
    # The tables' optimizer runs inside the backward (fused into the sharded lookups).
    apply_optimizer_in_backward(RowWiseAdagrad, model.two_tower.ebc.parameters(), {"lr": 0.5})

    constraints = {
        "user_table": ParameterConstraints(sharding_types=["row_wise"]),
        "item_table": ParameterConstraints(sharding_types=["column_wise"]),
    }
    planner = EmbeddingShardingPlanner(constraints=constraints)  # topology from the environment
    plan = planner.collective_plan(model)  # default sharders, default process group
    dmp = DistributedModelParallel(model, device=device, plan=plan,
                                   sharders=get_default_sharders())  # fmt: skip
    if rank == 0:
        for path, tables in plan.plan.items():
            for name, ps in tables.items():
                print(f"plan {path}.{name} {ps.sharding_type} ranks {ps.ranks}")

    dense = KeyedOptimizerWrapper(
        dict(in_backward_optimizer_filter(dmp.named_parameters())),
        lambda params: torch.optim.Adagrad(params, lr=0.5),
    )
    optimizer = torchrec.optim.keyed.CombinedOptimizer([dmp.fused_optimizer, dense])
    pipeline = TrainPipelineSparseDist(dmp, optimizer, device)
    batches = iter([make_batch(1000 * rank + step) for step in range(STEPS)])
    losses = []
    while True:
        try:
            logits = pipeline.progress(batches)
        except StopIteration:
            break
        labels = torch.arange(len(logits))
        losses.append(float(nn.functional.cross_entropy(logits, labels)))
    if rank == 0:
        print(f"trained {len(losses)} steps: loss {losses[0]:.4f} -> {losses[-1]:.4f}")

    # Gather the sharded model into a plain one for serving (rank 0 receives it).
    cpu_pg = dist.new_group(backend="gloo")
    state = state_dict_to_device(dmp.state_dict(), pg=cpu_pg, device=torch.device("cpu"))
    serving = TwoTowerTrainTask(TwoTower(device=torch.device("meta")))
    if rank == 0:  # only rank 0 holds the serving copy; the others' stays on meta
        serving = serving.to_empty(device="cpu")
    state_dict_gather(state, serving.state_dict())  # writes into the model's own tensors

    # Score every candidate for a batch of queries, sharded (all ranks) and gathered (rank 0).
    users = torch.arange(NUM_ITEMS) % NUM_USERS  # one row per candidate: the towers run together
    scoring = torchrec.KeyedJaggedTensor.from_lengths_sync(
        keys=["user_id", "item_id"],
        values=torch.cat([users, torch.arange(NUM_ITEMS)]),
        lengths=torch.ones(2 * NUM_ITEMS, dtype=torch.int32),
    )
    dmp.eval()
    with torch.no_grad():
        sharded_query, sharded_items = dmp.module.two_tower(scoring)
        sharded_scores = sharded_query[:8] @ sharded_items.T  # 8 users x every item
    if rank == 0:
        serving.eval()
        with torch.no_grad():
            query, items = serving.two_tower(scoring)
            scores = query[:8] @ items.T
        torch.testing.assert_close(scores, sharded_scores)
        top = scores.topk(3).indices
        liked = (users[:8, None] * 7 + torch.arange(3)) % NUM_ITEMS
        hits = sum(
            len(set(t) & set(lk)) for t, lk in zip(top.tolist(), liked.tolist(), strict=True)
        )
        print(f"top-3 items of the first 4 queries: {top[:4].tolist()}")
        print(f"top-3 hit rate over 8 queries: {hits / 24:.2f}")
        print("gathered scores equal sharded scores: ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
