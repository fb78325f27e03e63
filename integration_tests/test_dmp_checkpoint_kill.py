"""A rank killed (SIGKILL) in the middle of `save` leaves the previous checkpoint intact.

Two real processes (gloo, 5 s collective timeout) save checkpoint A, change their weights and
save again; rank 1 kills itself after writing its shards of the second save, before every rank
finished. Rank 0 must fail within the timeout instead of hanging, and `path` must still hold A,
loadable (here into one rank, i.e. resharded).
"""

from __future__ import annotations

import subprocess
import sys

import torch

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel, full_state_dict, load
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_testing import RankContext, free_port

WORKER = r"""
import datetime, os, signal, sys
import torch, torch.distributed as dist
rank, path, port = int(sys.argv[1]), sys.argv[2], sys.argv[3]
os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", port
dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=5))
import shardrec_dmp.checkpoint as ck
from shardrec_dmp import DistributedModelParallel, save
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
torch.manual_seed(0)
config = EmbeddingBagConfig(name="t", num_embeddings=8, embedding_dim=4, feature_names=["f"])
model = DistributedModelParallel(EmbeddingBagCollection([config]))
save(path, model)
print("saved A", flush=True)
with torch.no_grad():
    for p in model.parameters():
        p.add_(1.0)
if rank == 1:
    real, calls = ck.barrier, []
    def dying_barrier(env):
        calls.append(1)
        if len(calls) == 2:  # shards of the second save written, not yet published
            os.kill(os.getpid(), signal.SIGKILL)
        real(env)
    ck.barrier = dying_barrier
save(path, model)
print("saved B", flush=True)
"""


def initial_table() -> torch.Tensor:
    torch.manual_seed(0)
    config = EmbeddingBagConfig(name="t", num_embeddings=8, embedding_dim=4, feature_names=["f"])
    weight = EmbeddingBagCollection([config]).embedding_bags["t"].weight
    assert isinstance(weight, torch.Tensor)
    return weight.detach().clone()


def load_into_one_rank(ctx: RankContext, path: str) -> torch.Tensor:
    config = EmbeddingBagConfig(name="t", num_embeddings=8, embedding_dim=4, feature_names=["f"])
    ebc = EmbeddingBagCollection([config])
    with torch.no_grad():
        ebc.embedding_bags["t"].weight.zero_()
    model = DistributedModelParallel(ebc, env=ShardingEnv.from_process_group(ctx.pg))
    load(path, model)
    return full_state_dict(model)["embedding_bags.t.weight"]


def test_killed_rank_leaves_previous_checkpoint(pool_factory: object, tmp_path: object) -> None:
    path = f"{tmp_path}/ckpt"
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(rank), path, port],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert procs[1].returncode == -9, outs[1][1][-3000:]
    assert procs[0].returncode != 0, outs[0]  # failed, within the timeout, did not hang
    assert "saved A" in outs[0][0] and "saved B" not in outs[0][0]
    (loaded,) = pool_factory(1).run(load_into_one_rank, path)  # type: ignore[operator]
    assert torch.equal(loaded, initial_table())
