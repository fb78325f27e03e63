"""ManagedCollisionEmbeddingBagCollection / ...EmbeddingCollection and the adapters: outputs
equal the plain collection on the remapped ids; rows taken from other ids are re-initialized,
rows no id held are kept (TorchRec's weights)."""

from __future__ import annotations

import pytest
import torch

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
)
from shardrec_embedding.mc import (
    LFU_EvictionPolicy,
    ManagedCollisionCollection,
    ManagedCollisionEmbeddingBagCollection,
    ManagedCollisionEmbeddingCollection,
    McEmbeddingBagCollectionAdapter,
    McEmbeddingCollectionAdapter,
    MCHManagedCollisionModule,
)
from shardrec_jagged import KeyedJaggedTensor


def _mcc(configs: list, zch: int) -> ManagedCollisionCollection:  # type: ignore[type-arg]
    module = MCHManagedCollisionModule(
        zch_size=zch,
        device=torch.device("cpu"),
        eviction_policy=LFU_EvictionPolicy(),
        eviction_interval=1,
    )
    return ManagedCollisionCollection({"t": module}, configs)


def _kjt(ids: list[int]) -> KeyedJaggedTensor:
    return KeyedJaggedTensor.from_lengths_sync(
        keys=["f"], values=torch.tensor(ids), lengths=torch.tensor([2] * (len(ids) // 2))
    )


def test_pooled_output_equals_the_collection_on_remapped_ids() -> None:
    torch.manual_seed(0)
    configs = [EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=6, feature_names=["f"])]
    ebc = EmbeddingBagCollection(tables=configs)
    mc = ManagedCollisionEmbeddingBagCollection(
        ebc, _mcc(configs, 6), return_remapped_features=True
    )
    for ids in ([1 << 45, -2, 1 << 45, 9], [9, 1 << 45, -2, 77]):
        out, remapped = mc(_kjt(ids))
        assert remapped is not None
        want = ebc(remapped)
        torch.testing.assert_close(out.values(), want.values())
        assert int(remapped.values().max()) < 6


def test_sequence_output_and_no_remapped_features_by_default() -> None:
    configs = [EmbeddingConfig(name="t", embedding_dim=4, num_embeddings=6, feature_names=["f"])]
    ec = EmbeddingCollection(tables=configs)
    mc = ManagedCollisionEmbeddingCollection(ec, _mcc(configs, 6))
    out, remapped = mc(_kjt([5, 6]))
    assert remapped is None and out["f"].values().shape == (2, 4)


def _owners(mc: ManagedCollisionEmbeddingBagCollection) -> dict[int, int]:
    """{row: raw id holding it} of table "t"."""
    module = mc._managed_collision_collection._managed_collision_modules["t"]
    ids, rows = module._mch_sorted_raw_ids.tolist(), module._mch_remapped_ids_mapping.tolist()
    return {row: raw for raw, row in zip(ids, rows, strict=True) if raw != (1 << 63) - 1}


def _reset_case() -> tuple[ManagedCollisionEmbeddingBagCollection, torch.Tensor]:
    configs = [
        EmbeddingBagConfig(
            name="t",
            embedding_dim=3,
            num_embeddings=4,
            feature_names=["f"],
            init_fn=lambda w: torch.nn.init.constant_(w, 0.5),
        )
    ]
    ebc = EmbeddingBagCollection(tables=configs)
    weight = ebc.embedding_bags["t"].weight
    with torch.no_grad():
        weight.copy_(torch.arange(12.0).view(4, 3))
    mc = ManagedCollisionEmbeddingBagCollection(
        ebc, _mcc(configs, 4), return_remapped_features=True
    )
    return mc, weight


def test_rows_taken_from_other_ids_are_reset_and_fresh_rows_kept() -> None:
    """Rows no id held keep their weights (TorchRec's); a row taken from another id is reset
    to the table's init before the lookup; the others are kept."""
    mc, weight = _reset_case()
    initial = torch.arange(12.0).view(4, 3)
    _, remapped = mc(_kjt([7, 7, 8, 9]))  # 3 ids take the 3 empty rows: kept as they are
    assert remapped is not None
    assert sorted(set(remapped.values().tolist())) == [0, 1, 2]
    torch.testing.assert_close(weight, initial)
    before = _owners(mc)
    mc(_kjt([20, 20, 20, 20, 21, 21, 21, 21]))  # frequent new ids evict rare old ones
    changed = [row for row, raw in _owners(mc).items() if before[row] != raw]
    assert changed
    for row in range(4):
        want = torch.full((3,), 0.5) if row in changed else initial[row]
        torch.testing.assert_close(weight[row], want, msg=f"row {row}")
    mc.eval()
    with torch.no_grad():
        weight.copy_(initial)
    mc(_kjt([1, 2]))
    torch.testing.assert_close(weight, initial)  # eval frees nothing


def test_after_a_state_dict_load_rows_held_in_the_loaded_state_are_reset() -> None:
    trained, _ = _reset_case()
    trained(_kjt([7, 7, 8, 9]))
    mc, weight = _reset_case()
    mc(_kjt([30, 31]))  # this module's own rows: 0 and 1 held
    state = {k: v for k, v in trained.state_dict().items() if "_embedding_module" not in k}
    mc.load_state_dict(state, strict=False)  # rows 0, 1, 2 held by 7, 8, 9
    before = _owners(mc)
    mc(_kjt([40, 40, 40, 40]))
    changed = [row for row, raw in _owners(mc).items() if before.get(row) != raw]
    assert changed and all(row in before for row in changed)
    for row in changed:
        torch.testing.assert_close(weight[row], torch.full((3,), 0.5), msg=f"row {row}")


def test_traced_module_remaps_and_resets_as_the_eager_one() -> None:
    eager, eager_weight = _reset_case()
    traced_source, traced_weight = _reset_case()
    traced = torch.fx.symbolic_trace(traced_source)
    for ids in ([7, 7, 8, 9], [20, 20, 20, 20, 21, 21, 21, 21], [5, 6]):
        want, want_ids = eager(_kjt(ids))
        got, got_ids = traced(_kjt(ids))
        assert got_ids is not None and want_ids is not None
        assert torch.equal(got_ids.values(), want_ids.values())
        torch.testing.assert_close(got.values(), want.values())
        torch.testing.assert_close(traced_weight, eager_weight)


def test_mismatched_configs_are_refused() -> None:
    a = [EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=6, feature_names=["f"])]
    b = [EmbeddingBagConfig(name="t", embedding_dim=8, num_embeddings=6, feature_names=["f"])]
    with pytest.raises(ValueError, match="same configs"):
        ManagedCollisionEmbeddingBagCollection(EmbeddingBagCollection(tables=a), _mcc(b, 6))


@pytest.mark.parametrize("method", ["sort_zch", "mpzch"])
def test_adapters_build_a_working_collection(method: str) -> None:
    bag = [EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=16, feature_names=["f"])]
    seq = [EmbeddingConfig(name="t", embedding_dim=4, num_embeddings=16, feature_names=["f"])]
    common = {
        "input_hash_size": 0 if method == "mpzch" else 1 << 40,
        "device": torch.device("cpu"),
        "world_size": 2,
        "zch_method": method,
        "mpzch_num_buckets": 2,
    }
    ebc = McEmbeddingBagCollectionAdapter(tables=bag, **common)  # type: ignore[arg-type]
    ec = McEmbeddingCollectionAdapter(tables=seq, **common)  # type: ignore[arg-type]
    assert ebc(_kjt([3, 1 << 33])).values().shape == (1, 4)
    assert ec(_kjt([3, 1 << 33]))["f"].values().shape == (2, 4)
    assert ec.remapped_ids is None  # the adapter asks for no remapped features (TorchRec)
    assert [p.shape for p in ebc.parameters()] == [torch.Size([16, 4])]
    with pytest.raises(ValueError, match="zch_method"):
        McEmbeddingBagCollectionAdapter(tables=bag, **(common | {"zch_method": ""}))  # type: ignore[arg-type]


def test_default_init_reset_draws_fresh_uniform_rows_repeatably() -> None:
    """Without an `init_fn`, freed rows are redrawn in the table's uniform range (counter-based
    rows seeded from torch's generator): new values, the same under the same manual seed."""
    configs = [EmbeddingBagConfig(name="t", embedding_dim=5, num_embeddings=6, feature_names=["f"])]
    low, high = configs[0].get_weight_init_min(), configs[0].get_weight_init_max()
    results = []
    for _ in range(2):
        torch.manual_seed(3)
        ebc = EmbeddingBagCollection(tables=configs)
        weight = ebc.embedding_bags["t"].weight
        with torch.no_grad():
            weight.fill_(100.0)
        mc = ManagedCollisionEmbeddingBagCollection(ebc, _mcc(configs, 6))
        mc(_kjt([11, 12, 13, 14, 15, 15]))  # five ids take the five empty rows: kept
        assert bool((weight == 100.0).all())
        mc(_kjt([20, 20, 20, 20, 21, 21, 21, 21]))  # two rows taken from rare ids: redrawn
        fresh = weight[weight[:, 0] != 100.0]
        assert fresh.shape == (2, 5)
        assert bool((fresh >= low).all()) and bool((fresh < high).all())
        assert fresh.unique().numel() == 10
        results.append(weight.detach().clone())
    torch.testing.assert_close(results[0], results[1])
