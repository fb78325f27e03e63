"""A sharded EmbeddingBagCollection on one GPU over NCCL: output equals the unsharded module,
and a steady-state training step synchronizes the host exactly as often as the budget of
`test_host_syncs.py` says (counted by CUDA itself: `torch.cuda.set_sync_debug_mode("warn")`
warns once per synchronizing call).

Marked `gpu`: skipped without CUDA (`nox -s gpu`).
"""

from __future__ import annotations

import warnings
from types import ModuleType

import pytest
import torch

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_embedding.triton import triton_available
from shardrec_planner import construct_module_sharding_plan
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, assert_close, load_sibling_module, shared_pool

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _load(name: str) -> ModuleType:
    return load_sibling_module(__file__, name, "shardrec_sharding_gpu_")


syncs = _load("test_host_syncs")


def gpu_step(ctx: RankContext, kind: str) -> tuple[int, int, list[str]]:
    """(syncs of the last of 3 steps, the GPU budget, the warning texts)."""
    env = ShardingEnv.from_process_group(ctx.pg)
    configs = [
        EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=f)
        for n, r, d, f in syncs.TABLES
    ]
    ebc = EmbeddingBagCollection(configs)
    plan = construct_module_sharding_plan(
        ebc,
        {n: syncs.PLANS[kind](i, 1) for i, (n, *_) in enumerate(syncs.TABLES)},
        world_size=1,
        local_world_size=1,
    )
    sharded = EmbeddingBagCollectionSharder(
        fused_params={"optimizer": "exact_row_wise_adagrad", "learning_rate": 0.1}
    ).shard(ebc, plan, env)
    dense = [p for n, p in sharded.named_parameters() if n not in sharded.fused_optimizer.params]
    dense_opt = torch.optim.SGD(dense, lr=0.1) if dense else None
    found: list[str] = []
    for step in range(3):
        kjt = syncs._batch(0, step)
        expected = ebc(kjt).values()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = sharded(kjt.to(env.device)).wait()
            out.values().square().sum().backward()
            if dense_opt is not None:
                dense_opt.step()
                dense_opt.zero_grad()
        torch.cuda.set_sync_debug_mode("default")
        if step == 0:
            assert_close(out.values().detach().cpu(), expected, msg=kind)
        found = [str(w.message) for w in caught if "synchroniz" in str(w.message)]
    budget = syncs.budget(kind, 1, 0)
    if triton_available():
        budget[syncs.SEGMENTS] = 0  # the Triton backward finds segments without a host read
    return len(found), sum(budget.values()), found


@pytest.mark.parametrize("kind", ["table_wise", "row_wise", "data_parallel"])
def test_steady_state_step_syncs_within_budget_on_gpu(kind: str) -> None:
    [(count, budget, found)] = shared_pool(1, "nccl").run(gpu_step, kind)
    assert count == budget, found
