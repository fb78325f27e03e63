"""Train DLRM sharded through `TrainPipelineSparseDist`, then evaluate through the same pipeline.

Written as a TorchRec program (`import shardrec as torchrec`; cpu for cuda, gloo for nccl), in
the shape of TorchRec's DLRM training script: one pipeline object serves both loops.

- training: `pipeline.progress(train_iterator)` until `StopIteration`;
- evaluation: `model.eval()`, a *new* iterator, and `progress` under `torch.no_grad()`: the
  pipeline reads the new iterator from the start and runs only the forward (no backward, no
  optimizer step); the predictions of every rank give the AUC.

The labels follow a rule the model can learn (a sample is positive when its two ids sum to
less than the table size), so the AUC after training is well above 0.5. It is checked against
the plain formula (the probability that a random positive outscores a random negative), and the
weights must be the same before and after evaluation.

Run: ``torchrun --nproc-per-node 2 examples/train_then_evaluate.py`` (a few seconds on CPU).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

import shardrec as torchrec
from shardrec.datasets.utils import Batch
from shardrec.distributed import DistributedModelParallel
from shardrec.distributed.train_pipeline import TrainPipelineSparseDist
from shardrec.metrics.auc import compute_auc
from shardrec.models.dlrm import DLRM, DLRMTrain
from shardrec.optim import RowWiseAdagrad
from shardrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
from shardrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
from shardrec.optim.optimizers import in_backward_optimizer_filter

FEATURES = ["user", "item"]
ROWS = 50
BATCH = 64
TRAIN_BATCHES = 30
EVAL_BATCHES = 8


def make_batch(seed: int) -> Batch:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, ROWS, (2, BATCH), generator=g)
    labels = (ids[0] + ids[1] < ROWS).float()
    kjt = torchrec.KeyedJaggedTensor.from_lengths_sync(
        keys=FEATURES, values=ids.flatten(), lengths=torch.ones(2 * BATCH, dtype=torch.int32)
    )
    return Batch(dense_features=torch.rand(BATCH, 4, generator=g), sparse_features=kjt,
                 labels=labels)  # fmt: skip


def pairwise_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """P(score of a random positive > score of a random negative), ties counted half."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0).float() + 0.5 * (diff == 0).float()).mean())


def main() -> None:
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    torch.manual_seed(0)
    ebc = torchrec.EmbeddingBagCollection(
        tables=[
            torchrec.EmbeddingBagConfig(name=f"t_{f}", embedding_dim=8, num_embeddings=ROWS,
                                        feature_names=[f])
            for f in FEATURES
        ],
        device=torch.device("meta"),
    )  # fmt: skip
    # The tables' optimizer runs inside the backward (fused into the sharded lookups).
    apply_optimizer_in_backward(RowWiseAdagrad, ebc.parameters(), {"lr": 0.1})
    dlrm = DLRM(embedding_bag_collection=ebc, dense_in_features=4,
                dense_arch_layer_sizes=[16, 8], over_arch_layer_sizes=[16, 1])  # fmt: skip
    model = DistributedModelParallel(DLRMTrain(dlrm), device=device)
    dense = KeyedOptimizerWrapper(
        dict(in_backward_optimizer_filter(model.named_parameters())),
        lambda params: torch.optim.Adam(params, lr=0.01),
    )
    optimizer = CombinedOptimizer([model.fused_optimizer, dense])
    pipeline = TrainPipelineSparseDist(model, optimizer, device)

    train_iterator = iter([make_batch(1000 * rank + i) for i in range(TRAIN_BATCHES)])
    losses = []
    while True:
        try:
            loss, _, _ = pipeline.progress(train_iterator)
        except StopIteration:
            break
        losses.append(float(loss))
    if rank == 0:
        print(f"trained {len(losses)} batches: loss {losses[0]:.4f} -> {losses[-1]:.4f}")

    before = {k: v.clone() for k, v in model.named_parameters()}
    model.eval()
    eval_iterator = iter([make_batch(10**6 + 1000 * rank + i) for i in range(EVAL_BATCHES)])
    scores, labels = [], []
    with torch.no_grad():
        while True:
            try:
                _, logits, batch_labels = pipeline.progress(eval_iterator)
            except StopIteration:
                break
            scores.append(torch.sigmoid(logits))
            labels.append(batch_labels)
    assert len(scores) == EVAL_BATCHES, f"evaluated {len(scores)} of {EVAL_BATCHES} batches"
    unchanged = all(torch.equal(before[k], v) for k, v in model.named_parameters())
    assert unchanged, "evaluation changed the weights"

    # Every rank's predictions, for one AUC over the whole evaluation set.
    local = torch.stack([torch.cat(scores), torch.cat(labels)])
    gathered = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(gathered, local)
    everything = torch.cat(gathered, dim=1)
    auc = float(compute_auc(1, everything[:1], everything[1:], torch.ones_like(everything[:1]))[0])
    reference = pairwise_auc(everything[0], everything[1])
    assert abs(auc - reference) < 1e-5, (auc, reference)
    if rank == 0:
        print(f"evaluated {len(scores)} batches per rank, weights unchanged: ok")
        print(f"eval AUC {auc:.4f} (pairwise formula {reference:.4f})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
