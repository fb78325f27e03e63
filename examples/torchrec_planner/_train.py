"""What the three planner examples share: the process group, the model, the batches, training.

Each example configures TorchRec's planner its own way, then calls `train(planner)`: rank 0
plans (`collective_plan` broadcasts the plan), `DistributedModelParallel` shards the model by
it, and a few steps of training run on every rank. Rank 0 prints the plan and the losses as
`plan <table> <sharding type> <kernel> <ranks>` and `loss first <x> last <y>` lines.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import nn

import shardrec as torchrec
from shardrec.distributed import DistributedModelParallel
from shardrec.distributed.embeddingbag import EmbeddingBagCollectionSharder

TABLES = [("t0", 400, 8), ("t1", 300, 8), ("t2", 200, 8), ("t3", 100, 8)]
BATCH = 16
STEPS = 6
LEARNING_RATE = 0.05


class TinyRanker(nn.Module):
    """An EmbeddingBagCollection of four tables and a linear layer over the pooled features."""

    def __init__(self) -> None:
        super().__init__()
        tables = [
            torchrec.EmbeddingBagConfig(
                name=name, embedding_dim=dim, num_embeddings=rows, feature_names=[f"f_{name}"]
            )
            for name, rows, dim in TABLES
        ]
        self.ebc = torchrec.EmbeddingBagCollection(tables=tables)
        self.head = nn.Linear(sum(dim for _, _, dim in TABLES), 1)

    def forward(self, features: torchrec.KeyedJaggedTensor) -> torch.Tensor:
        pooled = self.ebc(features)
        return self.head(pooled.values()).squeeze(-1)


def make_batch(rank: int, step: int) -> tuple[torchrec.KeyedJaggedTensor, torch.Tensor]:
    """A deterministic batch of `BATCH` examples for (rank, step): 0..3 ids per feature."""
    g = torch.Generator().manual_seed(1000 * rank + step)
    lengths = torch.randint(0, 4, (len(TABLES) * BATCH,), generator=g)
    values = torch.cat(
        [
            torch.randint(0, rows, (int(lengths[i * BATCH : (i + 1) * BATCH].sum()),), generator=g)
            for i, (_, rows, _) in enumerate(TABLES)
        ]
    )
    keys = [f"f_{name}" for name, _, _ in TABLES]
    labels = torch.rand(BATCH, generator=g)
    return torchrec.KeyedJaggedTensor(keys=keys, values=values, lengths=lengths), labels


def sharders() -> list[EmbeddingBagCollectionSharder]:
    return [
        EmbeddingBagCollectionSharder(
            fused_params={"optimizer": "exact_sgd", "learning_rate": LEARNING_RATE}
        )
    ]


def train(planner: object) -> None:
    """Plan on rank 0 with `planner`, shard, train `STEPS` steps; print plan and losses."""
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = TinyRanker()
    plan = planner.collective_plan(model, sharders(), dist.group.WORLD)  # type: ignore[attr-defined]
    if rank == 0:
        for path, tables in plan.plan.items():
            for name, ps in tables.items():
                cache = getattr(ps, "cache_params", None)
                print(f"plan {path}.{name} {ps.sharding_type.value} {ps.compute_kernel.value} "
                      f"{list(ps.ranks)} cache_params={cache}")  # fmt: skip
    dmp = DistributedModelParallel(
        model, plan=plan, sharders=sharders(), device=torch.device("cpu")
    )
    dense = [p for n, p in dmp.named_parameters() if "ebc" not in n]
    optimizer = torch.optim.SGD(dense, lr=LEARNING_RATE)
    losses = []
    for step in range(STEPS):
        features, labels = make_batch(rank, step)
        loss = nn.functional.mse_loss(dmp(features), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    total = torch.tensor(losses)
    dist.all_reduce(total)
    if rank == 0:
        first, last = float(total[0]) / 2, float(total[-1]) / 2
        assert math.isfinite(first) and math.isfinite(last), (first, last)
        print(f"loss first {first:.6f} last {last:.6f}")
