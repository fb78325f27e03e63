"""Fault-tolerant training with `torchrun --max-restarts`: checkpoint, die, restart, resume.

    python -m torch.distributed.run --nproc-per-node 2 --max-restarts 1 \
        examples/fault_tolerant_training.py --ckpt-dir /tmp/ft --steps 8 --ckpt-every 3 \
        --kill-rank 1 --kill-at-step 5 --out /tmp/ft/final.pt

A DLRM-shaped model (an EmbeddingBagCollection, a bottom MLP and an over arch) is wrapped in
`DistributedModelParallel` and trained on a deterministic data order: the batch of `(rank,
step)` depends only on those two numbers. Every `--ckpt-every` steps all ranks call
`shardrec_dmp.save(<ckpt-dir>/step_<n>, ...)`; a directory of that name exists only once the
save finished on every rank (it is written under `.partial` and renamed), so on start the
script resumes from the highest `step_<n>` present.

`--kill-rank R --kill-at-step S` makes rank R SIGKILL itself at step S, in the first attempt
only (`TORCHELASTIC_RESTART_COUNT` is 0): the surviving rank's next collective fails (at the
latest after `--timeout-s` seconds, the process group's timeout), torchrun tears the group
down and starts it again, and the new attempt resumes from the latest checkpoint. Because the
data order is deterministic and the checkpoint holds the tables, the dense weights and both
optimizers' state, the final weights equal an uninterrupted run's, bit for bit on CPU.

`--out` (rank 0) writes the final unsharded state_dict (`full_state_dict`) with `torch.save`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import re
import signal

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.distributed_c10d import PrefixStore
from torch.distributed.rendezvous import rendezvous

from shardrec_collectives import Watchdog, agree_on_attempt
from shardrec_dmp import DistributedModelParallel, full_state_dict, load, save
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import CombinedOptimizer, KeyedOptimizerWrapper, in_backward_optimizer_filter
from shardrec_sharding import EmbeddingBagCollectionSharder

TABLES = [("t0", 50, 8, "f0"), ("t1", 30, 8, "f1"), ("t2", 40, 4, "f2")]
DENSE_IN = 5
BATCH = 8
_STEP_DIR = re.compile(r"^step_(\d+)$")


@dataclasses.dataclass
class Batch:
    dense_features: Tensor  # (B, DENSE_IN)
    sparse_features: KeyedJaggedTensor  # keys f0, f1, f2; stride B
    labels: Tensor  # (B,)


class Dlrm(nn.Module):
    """Pooled embeddings and a bottom MLP, concatenated into an over arch; `(loss, logits)`."""

    def __init__(self) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(
            [
                EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=[f])
                for n, r, d, f in TABLES
            ]
        )
        self.bottom = nn.Sequential(nn.Linear(DENSE_IN, 8), nn.ReLU())
        self.over = nn.Linear(8 + sum(d for _, _, d, _ in TABLES), 1)

    def forward(self, batch: Batch) -> tuple[Tensor, Tensor]:
        pooled = self.sparse(batch.sparse_features).values()
        logits = self.over(torch.cat([self.bottom(batch.dense_features), pooled], 1)).squeeze(1)
        return F.binary_cross_entropy_with_logits(logits, batch.labels), logits


def make_batch(rank: int, step: int) -> Batch:
    """The batch of `rank` at `step`: a function of both only (deterministic data order)."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    lengths = torch.randint(0, 4, (len(TABLES) * BATCH,), generator=g)
    per_key = lengths.view(len(TABLES), BATCH).sum(1).tolist()
    values = torch.cat(
        [
            torch.randint(0, rows, (n,), generator=g)
            for (_, rows, _, _), n in zip(TABLES, per_key, strict=True)
        ]
    )
    features = KeyedJaggedTensor([f for *_, f in TABLES], values, lengths=lengths, stride=BATCH)
    dense = torch.randn(BATCH, DENSE_IN, generator=g)
    return Batch(dense, features, torch.randint(0, 2, (BATCH,), generator=g).float())


def latest_checkpoint(ckpt_dir: str) -> tuple[int, str] | None:
    """`(step, path)` of the newest finished checkpoint in `ckpt_dir`, or None."""
    if not os.path.isdir(ckpt_dir):
        return None
    found = [(int(m[1]), e) for e in os.listdir(ckpt_dir) if (m := _STEP_DIR.match(e))]
    if not found:
        return None
    step, name = max(found)
    return step, os.path.join(ckpt_dir, name)


def build() -> tuple[DistributedModelParallel, CombinedOptimizer]:
    torch.manual_seed(0)  # same initial weights on every rank and in every attempt
    sharder = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": "exact_adagrad", "learning_rate": 0.1}
    )
    model = DistributedModelParallel(Dlrm(), sharders=[sharder])
    dense = KeyedOptimizerWrapper(
        dict(in_backward_optimizer_filter(model.named_parameters())),
        lambda params: torch.optim.Adam(params, lr=0.01),
    )
    return model, CombinedOptimizer([model.fused_optimizer, dense])


def init_distributed(timeout: datetime.timedelta) -> Watchdog:
    """`init_process_group("gloo")` from torchrun's environment, with the store keys of this
    attempt under their own prefix, and the heartbeat watchdog started. torchrun keeps one
    store across restarts; without the prefix a restarted rank can read the dead attempt's
    gloo addresses and fail to connect ("Connection refused" in connectFullMesh), seen with
    both the static and c10d rendezvous. Rank 0 names the attempt (`agree_on_attempt`):
    torchrun's restart count differs between nodes once a node was replaced."""
    store, rank, world_size = next(rendezvous("env://", timeout=timeout))
    store = PrefixStore("shardrec", store)
    name = agree_on_attempt(store, rank=rank, world_size=world_size, timeout=timeout)
    store = PrefixStore(f"attempt_{name}", store)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=timeout)
    return Watchdog(store, rank=rank, world_size=world_size, timeout=timeout).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--ckpt-dir", required=True)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--ckpt-every", type=int, default=3)
    parser.add_argument("--kill-rank", type=int, default=-1, help="-1: nobody dies")
    parser.add_argument("--kill-at-step", type=int, default=-1)
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=30.0,
        help="process group timeout: a collective waiting for a dead peer fails after this",
    )
    parser.add_argument("--out", help="rank 0 writes the final full_state_dict here")
    args = parser.parse_args()

    # Entry point: torchrun's environment is read here and nowhere else.
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    watchdog = init_distributed(datetime.timedelta(seconds=args.timeout_s))
    rank = dist.get_rank()
    model, opt = build()

    start = 0
    latest = latest_checkpoint(args.ckpt_dir)
    if latest is not None:
        start, path = latest
        load(path, model, {"opt": opt})
    print(f"[rank {rank}] attempt {attempt}: starting at step {start}", flush=True)

    for step in range(start, args.steps):
        if attempt == 0 and rank == args.kill_rank and step == args.kill_at_step:
            print(f"[rank {rank}] killing myself at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        loss, _ = model(make_batch(rank, step))
        opt.zero_grad()
        loss.backward()
        opt.step()
        done = step + 1
        if done % args.ckpt_every == 0 and done < args.steps:
            save(os.path.join(args.ckpt_dir, f"step_{done}"), model, {"opt": opt})

    state = full_state_dict(model)  # a collective: every rank takes part
    if rank == 0 and args.out:
        torch.save(state, args.out)
    print(f"[rank {rank}] finished {args.steps} steps", flush=True)
    watchdog.stop()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
