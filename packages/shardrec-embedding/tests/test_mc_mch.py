"""MCHManagedCollisionModule and ManagedCollisionCollection against a plain-Python model of
TorchRec's MCH (`_mch_reference`), on random id streams and named edge cases."""

from __future__ import annotations

import pytest
import torch
from _mch_reference import INT64_MAX, MCHModel, distance_lfu, lfu, lru

from shardrec_embedding import EmbeddingBagConfig
from shardrec_embedding.mc import (
    DistanceLFU_EvictionPolicy,
    LFU_EvictionPolicy,
    LRU_EvictionPolicy,
    ManagedCollisionCollection,
    MCHEvictionPolicy,
    MCHManagedCollisionModule,
)
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor

POLICIES = {
    "lfu": (LFU_EvictionPolicy, lfu),
    "lru": (LRU_EvictionPolicy, lru),
    "distance_lfu": (DistanceLFU_EvictionPolicy, distance_lfu),
}


def _module(
    policy: MCHEvictionPolicy, zch: int = 8, interval: int = 1
) -> MCHManagedCollisionModule:
    return MCHManagedCollisionModule(
        zch_size=zch, device=torch.device("cpu"), eviction_policy=policy, eviction_interval=interval
    )


def _jt(ids: list[int]) -> dict[str, JaggedTensor]:
    values = torch.tensor(ids, dtype=torch.int64)
    return {"t": JaggedTensor(values=values, lengths=torch.ones(len(ids), dtype=torch.int64))}


def _state(m: MCHManagedCollisionModule) -> list[tuple[int, int]]:
    return list(
        zip(m._mch_sorted_raw_ids.tolist(), m._mch_remapped_ids_mapping.tolist(), strict=True)
    )


def _model_state(model: MCHModel) -> list[tuple[int, int]]:
    return [(s.raw, s.row) for s in model.slots]


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("interval", [1, 3])
@pytest.mark.parametrize("seed", range(4))
def test_random_stream_matches_reference(policy: str, interval: int, seed: int) -> None:
    """Remapped ids, slot state and evicted rows equal the model's after every forward."""
    g = torch.Generator().manual_seed(seed)
    make, score = POLICIES[policy]
    m = _module(make(), zch=8, interval=interval)
    model = MCHModel(8, interval, score)
    pool = torch.tensor([-(1 << 62), -7, 0, 3, 5, 11, 12, 40, 41, 1 << 40, 99, 123456789])
    for step in range(12):
        n = int(torch.randint(0, 14, (1,), generator=g))
        ids = pool[torch.randint(0, pool.numel(), (n,), generator=g)].tolist()
        out = m(_jt(ids))["t"].values().tolist()
        assert out == model.train_step(ids), f"step {step}"
        assert _state(m) == _model_state(model), f"step {step}"
        got = m.evict()
        assert (None if got is None else sorted(got.tolist())) == model.take_evicted()
        assert m.open_slots().item() == sum(s.raw == INT64_MAX for s in model.slots[:-1])
        held = sum(s.raw != INT64_MAX for s in model.slots[:-1])
        assert m.stats.admissions - m.stats.evictions == held  # every held id was admitted once


def test_ids_are_remapped_into_range_and_distinct_ids_get_distinct_rows() -> None:
    m = _module(LFU_EvictionPolicy(), zch=16)
    ids = [5, 1 << 50, -3, 5, 7, 9, -3]
    m(_jt(ids))
    rows = m(_jt(ids))["t"].values()
    assert int(rows.min()) >= 0 and int(rows.max()) < 16
    by_id = dict(zip(ids, rows.tolist(), strict=True))
    assert len(set(by_id.values())) == len(by_id)  # collision-free while slots remain
    assert 15 not in by_id.values()  # the miss row belongs to no id


def test_surviving_ids_keep_their_rows() -> None:
    m = _module(LFU_EvictionPolicy(), zch=6)
    first = m(_jt([1, 1, 2, 2, 3]))["t"].values().tolist()
    later = m(_jt([1, 2, 3, 1, 2, 3, 9]))["t"].values().tolist()
    assert later[:3] == first[0:5:2] and later[3:6] == later[:3]


def test_eval_reads_without_admitting() -> None:
    m = _module(LRU_EvictionPolicy(), zch=4)
    m(_jt([1, 2]))
    before = _state(m)
    m.eval()
    assert m(_jt([7, 1]))["t"].values().tolist()[0] == 3
    assert _state(m) == before and m._current_iter_tensor.item() == 1


def test_empty_first_batch_does_not_disable_admission() -> None:
    m = _module(LFU_EvictionPolicy(), zch=4)
    model = MCHModel(4, 1, lfu)
    assert m(_jt([]))["t"].values().numel() == 0
    model.train_step([])
    out = m(_jt([42]))["t"].values().tolist()
    assert out == model.train_step([42]) and out != [3]


def test_int32_ids_keep_their_dtype() -> None:
    m = _module(LFU_EvictionPolicy(), zch=4)
    values = torch.tensor([3, 4], dtype=torch.int32)
    out = m({"t": JaggedTensor(values=values, lengths=torch.tensor([2]))})["t"].values()
    assert out.dtype == torch.int32 and out.tolist() == MCHModel(4, 1, lfu).train_step([3, 4])


def test_state_dict_round_trip_keeps_mapping() -> None:
    m = _module(DistanceLFU_EvictionPolicy(), zch=8)
    m(_jt([10, 20, 30, 10]))
    keys = set(m.state_dict())
    assert {
        "_mch_sorted_raw_ids",
        "_mch_remapped_ids_mapping",
        "_mch_counts",
        "_mch_last_access_iter",
        "_output_segments_tensor",
        "_current_iter_tensor",
    } <= keys
    fresh = _module(DistanceLFU_EvictionPolicy(), zch=8)
    fresh.load_state_dict(m.state_dict())
    fresh.eval()
    m.eval()
    ids = _jt([30, 20, 10, 99])
    assert fresh(ids)["t"].values().tolist() == m(ids)["t"].values().tolist()


def test_rebuild_for_a_row_range_offsets_rows() -> None:
    m = _module(LFU_EvictionPolicy(), zch=8)
    shard = m.rebuild_with_output_id_range((8, 12), [0, 8, 12])
    assert shard.output_size() == 4 and shard.buckets() == 2
    want = [8 + r for r in MCHModel(4, 1, lfu).train_step([5, 6, 7, 9])]
    assert shard(_jt([5, 6, 7, 9]))["t"].values().tolist() == want
    assert 11 in want and min(want) >= 8  # 4 ids, 3 free rows: one reads the shard's miss row


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"zch_size": 0}, ValueError, "zch_size"),
        ({"zch_size": -3}, ValueError, "zch_size"),
        ({"eviction_interval": 0}, ValueError, "eviction_interval"),
        ({"eviction_policy": "lfu"}, TypeError, "eviction_policy"),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, object], error: type, match: str) -> None:
    args: dict[str, object] = {
        "zch_size": 4,
        "device": torch.device("cpu"),
        "eviction_policy": LFU_EvictionPolicy(),
        "eviction_interval": 1,
        "name": "user",
    } | kwargs
    with pytest.raises(error, match=match):
        MCHManagedCollisionModule(**args)  # type: ignore[arg-type]


def test_float_ids_are_refused() -> None:
    m = _module(LFU_EvictionPolicy())
    with pytest.raises(TypeError, match="integers"):
        m({"t": JaggedTensor(values=torch.tensor([1.0]), lengths=torch.tensor([1]))})
    m.eval()
    with pytest.raises(TypeError, match="integers"):
        m({"t": JaggedTensor(values=torch.tensor([1.0]), lengths=torch.tensor([1]))})


def _tables() -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(name="a", embedding_dim=4, num_embeddings=8, feature_names=["fa", "fb"]),
        EmbeddingBagConfig(name="b", embedding_dim=4, num_embeddings=5, feature_names=["fc"]),
    ]


def test_collection_remaps_each_table_with_its_module_and_drops_other_features() -> None:
    tables = _tables()
    modules = {t.name: _module(LFU_EvictionPolicy(), zch=t.num_embeddings) for t in tables}
    reference = {t.name: _module(LFU_EvictionPolicy(), zch=t.num_embeddings) for t in tables}
    mcc = ManagedCollisionCollection(modules, tables)
    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=["fc", "zz", "fb", "fa"],
        values=torch.tensor([7, 8, 1 << 41, 2, 3, 2, 9]),
        lengths=torch.tensor([1, 1, 1, 0, 2, 1, 1, 0]),
    )
    for _ in range(2):
        out = mcc(kjt)
    assert out.keys() == ["fa", "fb", "fc"]
    a = reference["a"]
    b = reference["b"]
    for _ in range(2):
        want_a = a(_jt(kjt["fa"].values().tolist() + kjt["fb"].values().tolist()))["t"]
        want_b = b(_jt(kjt["fc"].values().tolist()))["t"]
    assert out.values().tolist() == want_a.values().tolist() + want_b.values().tolist()
    assert out.lengths().tolist() == [1, 0, 2, 1, 1, 1]
    assert set(mcc.open_slots()) == {"a", "b"}


def test_collection_refuses_missing_module_and_size_mismatch() -> None:
    tables = _tables()
    with pytest.raises(ValueError, match="no managed-collision module"):
        ManagedCollisionCollection({"a": _module(LFU_EvictionPolicy(), zch=8)}, tables)
    with pytest.raises(ValueError, match="num_embeddings=5"):
        ManagedCollisionCollection(
            {"a": _module(LFU_EvictionPolicy(), zch=8), "b": _module(LFU_EvictionPolicy(), zch=6)},
            tables,
        )
