"""Child process of test_tiered_crash.py: trains a one-rank model with a tiered table, saves a
checkpoint after STEPS // 2 steps, then keeps training and saving until the test SIGKILLs it at
the point named by argv[2]: "save" (inside the next save, after its first chunk is written)
or "train" (between steps, rows being evicted and written back)."""

from __future__ import annotations

import os
import pathlib
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(__file__))

import test_tiered_checkpoint as case  # after the path is set

from shardrec_dmp import checkpoint_tiered, save
from shardrec_optim import EmbOptimType
from shardrec_testing import RankContext


def main(root: str, where: str, port: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=0, world_size=1)
    ctx = RankContext(
        rank=0, world_size=1, pg=dist.group.WORLD, device=torch.device("cpu"), backend="gloo"
    )
    store = os.path.join(root, "store")
    dmp = case.wrap(ctx, "tiered", store, EmbOptimType.EXACT_ROWWISE_ADAGRAD)
    ckpt = os.path.join(root, "ckpt")
    half = case.STEPS // 2
    case.train(ctx, dmp, 0, half)
    save(ckpt, dmp, {"fused": dmp.fused_optimizer})
    marker = pathlib.Path(root, "marker")
    if where == "save":
        original = checkpoint_tiered.TieredSavePlanner.resolve_data

        def stall(self, item):  # type: ignore[no-untyped-def]
            out = original(self, item)
            marker.write_text("saving")
            time.sleep(600)  # killed here
            return out

        checkpoint_tiered.TieredSavePlanner.resolve_data = stall  # type: ignore[method-assign]
        case.train(ctx, dmp, half, half + 1)
        save(ckpt, dmp, {"fused": dmp.fused_optimizer})
    else:
        step = half
        while True:  # killed between two steps
            case.train(ctx, dmp, step, step + 1)
            step += 1
            marker.write_text(f"trained {step}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
