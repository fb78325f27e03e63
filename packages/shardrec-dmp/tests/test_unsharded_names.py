"""get_unsharded_module_names against a naive path-prefix reference, in one process."""

from __future__ import annotations

import pytest
from torch import nn

from shardrec_collectives import ShardingEnv
from shardrec_dmp import DistributedModelParallel, get_unsharded_module_names
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_planner import ShardingPlan, construct_module_sharding_plan, table_wise
from shardrec_sharding import EmbeddingBagCollectionSharder

LOCAL = ShardingEnv.from_local(1, 0)


def _ebc(name: str) -> EmbeddingBagCollection:
    return EmbeddingBagCollection(
        [EmbeddingBagConfig(name=name, num_embeddings=6, embedding_dim=4, feature_names=[name])]
    )


def _model() -> nn.Module:
    root = nn.Module()
    root.head = nn.Linear(4, 1)
    root.deep = nn.Module()
    root.deep.ebc = _ebc("a")
    root.deep.side = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    root.deep.deeper = nn.Module()
    root.deep.deeper.ebc = _ebc("b")
    root.deep.deeper.norm = nn.LayerNorm(4)
    root.tower = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    return root


def _naive(model: nn.Module, sharded_paths: set[str]) -> list[str]:
    """Children with no sharded path under them, whose parent has one (by path prefixes)."""

    def holds(path: str) -> bool:
        return any(s == path or s.startswith(path + ".") for s in sharded_paths)

    out = []
    for path, _ in model.named_modules():
        if not path:
            continue
        parent = path.rpartition(".")[0]
        inside = any(path.startswith(s + ".") for s in sharded_paths)
        if not inside and (parent == "" or holds(parent)) and not holds(path):
            out.append(path)
    return sorted(out)


@pytest.mark.parametrize(
    "planned", [["deep.ebc"], ["deep.deeper.ebc"], ["deep.ebc", "deep.deeper.ebc"]]
)
def test_names_in_a_dmp_match_the_naive_reference(planned: list[str]) -> None:
    model = _model()
    mods = dict(model.named_modules())
    plan = ShardingPlan(
        plan={
            p: construct_module_sharding_plan(
                mods[p], {t: table_wise(rank=0) for t in mods[p].embedding_bags}, world_size=1
            )
            for p in planned
        }
    )
    dmp = DistributedModelParallel(model, plan=plan, env=LOCAL)
    got = get_unsharded_module_names(dmp)
    sharded = {"_dmp_wrapped_module." + p for p in dmp.sharded_modules}
    assert got == _naive(dmp, sharded)
    assert "_dmp_wrapped_module.head" in got and "_dmp_wrapped_module.tower" in got
    assert not any(g.startswith("_dmp_wrapped_module.tower.") for g in got)  # largest subtrees


def test_sharded_module_outside_a_dmp_and_no_sharded_module() -> None:
    assert get_unsharded_module_names(_model()) == []  # nothing sharded: nothing reported
    ebc = _ebc("a")
    plan = construct_module_sharding_plan(ebc, {"a": table_wise(rank=0)}, world_size=1)
    holder = nn.Module()
    holder.emb = EmbeddingBagCollectionSharder().shard(ebc, plan, LOCAL)
    holder.mlp = nn.Linear(4, 4)
    assert get_unsharded_module_names(holder) == _naive(holder, {"emb"}) == ["mlp"]


def test_not_a_module() -> None:
    with pytest.raises(TypeError, match=r"model must be an nn\.Module, got dict"):
        get_unsharded_module_names({})  # type: ignore[arg-type]  # the error under test
