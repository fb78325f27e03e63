"""EmbeddingCollection (per-id embeddings) against a Python reference."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardrec_embedding import DataType, EmbeddingCollection, EmbeddingConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import assert_close, seeded_generator


def _table(name: str, rows: int, features: list[str], dim: int = 4, **kw: Any) -> EmbeddingConfig:
    return EmbeddingConfig(
        name=name, num_embeddings=rows, embedding_dim=dim, feature_names=features, **kw
    )


def _check(helpers: Any, ec: EmbeddingCollection, kjt: KeyedJaggedTensor) -> None:
    tables = ec.embedding_configs()
    out = ec(kjt)
    ref_w = {n: m.weight.detach().clone().requires_grad_() for n, m in ec.embeddings.items()}
    ref = helpers.naive_sequence(tables, ref_w, kjt)
    assert list(out) == list(ref)
    jts = kjt.to_dict()
    gen = seeded_generator("ec-grad")
    loss = torch.zeros(())
    ref_loss = torch.zeros(())
    scale = 1.0 if all(t.data_type is DataType.FP32 for t in tables) else 200.0
    for name, r in ref.items():
        feature = name.split("@")[0]
        jt = out[name]
        assert jt.values().dtype == torch.float32
        assert_close(jt.values(), r.detach(), scale=scale)
        assert torch.equal(jt.lengths(), jts[feature].lengths())
        if ec.need_indices():
            assert torch.equal(jt.weights(), jts[feature].values())
        g = torch.randn(r.shape, generator=gen)
        loss = loss + (jt.values() * g).sum()
        ref_loss = ref_loss + (r * g).sum()
    if ref_loss.requires_grad:
        loss.backward()
        ref_loss.backward()
        for n, m in ec.embeddings.items():
            if ref_w[n].grad is not None:
                assert m.weight.grad is not None
                assert_close(m.weight.grad.float(), ref_w[n].grad.float(), scale=scale)


@pytest.mark.parametrize("need_indices", [False, True])
def test_matches_reference_with_shared_features(helpers: Any, need_indices: bool) -> None:
    tables = [_table("t1", 10, ["f1", "f2"]), _table("t2", 20, ["f2"]), _table("t3", 5, ["f3"])]
    ec = EmbeddingCollection(tables, need_indices=need_indices)
    kjt = helpers.random_kjt(tables, 4, "ec")
    assert list(ec(kjt)) == ["f1", "f2@t1", "f2@t2", "f3"]
    assert ec.embedding_names_by_table() == [["f1", "f2@t1"], ["f2@t2"], ["f3"]]
    assert ec.embedding_dim() == 4
    _check(helpers, ec, kjt)


def test_many_tables_mixed_dtypes_and_zero_batch(helpers: Any) -> None:
    tables = [
        _table(f"t{i}", 3 + i, [f"f{i}"], data_type=(DataType.FP32, DataType.FP16)[i % 2])
        for i in range(12)
    ]
    ec = EmbeddingCollection(tables)
    assert len(ec._plan.groups) == 2
    _check(helpers, ec, helpers.random_kjt(tables, 3, "many"))
    _check(helpers, ec, helpers.random_kjt(tables, 0, "zero"))


def test_meta_then_reset_and_state_dict(helpers: Any) -> None:
    tables = [_table("t", 10, ["f"]), _table("u", 12, ["g"])]
    ec = EmbeddingCollection(tables, device="meta")
    assert all(p.device.type == "meta" for p in ec.parameters())
    ec.reset_parameters()
    assert list(ec.state_dict()) == ["embeddings.t.weight", "embeddings.u.weight"]
    other = EmbeddingCollection(tables)
    other.load_state_dict(ec.state_dict())
    kjt = helpers.random_kjt(tables, 3, "sd")
    assert torch.equal(ec(kjt)["f"].values(), other(kjt)["f"].values())
    _check(helpers, other, kjt)


def test_unequal_dims_are_refused() -> None:
    with pytest.raises(ValueError, match=r"one embedding_dim.*'a': 4, 'b': 8"):
        EmbeddingCollection([_table("a", 4, ["f"], dim=4), _table("b", 4, ["g"], dim=8)])


def test_bad_ids_and_features() -> None:
    ec = EmbeddingCollection([_table("t", 4, ["f"])])
    with pytest.raises(IndexError, match="feature 'f' id 7 is out of range for table 't'"):
        ec(KeyedJaggedTensor(keys=["f"], values=torch.tensor([1, 7]), lengths=torch.tensor([2])))
    with pytest.raises(ValueError, match="lacks feature"):
        ec(KeyedJaggedTensor(keys=["g"], values=torch.tensor([1]), lengths=torch.tensor([1])))
    with pytest.raises(TypeError, match="float64"):
        ec(
            KeyedJaggedTensor(
                keys=["f"],
                values=torch.tensor([1.0], dtype=torch.float64),
                lengths=torch.tensor([1]),
            )
        )
    with pytest.raises(ValueError, match="duplicate table name 't'"):
        EmbeddingCollection([_table("t", 4, ["f"]), _table("t", 4, ["g"])])


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data(), num_tables=st.integers(1, 4), batch=st.integers(0, 4))
def test_random_configs_match_reference(
    helpers: Any, data: st.DataObject, num_tables: int, batch: int
) -> None:
    dim = data.draw(st.sampled_from([1, 3, 8]))
    tables = [
        _table(
            f"t{i}",
            data.draw(st.integers(1, 15)),
            data.draw(st.lists(st.sampled_from("abcd"), min_size=1, max_size=3, unique=True)),
            dim=dim,
        )
        for i in range(num_tables)
    ]
    ec = EmbeddingCollection(tables, need_indices=data.draw(st.booleans()))
    _check(helpers, ec, helpers.random_kjt(tables, batch, (num_tables, batch, dim)))
