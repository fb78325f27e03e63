"""A sweep of bad inputs to the managed-collision modules' constructors and forwards (session 12):
each is a clear exception naming the value and the fix (TorchRec 1.8: an assert, an error deep
in torch, or nothing); and the edge inputs that are valid (empty batches, negative and int32
ids) give results."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
)
from shardrec_embedding.mc import (
    HashZchEvictionConfig,
    HashZchEvictionPolicyName,
    HashZchManagedCollisionModule,
    LFU_EvictionPolicy,
    ManagedCollisionCollection,
    ManagedCollisionEmbeddingBagCollection,
    ManagedCollisionEmbeddingCollection,
    ManagedCollisionModule,
    McEmbeddingBagCollectionAdapter,
    MCHManagedCollisionModule,
)
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor

CPU = torch.device("cpu")
BAGS = [EmbeddingBagConfig(name="t", feature_names=["f"], embedding_dim=4, num_embeddings=10)]
SEQS = [EmbeddingConfig(name="t", feature_names=["f"], embedding_dim=4, num_embeddings=10)]


def _mch(**kwargs: object) -> MCHManagedCollisionModule:
    args: dict[str, object] = {
        "zch_size": 10,
        "device": CPU,
        "eviction_policy": LFU_EvictionPolicy(),
        "eviction_interval": 1,
        "input_hash_size": 100,
    }
    args.update(kwargs)
    return MCHManagedCollisionModule(**args)  # type: ignore[arg-type]


def _hash(**kwargs: object) -> HashZchManagedCollisionModule:
    args: dict[str, object] = {"zch_size": 10, "device": CPU, "total_num_buckets": 2}
    args.update(kwargs)
    return HashZchManagedCollisionModule(**args)  # type: ignore[arg-type]


def _ttl(**kwargs: object) -> HashZchEvictionConfig:
    return HashZchEvictionConfig(features=["f"], **kwargs)  # type: ignore[arg-type]


def _remap(module: ManagedCollisionModule, values: torch.Tensor) -> torch.Tensor:
    jt = JaggedTensor(values=values, lengths=torch.tensor([values.numel()]))
    return module({"t": jt})["t"].values()


def _mc_ebc(module: ManagedCollisionModule | None = None) -> ManagedCollisionEmbeddingBagCollection:
    collection = ManagedCollisionCollection({"t": module or _mch()}, BAGS)
    return ManagedCollisionEmbeddingBagCollection(EmbeddingBagCollection(tables=BAGS), collection)


def _kjt(keys: list[str], values: list[object], lengths: list[int]) -> KeyedJaggedTensor:
    return KeyedJaggedTensor(keys, torch.tensor(values), lengths=torch.tensor(lengths))


LRU = HashZchEvictionPolicyName.LRU_EVICTION
REFUSED: dict[str, tuple[Callable[[], object], type[Exception], str]] = {
    "mch zch_size 0": (lambda: _mch(zch_size=0), ValueError, "zch_size must be a positive int"),
    "mch zch_size float": (lambda: _mch(zch_size=2.5), ValueError, r"got 2\.5"),
    "mch eviction_interval 0": (lambda: _mch(eviction_interval=0), ValueError, "got 0"),
    "mch policy None": (lambda: _mch(eviction_policy=None), TypeError, "LFU_EvictionPolicy()"),
    "mch policy class": (
        lambda: _mch(eviction_policy=LFU_EvictionPolicy),
        TypeError,
        "must be an MCHEvictionPolicy",
    ),
    "mch input_hash_size < 0": (
        lambda: _mch(input_hash_size=-5),
        ValueError,
        "input_hash_size must be an int >= 0.*got -5",
    ),
    "mch float ids": (lambda: _remap(_mch(), torch.tensor([1.0])), TypeError, "float32 ids"),
    "mch bool ids": (lambda: _remap(_mch(), torch.tensor([True])), TypeError, "bool ids"),
    "mch bool ids eval": (
        lambda: _remap(_mch().eval(), torch.tensor([True])),
        TypeError,
        "bool ids",
    ),
    "policy filter not callable": (
        lambda: LFU_EvictionPolicy(threshold_filtering_func=5),  # type: ignore[arg-type]
        TypeError,
        "threshold_filtering_func must be a function.*got int",
    ),
    "hash zch_size 0": (lambda: _hash(zch_size=0), ValueError, "got 0"),
    "hash buckets 0": (lambda: _hash(total_num_buckets=0), ValueError, "total_num_buckets"),
    "hash uneven buckets": (
        lambda: _hash(total_num_buckets=3),
        ValueError,
        "multiple of total_num_buckets 3",
    ),
    "hash max_probe 0": (lambda: _hash(max_probe=0), ValueError, "max_probe"),
    "hash input_hash_size < 0": (lambda: _hash(input_hash_size=-1), ValueError, "got -1"),
    "hash policy without config": (
        lambda: _hash(eviction_policy_name=LRU),
        ValueError,
        "needs an eviction_config",
    ),
    "hash unknown policy name": (
        lambda: _hash(eviction_policy_name="FIFO", eviction_config=_ttl(single_ttl=1)),
        ValueError,
        "unknown eviction_policy_name 'FIFO'.*LRU_EVICTION",
    ),
    "hash config a dict": (
        lambda: _hash(eviction_policy_name=LRU, eviction_config={"features": ["f"]}),
        TypeError,
        "must be a HashZchEvictionConfig.*got dict",
    ),
    "ttl 0": (lambda: _ttl(single_ttl=0), ValueError, "single_ttl must be an int >= 1"),
    "per-feature ttl count": (
        lambda: HashZchEvictionConfig(features=["f", "g"], per_feature_ttl=[1]),
        ValueError,
        "one TTL per feature",
    ),
    "hash float ids": (lambda: _remap(_hash(), torch.tensor([1.5])), TypeError, "float32"),
    "hash id out of range": (
        lambda: _remap(_hash(input_hash_size=10), torch.tensor([11])),
        IndexError,
        "id 11 is outside",
    ),
    "collection modules a list": (
        lambda: ManagedCollisionCollection([_mch()], BAGS),  # type: ignore[arg-type]
        TypeError,
        "must be a dict",
    ),
    "collection module not MC": (
        lambda: ManagedCollisionCollection({"t": torch.nn.Linear(2, 2)}, BAGS),  # type: ignore[dict-item]
        TypeError,
        "table 't' is a Linear",
    ),
    "collection missing module": (
        lambda: ManagedCollisionCollection({}, BAGS),
        ValueError,
        r"tables \['t'\] have no managed-collision module",
    ),
    "collection size mismatch": (
        lambda: ManagedCollisionCollection({"t": _mch(zch_size=7)}, BAGS),
        ValueError,
        "num_embeddings=10 but its managed-collision module outputs 7",
    ),
    "mc ebc over an ec": (
        lambda: ManagedCollisionEmbeddingBagCollection(
            EmbeddingCollection(tables=SEQS),  # type: ignore[arg-type]
            ManagedCollisionCollection({"t": _mch()}, SEQS),
        ),
        TypeError,
        "got EmbeddingCollection; wrap it in ManagedCollisionEmbeddingCollection",
    ),
    "mc ec over an ebc": (
        lambda: ManagedCollisionEmbeddingCollection(
            EmbeddingBagCollection(tables=BAGS),  # type: ignore[arg-type]
            ManagedCollisionCollection({"t": _mch()}, BAGS),
        ),
        TypeError,
        "wrap it in ManagedCollisionEmbeddingBagCollection",
    ),
    "mc ebc other tables": (
        lambda: ManagedCollisionEmbeddingBagCollection(
            EmbeddingBagCollection(
                tables=[
                    EmbeddingBagConfig(
                        name="u", feature_names=["f"], embedding_dim=4, num_embeddings=10
                    )
                ]
            ),
            ManagedCollisionCollection({"t": _mch()}, BAGS),
        ),
        ValueError,
        "must be the same configs",
    ),
    "mc ebc missing feature": (
        lambda: _mc_ebc()(_kjt(["g"], [1], [1])),
        ValueError,
        r"lacks features \['f'\]",
    ),
    "mc ebc float ids": (lambda: _mc_ebc()(_kjt(["f"], [1.0], [1])), TypeError, "float32 ids"),
    "adapter world_size 0": (
        lambda: McEmbeddingBagCollectionAdapter(
            tables=BAGS, input_hash_size=100, device=CPU, world_size=0, zch_method="mpzch"
        ),
        ValueError,
        "world_size must be an int >= 1.*got 0",
    ),
    "adapter unknown method": (
        lambda: McEmbeddingBagCollectionAdapter(
            tables=BAGS, input_hash_size=100, device=CPU, world_size=1, zch_method="foo"
        ),
        ValueError,
        "zch_method must be one of",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_bad_input_is_refused_with_the_value_and_the_fix(case: str) -> None:
    make, error, message = REFUSED[case]
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize("module", ["mch", "hash"])
@pytest.mark.parametrize(
    ("values", "lengths", "batch"),
    [([], [0, 0], 2), ([], [], 0), ([-5, 3, 3], [3], 1)],
    ids=["empty bags", "zero batch", "negative and repeated ids"],
)
def test_edge_inputs_give_results(
    module: str, values: list[int], lengths: list[int], batch: int
) -> None:
    mc = _mch() if module == "mch" else _hash()
    kjt = KeyedJaggedTensor(
        ["f"],
        torch.tensor(values, dtype=torch.int64),
        lengths=torch.tensor(lengths, dtype=torch.int64),
        stride=batch,
    )
    pooled, _ = _mc_ebc(mc)(kjt)
    assert pooled.values().shape == (batch, 4)
    if not values:
        assert torch.equal(pooled.values(), torch.zeros(batch, 4))


def test_int32_ids_remap_as_int64_ids() -> None:
    ids = torch.tensor([5, 17, 5, 99])
    for make in (_mch, _hash):
        got = _remap(make(), ids.to(torch.int32))
        assert got.dtype == torch.int32
        assert torch.equal(got.to(torch.int64), _remap(make(), ids))


def test_a_policy_names_string_value_is_accepted() -> None:
    module = _hash(eviction_policy_name="LRU_EVICTION", eviction_config=_ttl(single_ttl=1))
    assert module._eviction_policy_name is HashZchEvictionPolicyName.LRU_EVICTION
    assert module.eviction_flag == 1
