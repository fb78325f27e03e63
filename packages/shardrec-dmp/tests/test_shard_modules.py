"""`shard_modules` (TorchRec's composable sharding) against the unsharded model, 2 gloo ranks."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor, nn

from shardrec_collectives import ShardingEnv
from shardrec_dmp import shard_modules
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import (
    ShardingPlan,
    column_wise,
    construct_module_sharding_plan,
    row_wise,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder, ShardedEmbeddingBagCollection
from shardrec_testing import RankContext, assert_close


def _tables() -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(name="t0", embedding_dim=4, num_embeddings=20, feature_names=["f0"]),
        EmbeddingBagConfig(name="t1", embedding_dim=4, num_embeddings=30, feature_names=["f1"]),
    ]


class _Model(nn.Module):
    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.ebc = EmbeddingBagCollection(tables=_tables(), device=device)
        self.lin = nn.Linear(8, 1, device=device)

    def forward(self, kjt: KeyedJaggedTensor) -> Tensor:
        out: Tensor = self.lin(self.ebc(kjt).values())
        return out


def _kjt() -> KeyedJaggedTensor:
    return KeyedJaggedTensor.from_lengths_sync(
        keys=["f0", "f1"],
        values=torch.tensor([1, 2, 3, 4, 29, 0]),
        lengths=torch.tensor([2, 1, 0, 2, 1, 0]),
    )


def _load_reference(model: nn.Module, ref: nn.Module) -> None:
    want = ref.state_dict()
    with torch.no_grad():
        for key, value in model.state_dict().items():
            if hasattr(value, "local_shards"):
                for shard in value.local_shards():
                    (r, c), (h, w) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
                    shard.tensor.copy_(want[key][r : r + h, c : c + w])
            else:
                value.copy_(want[key])


def shard_and_compare(ctx: RankContext, sharding_type: str) -> bool:
    torch.manual_seed(0)
    ref = _Model(torch.device("cpu"))
    model = copy.deepcopy(ref)
    plan = ShardingPlan(
        {
            "ebc": construct_module_sharding_plan(
                model.ebc,
                {"t0": _generator(sharding_type), "t1": _generator(sharding_type)},
                world_size=ctx.world_size,
                device_type="cpu",
            )
        }
    )
    env = ShardingEnv.from_process_group(ctx.pg)
    out = shard_modules(model, env=env, plan=plan)
    assert out is model  # the model itself, its embedding module replaced
    assert isinstance(model.ebc, ShardedEmbeddingBagCollection)
    assert isinstance(model.lin, nn.Linear)  # the dense part untouched (no DDP wrapper)
    assert sorted(model.state_dict()) == sorted(ref.state_dict())
    _load_reference(model, ref)
    assert_close(model(_kjt()), ref(_kjt()))
    # default plan (collective) and default sharders; meta dense part materialized on request
    meta = _Model(torch.device("meta"))
    shard_modules(meta, env=env, sharders=[EmbeddingBagCollectionSharder()], init_params=True)
    assert not any(p.is_meta for p in meta.lin.parameters())
    assert meta(_kjt()).shape == (3, 1)
    return True


def _generator(sharding_type: str) -> object:
    if sharding_type == "table_wise":
        return table_wise(rank=1)
    if sharding_type == "row_wise":
        return row_wise()
    return column_wise(ranks=[0, 1])


@pytest.mark.parametrize("sharding_type", ["table_wise", "row_wise", "column_wise"])
def test_shard_modules_equals_unsharded(rank_pool: object, sharding_type: str) -> None:
    assert all(rank_pool.run(shard_and_compare, sharding_type))  # type: ignore[attr-defined]


def test_shard_modules_refuses_a_non_module() -> None:
    with pytest.raises(TypeError, match=r"shards an nn\.Module"):
        shard_modules("model")  # type: ignore[arg-type]


def test_shard_modules_without_a_process_group_names_the_fix() -> None:
    with pytest.raises(ValueError, match="init_process_group"):
        shard_modules(_Model(torch.device("cpu")))
