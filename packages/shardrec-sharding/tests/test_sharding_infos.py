"""`create_grouped_sharding_infos`: grouping by sharding type and the fused-param merge.

Reference: a naive merge written out per key (sharder < in-backward optimizer < the table's
ParameterSharding options), and the module's own tables and weights.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
)
from shardrec_optim import EmbOptimType, apply_optimizer_in_backward
from shardrec_planner import (
    BoundsCheckMode,
    CacheAlgorithm,
    CacheParams,
    KeyValueParams,
    construct_module_sharding_plan,
    data_parallel,
    table_wise,
)
from shardrec_sharding import ShardedEmbeddingBagCollection, ShardedEmbeddingCollection
from shardrec_sharding.sharding_infos import (
    add_params_from_parameter_sharding,
    merge_fused_params,
    table_fused_params,
)


def _bag_module() -> EmbeddingBagCollection:
    tables = [
        EmbeddingBagConfig(name=f"t{i}", embedding_dim=4, num_embeddings=5, feature_names=f)
        for i, f in enumerate((["a"], ["b", "shared"], ["shared"]))
    ]
    return EmbeddingBagCollection(tables=tables)


def _plan(module: torch.nn.Module, kinds: dict[str, str]) -> dict[str, object]:
    gens = {
        t: data_parallel() if k == "data_parallel" else table_wise(rank=0) for t, k in kinds.items()
    }
    return dict(construct_module_sharding_plan(module, gens, world_size=1))


def _with_options(ps: object, **options: object) -> object:
    return dataclasses.replace(ps, **options)  # type: ignore[type-var]


def test_groups_by_sharding_type_in_table_order() -> None:
    m = _bag_module()
    plan = _plan(m, {"t0": "table_wise", "t1": "data_parallel", "t2": "table_wise"})
    infos = ShardedEmbeddingBagCollection.create_grouped_sharding_infos(
        m, plan, prefix="embedding_bags.", fused_params=None
    )
    assert list(infos) == ["table_wise", "data_parallel"]
    assert [i.embedding_config.name for i in infos["table_wise"]] == ["t0", "t2"]
    assert [i.embedding_config.name for i in infos["data_parallel"]] == ["t1"]
    weights = dict(m.named_parameters())
    for group in infos.values():
        for info in group:
            name = info.embedding_config.name
            assert info.param is weights[f"embedding_bags.{name}.weight"]
            assert info.param_sharding is plan[name]
            assert info.fused_params == {}
    # a feature read by two tables is named feature@table; the others keep their name
    names = {i.embedding_config.name: i.embedding_names for g in infos.values() for i in g}
    assert names == {"t0": ["a"], "t1": ["b", "shared@t1"], "t2": ["shared@t2"]}


@pytest.mark.parametrize("seed", range(5))
def test_merge_precedence_against_naive(seed: int) -> None:
    rng = random.Random(seed)
    m = _bag_module()
    base = _plan(m, {"t0": "table_wise", "t1": "table_wise", "t2": "table_wise"})
    cache = CacheParams(
        algorithm=rng.choice([None, CacheAlgorithm.LRU, CacheAlgorithm.LFU]),
        load_factor=rng.choice([None, 0.1, 0.5]),
        reserved_memory=rng.choice([None, 0.0, 8.0]),
        prefetch_pipeline=rng.choice([None, True]),
    )
    options: dict[str, object] = {
        "cache_params": rng.choice([None, cache]),
        "enforce_hbm": rng.choice([None, True, False]),
        "stochastic_rounding": rng.choice([None, True, False]),
        "bounds_check_mode": rng.choice([None, BoundsCheckMode.IGNORE, BoundsCheckMode.NONE]),
        "key_value_params": rng.choice([None, KeyValueParams(ssd_rocksdb_shards=4)]),
    }
    ps = _with_options(base["t0"], **options)
    sharder = {
        "enforce_hbm": rng.choice([True, False]),
        "cache_load_factor": 0.9,
        "stochastic_rounding": True,
        "learning_rate": 0.5,
        "ABC": 1,
    }
    expected = dict(sharder)
    if options["cache_params"] is not None:
        for field, key in (
            ("algorithm", "cache_algorithm"),
            ("load_factor", "cache_load_factor"),
            ("reserved_memory", "cache_reserved_memory"),
            ("prefetch_pipeline", "prefetch_pipeline"),
        ):
            if getattr(cache, field) is not None:
                expected[key] = getattr(cache, field)
    for key in ("enforce_hbm", "stochastic_rounding", "bounds_check_mode"):
        if options[key] is not None:
            expected[key] = options[key]
    if options["key_value_params"] is not None:
        expected["ssd_rocksdb_shards"] = 4
    assert table_fused_params(sharder, ps) == expected  # type: ignore[arg-type]
    assert sharder["ABC"] == 1 and "cache_algorithm" not in sharder  # input untouched


def test_in_backward_optimizer_between_sharder_and_constraints() -> None:
    m = _bag_module()
    weight = m.embedding_bags["t0"].weight
    apply_optimizer_in_backward(torch.optim.Adagrad, [weight], {"lr": 0.3})
    plan = _plan(m, {"t0": "table_wise", "t1": "table_wise", "t2": "table_wise"})
    plan["t0"] = _with_options(plan["t0"], enforce_hbm=True)
    infos = ShardedEmbeddingBagCollection.create_grouped_sharding_infos(
        m, plan, "embedding_bags.", {"lr": 0.9, "enforce_hbm": False, "x": 1}
    )
    by_name = {i.embedding_config.name: i for i in infos["table_wise"]}
    got = by_name["t0"].fused_params
    assert got["lr"] == 0.3 and got["optimizer"] is EmbOptimType.EXACT_ADAGRAD
    assert got["enforce_hbm"] is True and got["x"] == 1
    assert by_name["t1"].fused_params == {"lr": 0.9, "enforce_hbm": False, "x": 1}


def test_embedding_collection_uses_its_container() -> None:
    tables = [EmbeddingConfig(name="e0", embedding_dim=4, num_embeddings=3, feature_names=["f"])]
    m = EmbeddingCollection(tables=tables)
    plan = _plan(m, {"e0": "data_parallel"})
    infos = ShardedEmbeddingCollection.create_grouped_sharding_infos(m, plan, {"k": 1})
    (info,) = infos["data_parallel"]
    assert info.param is m.embeddings["e0"].weight and info.fused_params == {"k": 1}


def test_bad_input_names_the_table() -> None:
    m = _bag_module()
    plan = _plan(m, {"t0": "table_wise", "t1": "table_wise", "t2": "table_wise"})
    missing = {k: v for k, v in plan.items() if k != "t1"}
    with pytest.raises(ValueError, match="'t1' has no entry in the plan"):
        ShardedEmbeddingBagCollection.create_grouped_sharding_infos(
            m, missing, "embedding_bags.", None
        )
    with pytest.raises(ValueError, match=r"no weight 'wrong\.t0\.weight'.*prefix"):
        ShardedEmbeddingBagCollection.create_grouped_sharding_infos(m, plan, "wrong.", None)
    with pytest.raises(TypeError, match="'t0' must be a ParameterSharding"):
        ShardedEmbeddingBagCollection.create_grouped_sharding_infos(
            m, {**plan, "t0": "table_wise"}, "embedding_bags.", None
        )


@pytest.mark.parametrize("seed", range(4))
def test_merge_fused_params_against_naive(seed: int) -> None:
    rng = random.Random(seed)
    keys = ["learning_rate", "eps", "optimizer", "cache_load_factor"]
    sharder = {k: rng.random() for k in keys if rng.random() < 0.6}
    table: dict[str, object] = {k: rng.random() for k in keys if rng.random() < 0.5}
    if rng.random() < 0.5:
        table.pop("learning_rate", None)
        table["lr"] = rng.random()
    expected = dict(sharder)
    for k, v in table.items():  # the table's settings win; its lr is learning_rate
        expected["learning_rate" if k == "lr" else k] = v
    sharder_before, table_before = dict(sharder), dict(table)
    assert merge_fused_params(sharder, table) == expected
    assert sharder == sharder_before and table == table_before  # inputs untouched
    assert merge_fused_params() == {} and merge_fused_params(None, None) == {}


def test_merge_fused_params_refuses_two_learning_rates() -> None:
    assert merge_fused_params(None, {"lr": 0.1, "learning_rate": 0.1}) == {"learning_rate": 0.1}
    with pytest.raises(ValueError, match=r"both lr=0.1 and learning_rate=0.2"):
        merge_fused_params(None, {"lr": 0.1, "learning_rate": 0.2})


def test_add_params_from_parameter_sharding_is_the_plan_layer() -> None:
    m = _bag_module()
    ps = _with_options(
        _plan(m, {"t0": "table_wise", "t1": "table_wise", "t2": "table_wise"})["t0"],
        cache_params=CacheParams(algorithm=CacheAlgorithm.LFU, reserved_memory=1.0),
        stochastic_rounding=False,
    )
    given = {"learning_rate": 0.1, "cache_algorithm": CacheAlgorithm.LRU}
    got = add_params_from_parameter_sharding(given, ps)  # type: ignore[arg-type]
    assert got == {
        "learning_rate": 0.1,
        "cache_algorithm": CacheAlgorithm.LFU,
        "cache_reserved_memory": 1.0,
        "stochastic_rounding": False,
    }
    assert given["cache_algorithm"] is CacheAlgorithm.LRU  # a new dict
    assert add_params_from_parameter_sharding(None, ps) == table_fused_params(None, ps)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a ParameterSharding, got dict"):
        add_params_from_parameter_sharding(None, {})  # type: ignore[arg-type]
