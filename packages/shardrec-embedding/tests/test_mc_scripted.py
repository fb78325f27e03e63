"""`torch.jit.script` of a ManagedCollisionCollection (TorchRec's `test_scriptability`): the
scripted twin remaps ids exactly as the eager collection in `eval()` (the reference), for MCH
and HashZch tables, shares the eager state, and refuses training mode and unsupported inputs."""

from __future__ import annotations

import pytest
import torch

from shardrec_embedding import EmbeddingConfig
from shardrec_embedding.mc import (
    HashZchEvictionConfig,
    HashZchEvictionPolicyName,
    HashZchManagedCollisionModule,
    LFU_EvictionPolicy,
    ManagedCollisionCollection,
    ManagedCollisionModule,
    MCHManagedCollisionModule,
)
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import seeded_generator

ROWS = 16


def _configs() -> list[EmbeddingConfig]:
    return [
        EmbeddingConfig(name="a", embedding_dim=4, num_embeddings=ROWS, feature_names=["f1", "f2"]),
        EmbeddingConfig(name="b", embedding_dim=4, num_embeddings=ROWS, feature_names=["f3"]),
    ]


def _mch() -> MCHManagedCollisionModule:
    return MCHManagedCollisionModule(
        zch_size=ROWS,
        device=torch.device("cpu"),
        eviction_policy=LFU_EvictionPolicy(),
        eviction_interval=1,
        input_hash_size=1000,
    )


def _hash(
    input_hash_size: int = 0, disable_fallback: bool = False
) -> HashZchManagedCollisionModule:
    return HashZchManagedCollisionModule(
        zch_size=ROWS,
        device=torch.device("cpu"),
        total_num_buckets=2,
        max_probe=3,
        input_hash_size=input_hash_size,
        disable_fallback=disable_fallback,
        eviction_policy_name=HashZchEvictionPolicyName.SINGLE_TTL_EVICTION,
        eviction_config=HashZchEvictionConfig(features=["f1", "f2"], single_ttl=2),
    )


def _batch(step: int, keys: list[str], high: int, low: int = 0) -> KeyedJaggedTensor:
    g = seeded_generator("mc-scripted", step)
    lengths = torch.randint(0, 4, (3 * len(keys),), generator=g)
    lengths[0] = 0  # an empty bag
    values = torch.randint(low, high, (int(lengths.sum()),), generator=g)
    return KeyedJaggedTensor(keys, values, lengths=lengths, stride=3)


def _trained(modules: dict[str, ManagedCollisionModule], high: int) -> ManagedCollisionCollection:
    collection = ManagedCollisionCollection(modules, _configs())
    for step in range(5):
        collection(_batch(step, ["f1", "f2", "f3"], high))
    return collection.eval()


CASES = {
    "mch": (lambda: {"a": _mch(), "b": _mch()}, 0, 60),
    "hash_zch": (lambda: {"a": _hash(), "b": _hash()}, -30, 60),
    "hash_zch_ranged": (lambda: {"a": _hash(1000), "b": _hash(1000)}, 0, 60),
    "hash_zch_no_fallback": (lambda: {"a": _hash(0, True), "b": _hash(0, True)}, 0, 60),
    "mixed": (lambda: {"a": _mch(), "b": _hash()}, 0, 60),
}


@pytest.mark.parametrize("case", list(CASES))
def test_scripted_collection_remaps_as_the_eager_one_in_eval(case: str) -> None:
    make, low, high = CASES[case]
    collection = _trained(make(), high)
    scripted = torch.jit.script(collection)
    for step in range(10, 16):
        # extra key, other order: the tables' features are picked and ordered as in eager
        kjt = _batch(step, ["f3", "x", "f2", "f1"], high, low)
        got, want = scripted(kjt), collection(kjt)
        assert got.keys() == want.keys() == ["f1", "f2", "f3"]
        assert torch.equal(got.values(), want.values()), case
        assert torch.equal(got.lengths(), want.lengths()), case


def test_scripted_collection_shares_state_and_state_dict_keys() -> None:
    collection = _trained({"a": _hash(), "b": _mch()}, 60)
    scripted = torch.jit.script(collection)
    eager_state = collection.state_dict()
    scripted_state = scripted.state_dict()
    assert sorted(scripted_state) == sorted(eager_state)
    for key, value in eager_state.items():
        assert scripted_state[key].data_ptr() == value.data_ptr(), key
    # an id the eager HashZch module admits after scripting is found by the scripted one
    collection.train()
    new = KeyedJaggedTensor(
        ["f1", "f2", "f3"], torch.tensor([777]), lengths=torch.tensor([1, 0, 0])
    )
    row = collection(new).values()
    assert torch.equal(scripted(new).values(), row)


def test_scripted_collection_refuses_training_mode() -> None:
    collection = ManagedCollisionCollection({"a": _hash(), "b": _mch()}, _configs())
    scripted = torch.jit.script(collection)  # TorchRec scripts a module in training mode
    kjt = _batch(0, ["f1", "f2", "f3"], 60)
    with pytest.raises(torch.jit.Error, match=r"only looks ids up.*\.eval\(\)"):
        scripted(kjt)
    scripted.eval()
    assert scripted(kjt).values().numel() == kjt.values().numel()


def test_scripted_collection_refuses_float_ids_and_missing_features() -> None:
    scripted = torch.jit.script(_trained({"a": _hash(), "b": _mch()}, 60))
    floats = KeyedJaggedTensor(
        ["f1", "f2", "f3"], torch.tensor([1.0]), lengths=torch.tensor([1, 0, 0])
    )
    with pytest.raises(torch.jit.Error, match="raw ids must be integers"):
        scripted(floats)
    missing = KeyedJaggedTensor(["f1", "f2"], torch.tensor([1]), lengths=torch.tensor([1, 0]))
    with pytest.raises(torch.jit.Error, match="lacks a feature its tables read"):
        scripted(missing)


def test_scripting_an_mch_module_with_an_input_hash_func_is_refused() -> None:
    mch = MCHManagedCollisionModule(
        zch_size=ROWS,
        device=torch.device("cpu"),
        eviction_policy=LFU_EvictionPolicy(),
        eviction_interval=1,
        input_hash_size=1000,
        input_hash_func=lambda ids, size: torch.remainder(ids, size),
    )
    collection = ManagedCollisionCollection({"a": mch, "b": _mch()}, _configs())
    with pytest.raises(NotImplementedError, match="input_hash_func"):
        torch.jit.script(collection)


def test_scripting_an_mc_embedding_collection_or_a_bare_module_is_refused() -> None:
    from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
    from shardrec_embedding.mc import ManagedCollisionEmbeddingBagCollection

    bags = [EmbeddingBagConfig(name="a", embedding_dim=4, num_embeddings=ROWS, feature_names=["f"])]
    mc_ebc = ManagedCollisionEmbeddingBagCollection(
        EmbeddingBagCollection(tables=bags), ManagedCollisionCollection({"a": _mch()}, bags)
    ).eval()
    with pytest.raises(NotImplementedError, match="script its ManagedCollisionCollection"):
        torch.jit.script(mc_ebc)
    for module in (_mch().eval(), _hash().eval()):
        with pytest.raises(NotImplementedError, match="put it in a ManagedCollisionCollection"):
            torch.jit.script(module)
