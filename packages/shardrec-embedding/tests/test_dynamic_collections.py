"""Collections with dynamic (raw-id) tables.

Reference for training: the same collection with static tables fed the ids pre-mapped by
order of first appearance (what a dynamic table without eviction assigns), bit for bit.
"""

from __future__ import annotations

import random

import pytest
import torch

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
    PoolingType,
)
from shardrec_embedding.dynamic import DynamicTableConfig
from shardrec_embedding.fused import FusedEmbeddingBagCollection, fuse_embedding_optimizer
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import SUPPORTED_OPTIONS, EmbOptimType, FusedOptimSpec

CAP = 64
FEATURES = {"f0": "t0", "f1": "t0", "g": "t1"}


def _bag_tables(
    dynamic: bool, pooling: PoolingType = PoolingType.SUM, **dyn: object
) -> list[EmbeddingBagConfig]:
    cfg = DynamicTableConfig(**dyn) if dynamic else None  # type: ignore[arg-type]  # test fields
    return [
        EmbeddingBagConfig(
            name="t0",
            num_embeddings=CAP,
            embedding_dim=8,
            feature_names=["f0", "f1"],
            pooling=pooling,
            dynamic=cfg,
        ),
        EmbeddingBagConfig(
            name="t1",
            num_embeddings=CAP,
            embedding_dim=8,
            feature_names=["g"],
            pooling=pooling,
            dynamic=cfg,
        ),
    ]


def _batches(seed: int, steps: int, batch: int, weighted: bool = False) -> list[KeyedJaggedTensor]:
    rng = random.Random(seed)
    pool = [rng.randrange(-(2**63), 2**63) for _ in range(40)] + [0, -1, 2**63 - 1]
    out = []
    for _ in range(steps):
        lengths = [rng.randrange(4) for _ in range(3 * batch)]  # empty bags included
        values = [rng.choice(pool[: rng.randrange(5, len(pool))]) for _ in range(sum(lengths))]
        weights = (
            torch.rand(len(values), generator=torch.Generator().manual_seed(rng.randrange(99)))
            if weighted
            else None
        )
        out.append(
            KeyedJaggedTensor(
                keys=["f0", "f1", "g"],
                values=torch.tensor(values, dtype=torch.int64),
                lengths=torch.tensor(lengths),
                weights=weights,
            )
        )
    return out


def _premap(batches: list[KeyedJaggedTensor]) -> list[KeyedJaggedTensor]:
    """The same batches with each table's raw ids replaced by their order of first appearance
    (features of a table share its numbering, in key order within a batch)."""
    seen: dict[str, dict[int, int]] = {"t0": {}, "t1": {}}
    out = []
    for kjt in batches:
        parts = []
        # a dynamic table maps all its features' ids at once, in key order
        for table in ("t0", "t1"):
            for key, ids in zip(kjt.keys(), kjt.values().split(kjt.length_per_key()), strict=True):
                if FEATURES[key] == table:
                    for i in ids.tolist():
                        seen[table].setdefault(i, len(seen[table]))
        for key, ids in zip(kjt.keys(), kjt.values().split(kjt.length_per_key()), strict=True):
            parts.append(
                torch.tensor([seen[FEATURES[key]][i] for i in ids.tolist()], dtype=torch.int64)
            )
        out.append(
            KeyedJaggedTensor(
                keys=kjt.keys(),
                values=torch.cat(parts),
                lengths=kjt.lengths(),
                weights=kjt.weights_or_none(),
            )
        )
    return out


def _loss(out: torch.Tensor) -> torch.Tensor:
    return (out * torch.linspace(-1, 1, out.shape[1])).square().sum()


SPECS = [
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_ADAGRAD, learning_rate=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1, eps=1e-3),
    FusedOptimSpec(optimizer=EmbOptimType.ADAM, learning_rate=0.02),
    # issue 27: every fused optimizer the static tables support (SUPPORTED_OPTIONS)
    FusedOptimSpec(optimizer=EmbOptimType.SGD, learning_rate=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.ROWWISE_ADAGRAD, learning_rate=0.1),
    FusedOptimSpec(optimizer=EmbOptimType.PARTIAL_ROWWISE_ADAM, learning_rate=0.02),
    FusedOptimSpec(optimizer=EmbOptimType.LAMB, learning_rate=0.02),
    FusedOptimSpec(optimizer=EmbOptimType.PARTIAL_ROWWISE_LAMB, learning_rate=0.02),
    FusedOptimSpec(optimizer=EmbOptimType.LARS_SGD, learning_rate=0.1, momentum=0.9),
]


def test_specs_cover_every_fused_optimizer() -> None:
    assert {s.optimizer for s in SPECS} == set(SUPPORTED_OPTIONS)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.optimizer.name)
@pytest.mark.parametrize(
    ("pooling", "weighted"),
    [(PoolingType.SUM, False), (PoolingType.SUM, True), (PoolingType.MEAN, False)],
)
def test_fused_training_equals_static_on_premapped_ids(
    spec: FusedOptimSpec, pooling: PoolingType, weighted: bool
) -> None:
    batches = _batches(1, 6, 5, weighted)
    mods = []
    for dynamic in (True, False):
        torch.manual_seed(0)
        mods.append(
            FusedEmbeddingBagCollection(
                _bag_tables(dynamic, pooling, eviction="NONE"), spec, is_weighted=weighted
            )
        )
    dyn, static = mods
    for raw, mapped in zip(batches, _premap(batches), strict=True):
        a, b = dyn(raw).values(), static(mapped).values()
        assert torch.equal(a, b)
        _loss(a).backward()
        _loss(b).backward()
    for name in ("t0", "t1"):
        assert torch.equal(dyn.embedding_bags[name].weight, static.embedding_bags[name].weight)
    assert dyn.dynamic_tables.stats()["t0"]["occupancy"] > 0


@pytest.mark.parametrize("optim", ["sgd", "adagrad"])
def test_dense_gradient_training_equals_static(optim: str) -> None:
    batches = _batches(2, 5, 4, weighted=True)
    mods, opts = [], []
    for dynamic in (True, False):
        torch.manual_seed(0)
        m = EmbeddingBagCollection(_bag_tables(dynamic, eviction="NONE"), is_weighted=True)
        mods.append(m)
        opts.append(
            torch.optim.SGD(m.parameters(), lr=0.1)
            if optim == "sgd"
            else torch.optim.Adagrad(m.parameters(), lr=0.1)
        )
    for raw, mapped in zip(batches, _premap(batches), strict=True):
        for m, o, kjt in zip(mods, opts, (raw, mapped), strict=True):
            o.zero_grad()
            _loss(m(kjt).values()).backward()
            o.step()
    assert torch.equal(mods[0].embedding_bags["t0"].weight, mods[1].embedding_bags["t0"].weight)
    assert torch.equal(mods[0].embedding_bags["t1"].weight, mods[1].embedding_bags["t1"].weight)


def test_sequence_collection_equals_static() -> None:
    batches = _batches(3, 4, 3)
    mods = []
    for dynamic in (True, False):
        cfg = DynamicTableConfig(eviction="NONE") if dynamic else None
        torch.manual_seed(0)
        mods.append(
            EmbeddingCollection(
                [
                    EmbeddingConfig(
                        name="t0",
                        num_embeddings=CAP,
                        embedding_dim=4,
                        feature_names=["f0", "f1"],
                        dynamic=cfg,
                    ),
                    EmbeddingConfig(
                        name="t1",
                        num_embeddings=CAP,
                        embedding_dim=4,
                        feature_names=["g"],
                        dynamic=cfg,
                    ),
                ],
                need_indices=True,
            )
        )
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in mods]
    for raw, mapped in zip(batches, _premap(batches), strict=True):
        outs = [m(k) for m, k in zip(mods, (raw, mapped), strict=True)]
        for key in outs[1]:
            assert torch.equal(outs[0][key].values(), outs[1][key].values())
            assert torch.equal(outs[0][key].lengths(), outs[1][key].lengths())
        assert torch.equal(outs[0]["g"].weights(), raw["g"].values())  # raw ids, not slots
        for o, out in zip(opts, outs, strict=True):
            o.zero_grad()
            sum(_loss(jt.values()) for jt in out.values()).backward()  # type: ignore[union-attr]
            o.step()
    assert torch.equal(mods[0].embeddings["t0"].weight, mods[1].embeddings["t0"].weight)


def _one(
    key_ids: dict[str, list[list[int]]], weights: list[float] | None = None
) -> KeyedJaggedTensor:
    keys = list(key_ids)
    lengths = [len(bag) for k in keys for bag in key_ids[k]]
    values = [i for k in keys for bag in key_ids[k] for i in bag]
    return KeyedJaggedTensor(
        keys=keys,
        values=torch.tensor(values, dtype=torch.int64),
        lengths=torch.tensor(lengths),
        weights=None if weights is None else torch.tensor(weights),
    )


def _const_table(pooling: PoolingType = PoolingType.SUM, **dyn: object) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name="t",
            num_embeddings=2,
            embedding_dim=2,
            feature_names=["f"],
            pooling=pooling,
            weight_init_min=0.5,
            weight_init_max=0.5,
            dynamic=DynamicTableConfig(**dyn),
        )
    ]  # type: ignore[arg-type]


def test_evicted_slot_is_reset_row_and_optimizer_state() -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.5)
    m = FusedEmbeddingBagCollection(_const_table(eviction="LRU", scan_per_step=1), spec)
    for ids in ([[10]], [[20]]):  # fill both slots, train them
        _loss(m(_one({"f": ids})).values()).backward()
    state = m._lookups[0].optimizer_state()["momentum1"]
    assert bool((state > 0).all())
    out = m(_one({"f": [[30]]})).values()  # evicts 10 (least recently seen) from slot 0
    assert m.dynamic_tables.table("t").find(torch.tensor([10, 20, 30])).tolist() == [-1, 1, 0]
    assert torch.equal(out, torch.full((1, 2), 0.5))  # the initializer's row, not 10's
    assert state[0].item() == 0.0 and state[1].item() > 0
    assert m.dynamic_tables.stats()["t"]["evictions"] == 1


def test_dense_optimizer_state_reset_with_track_optimizer() -> None:
    m = EmbeddingBagCollection(_const_table(eviction="LRU"))
    opt = torch.optim.Adagrad(m.parameters(), lr=0.5, initial_accumulator_value=0.25)
    m.dynamic_tables.track_optimizer(opt)
    for ids in ([[10]], [[20]]):
        opt.zero_grad()
        _loss(m(_one({"f": ids})).values()).backward()
        opt.step()
    m(_one({"f": [[30]]}))
    acc = opt.state[m.embedding_bags["t"].weight]["sum"]
    assert torch.equal(acc[0], torch.full((2,), 0.25)) and bool((acc[1] > 0.25).all())
    assert torch.equal(m.embedding_bags["t"].weight[0].detach(), torch.full((2,), 0.5))


@pytest.mark.parametrize("pooling", [PoolingType.SUM, PoolingType.MEAN])
def test_not_admitted_ids_read_zero_and_get_no_update(pooling: PoolingType) -> None:
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_SGD, learning_rate=0.5)
    m = FusedEmbeddingBagCollection(
        _const_table(pooling, admission="THRESHOLD", admission_threshold=2), spec
    )
    out = m(_one({"f": [[7, 8, 8], []]})).values()  # 8 admitted (2 sightings), 7 not
    expected = 1.0 if pooling is PoolingType.SUM else 1.0 / 3  # 7 reads a zero row
    assert torch.allclose(out, torch.tensor([[expected] * 2, [0.0, 0.0]]))
    out.sum().backward()
    w = m.embedding_bags["t"].weight
    assert w[1].tolist() == [0.5, 0.5]  # slot 1 is free: untouched
    assert m.dynamic_tables.stats()["t"] | {} == {
        "capacity": 2,
        "occupancy": 1,
        "admissions": 1,
        "rejections": 1,
        "evictions": 0,
        "unknown_reads": 0,
        "steps": 1,
    }


def test_evaluation_inserts_nothing_and_reads_the_default() -> None:
    tables = [
        EmbeddingBagConfig(
            name="t",
            num_embeddings=4,
            embedding_dim=2,
            feature_names=["f"],
            pooling=PoolingType.MEAN,
            dynamic=DynamicTableConfig(unknown_id="DEFAULT_ROW"),
        )
    ]
    m = EmbeddingBagCollection(tables).eval()
    m.dynamic_tables.table("t").default_row.fill_(3.0)
    out = m(_one({"f": [[1, 2], []]})).values()
    assert torch.equal(out, torch.tensor([[3.0, 3.0], [0.0, 0.0]]))
    assert m.dynamic_tables.stats()["t"]["occupancy"] == 0
    assert m.dynamic_tables.stats()["t"]["unknown_reads"] == 2
    m.train()
    m(_one({"f": [[1], []]}))
    m.eval()
    w = m.embedding_bags["t"].weight.detach()
    out = m(_one({"f": [[1, 2], [2]]})).values()
    assert torch.allclose(out, torch.stack([(w[0] + 3.0) / 2, torch.full((2,), 3.0)]))


def test_weighted_default_row_and_zero_batch() -> None:
    tables = [
        EmbeddingBagConfig(
            name="t",
            num_embeddings=4,
            embedding_dim=2,
            feature_names=["f"],
            dynamic=DynamicTableConfig(unknown_id="DEFAULT_ROW"),
        )
    ]
    m = EmbeddingBagCollection(tables, is_weighted=True).eval()
    m.dynamic_tables.table("t").default_row.fill_(1.0)
    out = m(_one({"f": [[5, 6]]}, [2.0, 0.5])).values()
    assert torch.equal(out, torch.full((1, 2), 2.5))
    empty = KeyedJaggedTensor(
        keys=["f"],
        values=torch.empty(0, dtype=torch.int64),
        lengths=torch.empty(0, dtype=torch.int64),
        weights=torch.empty(0),
    )
    assert m.train()(empty).values().shape == (0, 2)


def test_fuse_embedding_optimizer_keeps_the_map() -> None:
    m = EmbeddingBagCollection(_bag_tables(True))
    kjt = _batches(4, 1, 3)[0]
    before = m(kjt).values()
    fused = fuse_embedding_optimizer(m, EmbOptimType.EXACT_SGD, {"lr": 0.1}, device=None)
    assert isinstance(fused, FusedEmbeddingBagCollection)
    assert torch.equal(fused.eval()(kjt).values(), before)
    assert fused.dynamic_tables.stats()["t0"]["unknown_reads"] == 0


def test_bad_inputs() -> None:
    m = EmbeddingBagCollection(_bag_tables(True))
    with pytest.raises(TypeError, match="integer"):
        m(
            KeyedJaggedTensor(
                keys=["f0", "f1", "g"],
                values=torch.tensor([1.0, 2.0, 3.0]),
                lengths=torch.tensor([1, 1, 1]),
            )
        )
    extreme = _one({"f0": [[-(2**63), 2**63 - 1]], "f1": [[0]], "g": [[-1]]})
    assert m(extreme).values().shape == (1, 24)  # any int64 is a valid raw id


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"capacity": 0}, "capacity must be >= 1"),
        ({"capacity": 5}, "differs from num_embeddings 64"),
        ({"eviction": "MRU"}, "eviction 'MRU' is not one of"),
        ({"admission": "SOMETIMES"}, "admission 'SOMETIMES' is not one of"),
        ({"admission_threshold": 0}, "admission_threshold must be >= 1"),
        ({"eviction": "TTL", "ttl_steps": 0}, "ttl_steps must be >= 1"),
        ({"eviction": "TTL"}, "needs ttl_steps"),
        ({"ttl_steps": 3}, "set eviction='TTL'"),
        ({"admission_probability": 0.0}, r"in \(0, 1\]"),
        ({"load_factor": 0.99}, "load_factor"),
        ({"unknown_id": "RANDOM"}, "unknown_id 'RANDOM'"),
    ],
)
def test_config_errors_name_table_value_and_fix(fields: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        _bag_tables(True, **fields)
    assert "table 't0'" in str(info.value)


def test_config_errors_capacity_zero_and_shared_feature() -> None:
    with pytest.raises(ValueError, match="table 'x': dynamic capacity"):
        EmbeddingBagConfig(
            name="x", num_embeddings=0, embedding_dim=2, dynamic=DynamicTableConfig()
        )
    with pytest.raises(TypeError, match="DynamicTableConfig"):
        EmbeddingBagConfig(name="x", num_embeddings=2, embedding_dim=2, dynamic={"capacity": 2})  # type: ignore[arg-type]
    tables = [
        EmbeddingBagConfig(
            name="a",
            num_embeddings=4,
            embedding_dim=2,
            feature_names=["f"],
            dynamic=DynamicTableConfig(),
        ),
        EmbeddingBagConfig(name="b", num_embeddings=4, embedding_dim=2, feature_names=["f"]),
    ]
    with pytest.raises(ValueError, match="read by dynamic table 'a' and by"):
        EmbeddingBagCollection(tables)


def test_state_dict_round_trip_continues_identically() -> None:
    batches = _batches(6, 6, 4)
    spec = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)
    a = FusedEmbeddingBagCollection(_bag_tables(True, eviction="LRU", scan_per_step=4), spec)
    for kjt in batches[:3]:
        _loss(a(kjt).values()).backward()
    b = FusedEmbeddingBagCollection(_bag_tables(True, eviction="LRU", scan_per_step=4), spec)
    b.load_state_dict(a.state_dict())
    b.fused_optimizer.load_state_dict(a.fused_optimizer.state_dict())
    for kjt in batches[3:]:
        x, y = a(kjt).values(), b(kjt).values()
        assert torch.equal(x, y)
        _loss(x).backward()
        _loss(y).backward()
    assert a.dynamic_tables.stats() == b.dynamic_tables.stats()


def test_stats_readable_from_a_model() -> None:
    from torch import nn

    from shardrec_embedding import dynamic_table_stats

    model = nn.Sequential(EmbeddingBagCollection(_bag_tables(True)))
    model(_batches(7, 1, 3)[0])
    stats = dynamic_table_stats(model)
    assert set(stats) == {"0.t0", "0.t1"}
    assert stats["0.t0"]["admissions"] == stats["0.t0"]["occupancy"] > 0
    assert all(isinstance(v, int) for v in stats["0.t1"].values())


def test_feature_processor_equals_static() -> None:
    from shardrec_embedding.feature_processors import (
        FeatureProcessedEmbeddingBagCollection,
        PositionWeightedModule,
    )

    batches = _batches(8, 3, 4)
    outs = []
    for dynamic, data in ((True, batches), (False, _premap(batches))):
        torch.manual_seed(0)
        ebc = EmbeddingBagCollection(_bag_tables(dynamic, eviction="NONE"), is_weighted=True)
        processors = {f: PositionWeightedModule(4) for f in FEATURES}
        for p in processors.values():
            torch.nn.init.uniform_(
                p.position_weight, 0.5, 1.5, generator=torch.Generator().manual_seed(1)
            )
        fp = FeatureProcessedEmbeddingBagCollection(ebc, processors)
        outs.append([fp(kjt).values() for kjt in data])
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)


def test_script_and_trace_refuse_dynamic_tables() -> None:
    import shardrec_jagged.fx as jagged_fx

    for module in (
        EmbeddingBagCollection(_bag_tables(True)),
        EmbeddingCollection(
            [
                EmbeddingConfig(
                    name="t", num_embeddings=4, embedding_dim=2, dynamic=DynamicTableConfig()
                )
            ]
        ),
    ):
        with pytest.raises(NotImplementedError, match="dynamic"):
            torch.jit.script(module)
        with pytest.raises(NotImplementedError, match="dynamic"):
            jagged_fx.symbolic_trace(module)


def test_id_map_state_stays_on_cpu_and_survives_to_empty() -> None:
    m = EmbeddingBagCollection(_bag_tables(True), device="meta")
    m.to_empty(device="cpu")
    m.reset_parameters()
    table = m.dynamic_tables.table("t0")
    assert table.slot_ids.device.type == "cpu" and table.default_row.dtype is torch.float32
    out = m.half()(_batches(9, 1, 2)[0]).values()
    assert out.dtype is torch.float32 and table.default_row.dtype is torch.float32


@pytest.mark.parametrize("static_first", [True, False])
def test_remap_keeps_static_features_and_maps_dynamic_ones(static_first: bool) -> None:
    """A collection of a dynamic and a static table: the remap copies the static feature's
    ids as given and writes every dynamic feature's slots (all-dynamic collections skip the
    copy and write every span)."""
    tables = [
        EmbeddingBagConfig(
            name="d",
            num_embeddings=CAP,
            embedding_dim=4,
            feature_names=["fd"],
            dynamic=DynamicTableConfig(),
        ),
        EmbeddingBagConfig(name="s", num_embeddings=CAP, embedding_dim=4, feature_names=["fs"]),
    ]
    ebc = EmbeddingBagCollection(tables=tables)
    keys = ["fs", "fd"] if static_first else ["fd", "fs"]
    raw = {"fd": [2**62 + 5, -7, 2**62 + 5, 11], "fs": [3, 0, 5]}
    kjt = KeyedJaggedTensor(
        keys=keys,
        values=torch.tensor(raw[keys[0]] + raw[keys[1]]),
        lengths=torch.tensor([len(raw[keys[0]]), 0, 0, len(raw[keys[1]])]),
    )
    out = ebc.dynamic_tables.remap(kjt, training=True, owner="test").features.to_dict()
    assert out["fs"].values().tolist() == raw["fs"]
    slots = ebc.dynamic_tables.table("d").find(torch.tensor(raw["fd"]))
    assert out["fd"].values().tolist() == slots.tolist()
    assert int(slots.min()) >= 0 and slots[0] == slots[2]
