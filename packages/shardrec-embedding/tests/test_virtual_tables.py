"""TorchRec's virtual tables (`use_virtual_table=True`) run as raw-id tables.

Reference: the equivalent explicit table (`dynamic=DynamicTableConfig(...)` of the capacity,
or a plain table of the whole id space when no capacity is given), trained on the same
batches: bit for bit the same outputs, rows, optimizer state and id maps.
"""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
import torch

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
)
from shardrec_embedding.dynamic import DynamicTableConfig
from shardrec_embedding.fused import FusedEmbeddingBagCollection
from shardrec_embedding.virtual import (
    MAX_IMPLICIT_CAPACITY,
    CountBasedEvictionPolicy,
    CountTimestampMixedEvictionPolicy,
    FeatureL2NormBasedEvictionPolicy,
    FeatureScoreBasedEvictionPolicy,
    NoEvictionPolicy,
    TimestampBasedEvictionPolicy,
    VirtualTableEvictionPolicy,
    as_dynamic_table,
)
from shardrec_jagged import KeyedJaggedTensor
from shardrec_optim import EmbOptimType, FusedOptimSpec

SPACE = 1 << 50
CAP = 24
INIT = math.sqrt(1 / 4_000_000_000)
SPEC = FusedOptimSpec(optimizer=EmbOptimType.EXACT_ROWWISE_ADAGRAD, learning_rate=0.1)


def _virtual(policy: VirtualTableEvictionPolicy | None, **dyn: object) -> EmbeddingBagConfig:
    return EmbeddingBagConfig(
        name="t",
        num_embeddings=SPACE,
        embedding_dim=4,
        feature_names=["f", "g"],
        use_virtual_table=True,
        virtual_table_eviction_policy=policy,
        dynamic=DynamicTableConfig(capacity=CAP, **dyn),  # type: ignore[arg-type]  # test fields
    )


def _explicit(**dyn: object) -> EmbeddingBagConfig:
    return EmbeddingBagConfig(
        name="t",
        num_embeddings=CAP,
        embedding_dim=4,
        feature_names=["f", "g"],
        weight_init_min=-INIT,
        weight_init_max=INIT,
        dynamic=DynamicTableConfig(**dyn),  # type: ignore[arg-type]  # test fields
    )


def _batches(seed: int, steps: int, space: int) -> list[KeyedJaggedTensor]:
    """Raw ids from a pool larger than CAP (eviction happens), empty bags included."""
    rng = random.Random(seed)
    pool = [rng.randrange(space) for _ in range(3 * CAP)] + [0, space - 1]
    out = []
    for _ in range(steps):
        lengths = [rng.randrange(4) for _ in range(2 * 5)]
        values = [rng.choice(pool) for _ in range(sum(lengths))]
        out.append(
            KeyedJaggedTensor(
                keys=["f", "g"],
                values=torch.tensor(values, dtype=torch.int64),
                lengths=torch.tensor(lengths),
            )
        )
    return out


def _same(a: object, b: object) -> bool:
    """Bitwise equality of nested state (tensors, dicts, lists, scalars)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))  # type: ignore[arg-type]
    return a == b


def _loss(out: torch.Tensor) -> torch.Tensor:
    return (out * torch.linspace(-1, 1, out.shape[1])).square().sum()


@pytest.mark.parametrize(
    ("policy", "dyn", "eviction", "ttl"),
    [
        (None, {}, "LRU", None),
        (NoEvictionPolicy(), {}, "NONE", None),
        (CountBasedEvictionPolicy(), {}, "LFU", None),
        (CountBasedEvictionPolicy(eviction_threshold=0), {}, "NONE", None),
        (TimestampBasedEvictionPolicy(), {"ttl_steps": 3}, "TTL", 3),
        (TimestampBasedEvictionPolicy(eviction_ttl_mins=0), {}, "NONE", None),
        (FeatureScoreBasedEvictionPolicy(enable_eviction=False), {}, "NONE", None),
        (FeatureL2NormBasedEvictionPolicy(), {}, "NONE", None),
        (CountBasedEvictionPolicy(), {"eviction": "LFU"}, "LFU", None),
    ],
    ids=["none-lru", "no-eviction", "count", "count-0", "timestamp", "ttl-0", "score-off",
         "l2-0", "count-lfu-again"],
)  # fmt: skip
def test_policy_maps_to_the_raw_id_eviction(
    policy: VirtualTableEvictionPolicy | None,
    dyn: dict[str, object],
    eviction: str,
    ttl: int | None,
) -> None:
    runs = as_dynamic_table(_virtual(policy, **dyn))
    assert runs.dynamic is not None
    assert (runs.dynamic.eviction.value, runs.dynamic.ttl_steps) == (eviction, ttl)
    assert (runs.num_embeddings, runs.dynamic.capacity, runs.use_virtual_table) == (CAP, CAP, False)
    assert (runs.weight_init_min, runs.weight_init_max) == (-INIT, INIT)


@pytest.mark.parametrize(
    ("policy", "dyn", "error", "match"),
    [
        (CountTimestampMixedEvictionPolicy(), {}, ValueError,
         r"table 't': .*CountTimestampMixedEvictionPolicy is not supported.*CountBasedEviction"),
        (FeatureScoreBasedEvictionPolicy(), {}, ValueError,
         r"table 't': .*FeatureScoreBasedEvictionPolicy is not supported.*NoEvictionPolicy"),
        (FeatureL2NormBasedEvictionPolicy(eviction_threshold=0.5), {}, ValueError,
         r"table 't': .*FeatureL2NormBasedEvictionPolicy is not supported"),
        (VirtualTableEvictionPolicy(), {}, ValueError,
         r"table 't': .*VirtualTableEvictionPolicy is not a policy shardrec knows.*CountBased"),
        ("LRU", {}, TypeError,
         r"table 't': virtual_table_eviction_policy must be a VirtualTableEvictionPolicy.*'LRU'"),
        (CountBasedEvictionPolicy(eviction_threshold=-1), {}, ValueError,
         r"table 't': .*eviction_threshold must be an int >= 0, got -1"),
        (CountBasedEvictionPolicy(decay_rate=0.0), {}, ValueError,
         r"table 't': .*decay_rate must be a number in \(0, 1\], got 0.0"),
        (CountBasedEvictionPolicy(training_id_eviction_trigger_count=-5), {}, ValueError,
         r"table 't': .*training_id_eviction_trigger_count must be an int >= 0, got -5"),
        (TimestampBasedEvictionPolicy(eviction_ttl_mins=-1), {}, ValueError,
         r"table 't': .*eviction_ttl_mins must be an int >= 0, got -1"),
        (TimestampBasedEvictionPolicy(eviction_ttl_mins=60), {}, ValueError,
         r"table 't': TimestampBasedEvictionPolicy\(eviction_ttl_mins=60\) counts wall-clock "
         r"minutes.*dynamic=DynamicTableConfig\(ttl_steps=N\)"),
        (CountBasedEvictionPolicy(), {"eviction": "TTL", "ttl_steps": 2}, ValueError,
         r"table 't': dynamic eviction TTL disagrees with virtual_table_eviction_policy "
         r"CountBasedEvictionPolicy \(runs as LFU\); give the eviction in one place"),
        (NoEvictionPolicy(), {"ttl_steps": 2}, ValueError,
         r"table 't': dynamic ttl_steps 2 is given but eviction is NONE"),
    ],
    ids=["mixed", "score", "l2", "base", "string", "threshold", "decay", "trigger", "ttl-neg",
         "ttl-no-steps", "disagree", "steps-no-ttl"],
)  # fmt: skip
def test_bad_policies_name_table_value_and_fix(
    policy: object, dyn: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        _virtual(policy, **dyn)  # type: ignore[arg-type]  # bad input on purpose


def test_refusals_without_a_capacity_and_of_a_stray_policy() -> None:
    big = EmbeddingBagConfig(
        name="t", num_embeddings=SPACE, embedding_dim=4, use_virtual_table=True
    )
    with pytest.raises(
        ValueError,
        match=rf"table 't': use_virtual_table=True with num_embeddings {SPACE} \(the virtual id "
        r"space\) needs a capacity.*dynamic=DynamicTableConfig\(capacity=N\)",
    ):
        EmbeddingBagCollection([big])
    with pytest.raises(ValueError, match="needs a capacity"):
        EmbeddingCollection(
            [
                EmbeddingConfig(
                    name="t", num_embeddings=SPACE, embedding_dim=4, use_virtual_table=True
                )
            ]
        )
    # on the meta device (planning only) the config is kept as declared
    meta = EmbeddingBagCollection([big], device="meta")
    assert meta.embedding_bag_configs()[0] == big
    with pytest.raises(
        ValueError,
        match=r"table 't': virtual_table_eviction_policy NoEvictionPolicy is given but "
        r"use_virtual_table is False; set use_virtual_table=True",
    ):
        EmbeddingBagConfig(
            name="t",
            num_embeddings=4,
            embedding_dim=4,
            virtual_table_eviction_policy=NoEvictionPolicy(),
        )


@pytest.mark.parametrize(
    ("policy", "dyn"),
    [
        (CountBasedEvictionPolicy(), {}),
        (TimestampBasedEvictionPolicy(), {"ttl_steps": 2, "scan_per_step": 8}),
        (None, {"eviction": "LRU", "scan_per_step": 8}),
        (NoEvictionPolicy(), {"admission": "THRESHOLD", "admission_threshold": 2}),
    ],
    ids=["lfu", "ttl", "lru", "none-threshold"],
)
def test_fused_training_equals_the_explicit_dynamic_table(
    policy: VirtualTableEvictionPolicy | None, dyn: dict[str, object]
) -> None:
    virtual = _virtual(policy, **dyn)
    runs = as_dynamic_table(virtual)
    assert runs.dynamic is not None
    explicit_dyn = {**dyn, "eviction": runs.dynamic.eviction.value}
    mods = []
    for tables in ([virtual], [_explicit(**explicit_dyn)]):
        torch.manual_seed(0)
        mods.append(FusedEmbeddingBagCollection(tables, SPEC))
    a, b = mods
    for kjt in _batches(1, 8, SPACE):
        x, y = a(kjt).values(), b(kjt).values()
        assert torch.equal(x, y)
        _loss(x).backward()
        _loss(y).backward()
    assert _same(a.state_dict(), b.state_dict())
    assert a.dynamic_tables.stats() == b.dynamic_tables.stats()
    if policy is not None and runs.dynamic.eviction.value != "NONE":
        assert a.dynamic_tables.stats()["t"]["evictions"] > 0


def test_sequence_collection_and_dense_gradients_equal_the_explicit_table() -> None:
    def ec(virtual: bool) -> EmbeddingCollection:
        cfg = EmbeddingConfig(
            name="t",
            num_embeddings=SPACE if virtual else CAP,
            embedding_dim=4,
            feature_names=["f", "g"],
            use_virtual_table=virtual,
            virtual_table_eviction_policy=CountBasedEvictionPolicy() if virtual else None,
            weight_init_min=None if virtual else -INIT,
            weight_init_max=None if virtual else INIT,
            dynamic=DynamicTableConfig(capacity=CAP, eviction="LFU"),
        )
        torch.manual_seed(0)
        return EmbeddingCollection([cfg])

    mods = [ec(True), ec(False)]
    opts = [torch.optim.Adagrad(m.parameters(), lr=0.1) for m in mods]
    for kjt in _batches(2, 6, SPACE):
        outs = []
        for m, o in zip(mods, opts, strict=True):
            o.zero_grad()
            out = torch.cat([jt.values() for jt in m(kjt).values()])
            _loss(out).backward()
            o.step()
            outs.append(out.detach())
        assert torch.equal(outs[0], outs[1])
    assert torch.equal(mods[0].embeddings["t"].weight, mods[1].embeddings["t"].weight)


def test_a_small_id_space_without_capacity_runs_as_a_plain_table() -> None:
    space = 40
    virtual = EmbeddingBagConfig(
        name="t",
        num_embeddings=space,
        embedding_dim=4,
        feature_names=["f", "g"],
        use_virtual_table=True,
        total_num_buckets=8,
        virtual_table_eviction_policy=CountBasedEvictionPolicy(),
    )
    plain = EmbeddingBagConfig(
        name="t",
        num_embeddings=space,
        embedding_dim=4,
        feature_names=["f", "g"],
        total_num_buckets=8,
        weight_init_min=-INIT,
        weight_init_max=INIT,
    )
    assert as_dynamic_table(virtual) == plain
    mods = []
    for cfg in (virtual, plain):
        torch.manual_seed(0)
        mods.append(FusedEmbeddingBagCollection([cfg], SPEC))
    for kjt in _batches(3, 5, space):
        x, y = mods[0](kjt).values(), mods[1](kjt).values()
        assert torch.equal(x, y)
        _loss(x).backward()
        _loss(y).backward()
    assert torch.equal(mods[0].embedding_bags["t"].weight, mods[1].embedding_bags["t"].weight)
    # the largest implicit space still runs as a plain table (on meta: no memory)
    edge = EmbeddingBagConfig(
        name="t", num_embeddings=MAX_IMPLICIT_CAPACITY, embedding_dim=4, use_virtual_table=True
    )
    assert as_dynamic_table(edge).dynamic is None


def test_capacity_keeps_buckets_and_the_space_and_refuses_buckets_not_dividing_it() -> None:
    space = 1_125_899_902_955_520
    cfg = EmbeddingBagConfig(
        name="t",
        num_embeddings=space,
        embedding_dim=4,
        use_virtual_table=True,
        total_num_buckets=3_991_680,
        dynamic=DynamicTableConfig(capacity=2 * 3_991_680),
    )
    runs = as_dynamic_table(cfg)
    assert runs.total_num_buckets == 3_991_680 and runs.id_space == space
    odd = dataclasses.replace(cfg, dynamic=DynamicTableConfig(capacity=1000))
    with pytest.raises(
        ValueError, match=r"'t': capacity 1000 is not a multiple of total_num_buckets 3991680"
    ):
        as_dynamic_table(odd)
    no_buckets = dataclasses.replace(cfg, total_num_buckets=None)
    assert as_dynamic_table(no_buckets).id_space is None


def test_state_dict_loads_into_the_explicit_table_and_continues() -> None:
    virtual = _virtual(CountBasedEvictionPolicy())
    a = FusedEmbeddingBagCollection([virtual], SPEC)
    batches = _batches(4, 8, SPACE)
    for kjt in batches[:4]:
        _loss(a(kjt).values()).backward()
    b = FusedEmbeddingBagCollection([_explicit(eviction="LFU")], SPEC)
    b.load_state_dict(a.state_dict())
    b.fused_optimizer.load_state_dict(a.fused_optimizer.state_dict())
    for kjt in batches[4:]:
        x, y = a(kjt).values(), b(kjt).values()
        assert torch.equal(x, y)
        _loss(x).backward()
        _loss(y).backward()


def test_metaheader_follows_torchrec() -> None:
    p = CountBasedEvictionPolicy()
    p.init_metaheader_config("FP16", 8)  # type: ignore[arg-type]  # TorchRec passes DataType
    assert (p.get_meta_header_len(), p.get_embedding_dim()) == (8, 8)
    assert p.inference_eviction_threshold == p.eviction_threshold == 15


def test_quantized_copy_serves_the_trained_raw_ids() -> None:
    from _quant_cases import qconfig

    from shardrec_embedding.quant import QuantEmbeddingBagCollection

    virtual = _virtual(CountBasedEvictionPolicy())
    ebc = EmbeddingBagCollection([virtual])
    opt = torch.optim.SGD(ebc.parameters(), lr=0.5)
    batches = _batches(5, 6, SPACE)
    for kjt in batches:
        opt.zero_grad()
        _loss(ebc(kjt).values()).backward()
        opt.step()
    ebc.eval()
    ebc.qconfig = qconfig(torch.float16)
    q = QuantEmbeddingBagCollection.from_float(ebc)
    for kjt in batches[-2:]:  # trained ids and evicted ones (they read zero in both)
        torch.testing.assert_close(q(kjt).values(), ebc(kjt).values(), atol=1e-3, rtol=1e-3)
    # built directly from the virtual config, the quantized module is a raw-id table too
    direct = QuantEmbeddingBagCollection([_virtual(None)])
    assert direct.embedding_bag_configs()[0].dynamic is not None


def test_a_dynamic_config_without_capacity_over_a_large_space_is_refused_on_meta_too() -> None:
    cfg = EmbeddingBagConfig(
        name="t",
        num_embeddings=SPACE,
        embedding_dim=4,
        use_virtual_table=True,
        dynamic=DynamicTableConfig(eviction="LFU"),
    )
    with pytest.raises(ValueError, match=r"table 't': .*needs a capacity"):
        EmbeddingBagCollection([cfg], device="meta")
