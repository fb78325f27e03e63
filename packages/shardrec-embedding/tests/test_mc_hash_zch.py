"""HashZchManagedCollisionModule against a plain-Python model of multi-probe hashing: probe
windows from murmur3's finalizer, first free (or expired) row, earliest id wins a contested
row, fallback to the window's first row; TTL and LRU eviction on a fake clock."""

from __future__ import annotations

import pytest
import torch

from shardrec_embedding.mc import (
    HashZchEvictionConfig,
    HashZchEvictionPolicyName,
    HashZchManagedCollisionModule,
    HashZchPerFeatureTtlScorer,
    HashZchSingleTtlScorer,
)
from shardrec_embedding.mc.hash_zch import set_clock
from shardrec_jagged import JaggedTensor

M64 = (1 << 64) - 1
HOUR = 3600.0


def fmix64(x: int) -> int:
    k = x & M64
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & M64
    k ^= k >> 33
    return k - (1 << 64) if k >> 63 else k


class Model:
    """Rows of `buckets` equal buckets; ids probe `probe` rows of bucket `id % buckets`."""

    def __init__(
        self, rows: int, buckets: int, probe: int, ttl: int | None = None, lru: bool = False
    ) -> None:
        self.ids = [-1] * rows
        self.expiry = [-1] * rows
        self.size = rows // buckets
        self.buckets, self.probe, self.ttl, self.lru = buckets, min(probe, self.size), ttl, lru
        self.evicted: list[int] = []

    def window(self, i: int) -> list[int]:
        start = self.size * (i % self.buckets)
        h = fmix64(i) % self.size
        return [start + (h + k) % self.size for k in range(self.probe)]

    def step(self, ids: list[int], hour: int, train: bool = True) -> list[int]:
        ids = [-(1 << 63) if i == -1 else i for i in ids]  # -1 marks a free row
        uniq = sorted(set(ids))
        row = {i: next((r for r in self.window(i) if self.ids[r] == i), -1) for i in uniq}
        if train:
            for i in uniq:
                if row[i] >= 0 and self.ttl is not None:
                    self.expiry[row[i]] = 2**31 - 1
            pending = [i for i in uniq if row[i] < 0]
            while pending:
                picks: dict[int, int] = {}
                for i in pending:
                    usable = [r for r in self.window(i) if self._usable(r, hour)]
                    if usable:
                        free = [r for r in usable if self.ids[r] == -1]
                        if free:
                            pick = free[0]
                        elif self.lru:
                            pick = min(usable, key=lambda r: self.expiry[r])
                        else:
                            pick = usable[0]
                        picks.setdefault(pick, i)  # the earliest (smallest index) wins
                won = {i: r for r, i in picks.items()}
                if not won:
                    break
                for i, r in won.items():
                    if self.ids[r] != -1:
                        self.evicted.append(r)
                    self.ids[r], row[i] = i, r
                    if self.ttl is not None:
                        self.expiry[r] = 2**31 - 1
                pending = [
                    i
                    for i in pending
                    if i not in won and any(self._usable(r, hour) for r in self.window(i))
                ]
            if self.ttl is not None:
                for i in uniq:
                    if row[i] >= 0:
                        self.expiry[row[i]] = self.ttl + hour
        return [row[i] if row[i] >= 0 else self.window(i)[0] for i in ids]

    def _usable(self, r: int, hour: int) -> bool:
        return self.ids[r] == -1 or (self.ttl is not None and self.expiry[r] < hour)


def _jt(ids: list[int]) -> dict[str, JaggedTensor]:
    return {
        "t": JaggedTensor(
            values=torch.tensor(ids, dtype=torch.int64),
            lengths=torch.ones(len(ids), dtype=torch.int64),
        )
    }


def _run(m: HashZchManagedCollisionModule, ids: list[int]) -> list[int]:
    return m(_jt(ids))["t"].values().tolist()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("buckets", "probe"), [(1, 4), (2, 3), (4, 16)])
def test_random_stream_without_eviction_matches_model(seed: int, buckets: int, probe: int) -> None:
    g = torch.Generator().manual_seed(seed)
    m = HashZchManagedCollisionModule(
        zch_size=16, device=torch.device("cpu"), total_num_buckets=buckets, max_probe=probe
    )
    model = Model(16, buckets, probe)
    for step in range(8):
        n = int(torch.randint(0, 9, (1,), generator=g))
        ids = torch.randint(-(1 << 40), 1 << 40, (n,), generator=g).tolist()
        ids += ids[: n // 3]  # duplicates
        assert _run(m, ids) == model.step(ids, 0), f"step {step}"
        assert m._hash_zch_identities.view(-1).tolist() == model.ids
    m.eval()
    ids = [i for i in model.ids if i != -1] + [12345]
    assert _run(m, ids) == model.step(ids, 0, train=False)


@pytest.mark.parametrize("lru", [False, True])
def test_ttl_eviction_matches_model_on_a_fake_clock(lru: bool) -> None:
    policy = (
        HashZchEvictionPolicyName.LRU_EVICTION
        if lru
        else (HashZchEvictionPolicyName.SINGLE_TTL_EVICTION)
    )
    m = HashZchManagedCollisionModule(
        zch_size=8,
        device=torch.device("cpu"),
        total_num_buckets=1,
        max_probe=8,
        eviction_policy_name=policy,
        eviction_config=HashZchEvictionConfig(features=["f"], single_ttl=2),
    )
    model = Model(8, 1, 8, ttl=2, lru=lru)
    g = torch.Generator().manual_seed(3)
    hour = 100
    set_clock(m, lambda: hour * HOUR)
    for step in range(14):
        hour += int(torch.randint(0, 2, (1,), generator=g))
        ids = torch.randint(0, 30, (5,), generator=g).tolist()
        assert _run(m, ids) == model.step(ids, hour), f"step {step}"
        assert m._hash_zch_metadata.view(-1).tolist() == model.expiry
        got = m.evict()
        want = sorted(set(model.evicted))
        model.evicted = []
        assert (got.tolist() if got is not None else []) == want


def test_distinct_ids_get_distinct_rows_while_their_windows_have_room() -> None:
    m = HashZchManagedCollisionModule(
        zch_size=64, device=torch.device("cpu"), total_num_buckets=1, max_probe=64
    )
    ids = list(range(-20, 44))  # -1 included
    rows = _run(m, ids)
    assert sorted(rows) == list(range(64))
    assert m.open_slots().item() == 0 and m.stats.collisions == 0


def test_disable_fallback_drops_misses_and_shrinks_their_bags() -> None:
    m = HashZchManagedCollisionModule(
        zch_size=2,
        device=torch.device("cpu"),
        total_num_buckets=1,
        max_probe=2,
        disable_fallback=True,
    )
    jt = JaggedTensor(values=torch.tensor([1, 2, 3, 4]), lengths=torch.tensor([1, 3]))
    out = m({"t": jt})["t"]
    assert out.values().numel() == 2 and out.lengths().tolist() == [1, 1]
    assert m.stats.collisions == 2


def test_readonly_features_do_not_admit() -> None:
    m = HashZchManagedCollisionModule(zch_size=4, device=torch.device("cpu"), total_num_buckets=1)
    m({"t_readonly": _jt([5])["t"]})
    assert m.open_slots().item() == 4


def test_ids_outside_input_hash_size_are_refused_clearly() -> None:
    m = HashZchManagedCollisionModule(
        zch_size=4,
        device=torch.device("cpu"),
        total_num_buckets=2,
        input_hash_size=100,
        name="user",
    )
    assert len(_run(m, [0, 99])) == 2
    for bad in (100, -1):
        with pytest.raises(IndexError, match=f"id {bad} is outside"):
            _run(m, [bad])


def test_scorers_follow_torchrecs_hours() -> None:
    jt = JaggedTensor(values=torch.arange(5), lengths=torch.tensor([2, 2, 1, 0]))
    single = HashZchSingleTtlScorer(
        HashZchEvictionConfig(features=["a"], single_ttl=24), clock=lambda: 36000000.0
    )
    assert single.gen_score(jt).tolist() == [10024] * 5 and single.gen_threshold() == 10000
    per = HashZchPerFeatureTtlScorer(
        HashZchEvictionConfig(features=["a", "b"], per_feature_ttl=[24, 48]),
        clock=lambda: 36000000.0,
    )
    assert per.gen_score(jt).tolist() == [10024] * 4 + [10048]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"zch_size": 0}, "zch_size"),
        ({"zch_size": 10, "total_num_buckets": 3}, "multiple"),
        ({"max_probe": 0}, "max_probe"),
        (
            {"eviction_policy_name": HashZchEvictionPolicyName.SINGLE_TTL_EVICTION},
            "eviction_config",
        ),
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {
        "zch_size": 8,
        "device": torch.device("cpu"),
        "total_num_buckets": 2,
    } | kwargs
    with pytest.raises(ValueError, match=match):
        HashZchManagedCollisionModule(**args)  # type: ignore[arg-type]


def test_bad_eviction_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="single_ttl"):
        HashZchEvictionConfig(features=["f"], single_ttl=0)
    with pytest.raises(ValueError, match="one TTL per feature"):
        HashZchEvictionConfig(features=["f", "g"], per_feature_ttl=[1])


def test_a_ttl_policy_without_its_ttl_fails_at_the_first_training_lookup() -> None:
    m = HashZchManagedCollisionModule(
        zch_size=4,
        device=torch.device("cpu"),
        total_num_buckets=1,
        name="user",
        eviction_policy_name=HashZchEvictionPolicyName.SINGLE_TTL_EVICTION,
        eviction_config=HashZchEvictionConfig(features=["f"]),  # TorchRec builds this too
    )
    with pytest.raises(ValueError, match="single_ttl"):
        _run(m, [1])


@pytest.mark.parametrize(
    ("policy", "flag"),
    [
        (None, 0),
        (HashZchEvictionPolicyName.SINGLE_TTL_EVICTION, 0),
        (HashZchEvictionPolicyName.LRU_EVICTION, 1),
    ],
)
def test_torchrecs_read_only_attributes(
    policy: HashZchEvictionPolicyName | None, flag: int
) -> None:
    """The attributes TorchRec's programs read (values as TorchRec 1.8 gives them)."""
    config = None if policy is None else HashZchEvictionConfig(features=["f"], single_ttl=3)
    module = HashZchManagedCollisionModule(
        zch_size=16,
        device=torch.device("cpu"),
        total_num_buckets=4,
        max_probe=5,
        disable_fallback=True,
        eviction_policy_name=policy,
        eviction_config=config,
    )
    assert (module.max_probe, module.disable_fallback, module.eviction_flag) == (5, True, flag)
    assert not module.is_sharded
    assert module._output_global_offset_tensor is None
    shard = module.rebuild_with_output_id_range((8, 16), [0, 4, 8, 12, 16])
    assert shard.is_sharded
    assert shard._output_global_offset_tensor is not None
    assert shard._output_global_offset_tensor.tolist() == [8]
    shard.reset_intrainer_bulk_eval_mode()
    assert not shard.training


def test_state_dict_keys_are_torchrecs_in_training_and_inference() -> None:
    """Metadata only with an eviction policy; `reset_inference_mode` drops it from the state
    dict (a training checkpoint still loads strictly) and `reset_training_mode` brings it back."""

    def make(policy: bool) -> HashZchManagedCollisionModule:
        config = HashZchEvictionConfig(features=["f"], single_ttl=1) if policy else None
        name = HashZchEvictionPolicyName.SINGLE_TTL_EVICTION if policy else None
        return HashZchManagedCollisionModule(
            zch_size=8,
            device=torch.device("cpu"),
            total_num_buckets=2,
            eviction_policy_name=name,
            eviction_config=config,
        )

    base = ["_hash_zch_bucket", "_hash_zch_identities"]
    assert sorted(make(False).state_dict()) == base
    trained = make(True)
    assert sorted(trained.state_dict()) == sorted([*base, "_hash_zch_metadata"])
    trained({"f": JaggedTensor(values=torch.tensor([3, 4, 5]), lengths=torch.tensor([3]))})
    saved = trained.state_dict()
    serving = make(True)
    serving.reset_inference_mode()
    assert sorted(serving.state_dict()) == base
    serving.load_state_dict(saved)  # strict: its metadata is ignored
    assert torch.equal(serving._hash_zch_identities, trained._hash_zch_identities)
    serving.reset_training_mode()
    assert sorted(serving.state_dict()) == sorted([*base, "_hash_zch_metadata"])
    trained.reset_inference_mode()
    trained.reset_training_mode()
    assert torch.equal(trained.state_dict()["_hash_zch_metadata"], saved["_hash_zch_metadata"])
