"""EmbeddingBagCollection against a per-bag Python reference, plus every bad input of issue 3."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardrec_embedding import (
    DataType,
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingConfig,
    PoolingType,
)
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import assert_close, seeded_generator

SUM, MEAN = PoolingType.SUM, PoolingType.MEAN


def _table(name: str, rows: int, dim: int, features: list[str], **kw: Any) -> EmbeddingBagConfig:
    return EmbeddingBagConfig(
        name=name, num_embeddings=rows, embedding_dim=dim, feature_names=features, **kw
    )


def _weights(ebc: EmbeddingBagCollection) -> dict[str, torch.Tensor]:
    return {n: m.weight for n, m in ebc.embedding_bags.items()}


def _check_forward_and_grads(
    helpers: Any, ebc: EmbeddingBagCollection, kjt: KeyedJaggedTensor
) -> None:
    tables = ebc.embedding_bag_configs()
    out = ebc(kjt)
    ref_w = {n: w.detach().clone().requires_grad_() for n, w in _weights(ebc).items()}
    ref = helpers.naive_pooled(tables, ref_w, kjt)
    assert out.keys() == list(ref)
    assert out.values().shape == (kjt.stride(), sum(r.shape[1] for r in ref.values()))
    assert out.values().dtype == torch.float32
    got = out.to_dict()
    scale = 1.0 if all(t.data_type is DataType.FP32 for t in tables) else 200.0
    for k, r in ref.items():
        assert_close(got[k], r.detach(), scale=scale)
    grad = torch.randn(out.values().shape, generator=seeded_generator("grad"))
    (out.values() * grad).sum().backward()
    ref_loss = (torch.cat(list(ref.values()), 1) * grad).sum()
    if ref_loss.requires_grad:  # a batch with no ids leaves the reference constant
        ref_loss.backward()
    for name, w in _weights(ebc).items():
        r = ref_w[name].grad
        if r is None:
            assert w.grad is None or float(w.grad.abs().sum()) == 0.0
            continue
        assert w.grad is not None, name
        assert_close(w.grad.float(), r.float(), scale=scale)


def test_two_tables_tutorial_shapes(helpers: Any) -> None:
    tables = [
        _table("product_table", 4096, 64, ["product"]),
        _table("user_table", 4096, 64, ["user"]),
    ]
    ebc = EmbeddingBagCollection(tables=tables, device="cpu")
    kjt = KeyedJaggedTensor(
        keys=["product", "user"],
        values=torch.tensor([1, 2, 1, 5, 2, 3, 4, 1]),
        lengths=torch.tensor([3, 1, 2, 2]),
    )
    out = ebc(kjt)
    assert out.keys() == ["product", "user"]
    assert out.values().shape == (2, 128)
    _check_forward_and_grads(helpers, ebc, kjt)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.data(),
    num_tables=st.integers(1, 5),
    batch=st.integers(0, 5),
    weighted=st.booleans(),
)
def test_random_configs_match_reference(
    helpers: Any, data: st.DataObject, num_tables: int, batch: int, weighted: bool
) -> None:
    features = ["a", "b", "c", "d"]
    tables = []
    for i in range(num_tables):
        feats = data.draw(st.lists(st.sampled_from(features), min_size=1, max_size=3, unique=True))
        pooling = SUM if weighted else data.draw(st.sampled_from([SUM, MEAN]))
        tables.append(
            _table(
                f"t{i}",
                data.draw(st.integers(1, 20)),
                data.draw(st.sampled_from([2, 3, 4])),
                feats,
                pooling=pooling,
            )
        )
    ebc = EmbeddingBagCollection(tables, is_weighted=weighted)
    kjt = helpers.random_kjt(tables, batch, (num_tables, batch, weighted), weighted=weighted)
    _check_forward_and_grads(helpers, ebc, kjt)


def test_output_order_and_shared_feature_keys(helpers: Any) -> None:
    tables = [
        _table("t1", 10, 4, ["f1", "f2"]),
        _table("t2", 20, 8, ["f2"], pooling=MEAN),
        _table("t3", 5, 4, ["f3"]),
    ]
    ebc = EmbeddingBagCollection(tables)
    kjt = helpers.random_kjt(tables, 3, "order")
    out = ebc(kjt)
    assert out.keys() == ["f1", "f2@t1", "f2@t2", "f3"]
    assert out.length_per_key() == [4, 4, 8, 4]
    _check_forward_and_grads(helpers, ebc, kjt)


def test_empty_bags_and_zero_batch(helpers: Any) -> None:
    tables = [_table("t", 7, 3, ["f"]), _table("u", 9, 3, ["g"], pooling=MEAN)]
    ebc = EmbeddingBagCollection(tables)
    empty = KeyedJaggedTensor(
        keys=["f", "g"],
        values=torch.zeros(0, dtype=torch.int64),
        lengths=torch.zeros(6, dtype=torch.int64),
    )
    out = ebc(empty)
    assert out.values().shape == (3, 6) and float(out.values().detach().abs().sum()) == 0.0
    zero = KeyedJaggedTensor(
        keys=["f", "g"],
        values=torch.zeros(0, dtype=torch.int64),
        lengths=torch.zeros(0, dtype=torch.int64),
        stride=0,
    )
    assert ebc(zero).values().shape == (0, 6)
    _check_forward_and_grads(helpers, ebc, helpers.random_kjt(tables, 4, "empty", max_length=1))


def test_one_table_many_features_and_many_tables(helpers: Any) -> None:
    one = [_table("t", 30, 4, [f"f{i}" for i in range(8)])]
    _check_forward_and_grads(
        helpers, EmbeddingBagCollection(one), helpers.random_kjt(one, 3, "one")
    )
    many = [
        _table(f"t{i}", 5 + i, (2, 3, 4)[i % 3], [f"f{i}"], pooling=(SUM, MEAN)[i % 2])
        for i in range(40)
    ]
    ebc = EmbeddingBagCollection(many)
    assert len(ebc._plan.groups) == 6  # (dim, pooling) pairs: one lookup each
    _check_forward_and_grads(helpers, ebc, helpers.random_kjt(many, 2, "many", max_length=2))


@pytest.mark.parametrize("data_type", [DataType.FP16, DataType.BF16])
def test_half_precision_tables(helpers: Any, data_type: DataType) -> None:
    tables = [_table("t", 20, 8, ["f"], data_type=data_type), _table("u", 20, 8, ["g"])]
    ebc = EmbeddingBagCollection(tables)
    assert ebc.embedding_bags["t"].weight.dtype is (
        torch.float16 if data_type is DataType.FP16 else torch.bfloat16
    )
    assert len(ebc._plan.groups) == 2
    _check_forward_and_grads(helpers, ebc, helpers.random_kjt(tables, 4, "half"))


def test_extra_features_are_ignored(helpers: Any) -> None:
    tables = [_table("t", 10, 4, ["f"])]
    ebc = EmbeddingBagCollection(tables)
    with_extra = helpers.random_kjt(tables, 3, "extra", extra_keys=["unused"])
    _check_forward_and_grads(helpers, ebc, with_extra)


def test_meta_device_then_reset_parameters(helpers: Any) -> None:
    tables = [_table("t", 100, 4, ["f"]), _table("u", 50, 4, ["g"])]
    ebc = EmbeddingBagCollection(tables, device="meta")
    assert all(p.device.type == "meta" for p in ebc.parameters())
    ebc.reset_parameters()
    assert ebc.device == torch.device("cpu")
    bound = (1 / 100) ** 0.5
    w = ebc.embedding_bags["t"].weight.detach()
    assert float(w.abs().max()) <= bound and float(w.abs().sum()) > 0
    assert len({p.untyped_storage().data_ptr() for p in ebc.parameters()}) == 1  # packed again
    _check_forward_and_grads(helpers, ebc, helpers.random_kjt(tables, 3, "meta"))

    again = EmbeddingBagCollection(tables, device="meta").to_empty(device="cpu")
    assert isinstance(again, EmbeddingBagCollection)
    again.reset_parameters()
    _check_forward_and_grads(helpers, again, helpers.random_kjt(tables, 3, "meta2"))


def test_state_dict_round_trip(helpers: Any) -> None:
    tables = [_table("t", 10, 4, ["f"]), _table("u", 12, 4, ["g"], pooling=MEAN)]
    src = EmbeddingBagCollection(tables)
    sd = src.state_dict()
    assert list(sd) == ["embedding_bags.t.weight", "embedding_bags.u.weight"]
    dst = EmbeddingBagCollection(tables)
    dst.load_state_dict(sd)
    kjt = helpers.random_kjt(tables, 4, "sd")
    assert torch.equal(src(kjt).values(), dst(kjt).values())
    assigned = EmbeddingBagCollection(tables)
    assigned.load_state_dict({k: v.clone() for k, v in sd.items()}, assign=True)
    assert torch.equal(src(kjt).values(), assigned(kjt).values())
    _check_forward_and_grads(helpers, assigned, kjt)


def test_deepcopy_and_dtype_conversion_keep_working(helpers: Any) -> None:
    tables = [_table("t", 10, 4, ["f"]), _table("u", 12, 4, ["g"])]
    ebc = EmbeddingBagCollection(tables)
    kjt = helpers.random_kjt(tables, 4, "copy")
    copied = copy.deepcopy(ebc)
    assert torch.equal(ebc(kjt).values(), copied(kjt).values())
    doubled = copy.deepcopy(ebc).double()
    assert doubled.embedding_bags["t"].weight.dtype == torch.float64
    assert_close(doubled(kjt).values(), ebc(kjt).values())


def test_training_steps_match_per_table_embedding_bags(helpers: Any) -> None:
    tables = [_table("t", 10, 4, ["f"]), _table("u", 12, 4, ["g"]), _table("v", 6, 2, ["f"])]
    ebc = EmbeddingBagCollection(tables)
    ref = {
        t.name: torch.nn.EmbeddingBag(
            t.num_embeddings, t.embedding_dim, mode="sum", include_last_offset=True
        )
        for t in tables
    }
    with torch.no_grad():
        for name, bag in ref.items():
            bag.weight.copy_(ebc.embedding_bags[name].weight)
    opt = torch.optim.SGD(ebc.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD([b.weight for b in ref.values()], lr=0.5)
    for step in range(3):
        kjt = helpers.random_kjt(tables, 5, ("train", step))
        jts = kjt.to_dict()
        ref_out = torch.cat(
            [
                ref[t.name](jts[f].values(), jts[f].offsets())
                for t in tables
                for f in t.feature_names
            ],
            1,
        )
        loss = (ebc(kjt).values() ** 2).sum()
        ref_loss = (ref_out**2).sum()
        assert_close(loss, ref_loss)
        loss.backward()
        ref_loss.backward()
        opt.step()
        ref_opt.step()
        opt.zero_grad(set_to_none=step % 2 == 0)
        ref_opt.zero_grad()
    for name, bag in ref.items():
        assert_close(ebc.embedding_bags[name].weight.detach(), bag.weight.detach())


def test_check_ids_flag_skips_the_check(helpers: Any) -> None:
    tables = [_table("t", 10, 4, ["f"])]
    ebc = EmbeddingBagCollection(tables, check_ids=False)
    _check_forward_and_grads(helpers, ebc, helpers.random_kjt(tables, 3, "nocheck"))


# ---- bad input ---------------------------------------------------------------------------


def _kjt(keys: list[str], values: list[int], lengths: list[int], **kw: Any) -> KeyedJaggedTensor:
    return KeyedJaggedTensor(
        keys=keys, values=torch.tensor(values), lengths=torch.tensor(lengths), **kw
    )


@pytest.mark.parametrize("bad", [10, 4096, -1])
def test_out_of_range_id_names_feature_table_id_and_range(bad: int) -> None:
    tables = [_table("big", 5000, 4, ["user"]), _table("user_table", 10, 4, ["item"])]
    ebc = EmbeddingBagCollection(tables)
    kjt = _kjt(["user", "item"], [3, 4999, 1, bad], [2, 0, 1, 1])
    with pytest.raises(IndexError) as err:
        ebc(kjt)
    msg = str(err.value)
    assert f"feature 'item' id {bad} is out of range for table 'user_table'" in msg
    assert "[0, 10)" in msg


def test_out_of_range_id_in_first_table() -> None:
    ebc = EmbeddingBagCollection([_table("t", 4, 2, ["f"])])
    with pytest.raises(
        IndexError, match=r"feature 'f' id 4 is out of range for table 't' with 4 rows"
    ):
        ebc(_kjt(["f"], [0, 4], [1, 1]))


def test_missing_feature() -> None:
    ebc = EmbeddingBagCollection([_table("t", 4, 2, ["f"]), _table("u", 4, 2, ["g"])])
    with pytest.raises(ValueError, match=r"lacks feature\(s\) \['g'\].*keys \['f'\]"):
        ebc(_kjt(["f"], [0], [1]))


def test_weights_given_to_unweighted_module() -> None:
    ebc = EmbeddingBagCollection([_table("t", 4, 2, ["f"])])
    with pytest.raises(ValueError, match="unweighted but the KeyedJaggedTensor carries weights"):
        ebc(_kjt(["f"], [0], [1], weights=torch.ones(1)))


def test_weights_missing_for_weighted_module() -> None:
    ebc = EmbeddingBagCollection([_table("t", 4, 2, ["f"])], is_weighted=True)
    with pytest.raises(ValueError, match=r"is_weighted=True.*no weights"):
        ebc(_kjt(["f"], [0], [1]))


def test_mean_pooling_with_weights_is_refused() -> None:
    with pytest.raises(ValueError, match="table 'm' has MEAN pooling but is_weighted=True"):
        EmbeddingBagCollection([_table("m", 4, 2, ["f"], pooling=MEAN)], is_weighted=True)


def test_duplicate_table_names() -> None:
    with pytest.raises(ValueError, match="duplicate table name 't'"):
        EmbeddingBagCollection([_table("t", 4, 2, ["f"]), _table("t", 5, 2, ["g"])])


@pytest.mark.parametrize("name", ["items", "keys", "values", "update"])
def test_table_name_reserved_by_module_dict(name: str) -> None:
    with pytest.raises(ValueError, match=f"table name '{name}' is reserved by nn.ModuleDict"):
        EmbeddingBagCollection([_table(name, 4, 2, ["f"])])


def test_float_ids() -> None:
    ebc = EmbeddingBagCollection([_table("t", 4, 2, ["f"])])
    kjt = KeyedJaggedTensor(keys=["f"], values=torch.tensor([1.0, 2.0]), lengths=torch.tensor([2]))
    with pytest.raises(TypeError, match=r"torch\.float32"):
        ebc(kjt)


def test_embedding_dim_not_positive() -> None:
    with pytest.raises(ValueError, match="embedding_dim must be >= 1, got 0"):
        _table("t", 4, 0, ["f"])


def test_bad_tables_argument() -> None:
    with pytest.raises(TypeError, match="EmbeddingBagConfig"):
        EmbeddingBagCollection([EmbeddingConfig(name="t", num_embeddings=4, embedding_dim=2)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="pooling NONE"):
        EmbeddingBagCollection([_table("t", 4, 2, ["f"], pooling=PoolingType.NONE)])
    with pytest.raises(ValueError, match="INT64"):
        EmbeddingBagCollection([_table("t", 4, 2, ["f"], data_type=DataType.INT64)])
    with pytest.raises(ValueError, match=r"'a\.b'"):
        EmbeddingBagCollection([_table("a.b", 4, 2, ["f"])])


def test_two_forwards_one_backward_accumulate(helpers: Any) -> None:
    tables = [_table("t", 10, 4, ["f"]), _table("u", 12, 4, ["g"])]
    ebc = EmbeddingBagCollection(tables)
    k1, k2 = helpers.random_kjt(tables, 3, "acc1"), helpers.random_kjt(tables, 3, "acc2")
    (ebc(k1).values().sum() + ebc(k2).values().sum()).backward()
    ref_w = {n: w.detach().clone().requires_grad_() for n, w in _weights(ebc).items()}
    ref = [helpers.naive_pooled(tables, ref_w, k) for k in (k1, k2)]
    sum(torch.cat(list(r.values()), 1).sum() for r in ref).backward()
    for name, w in _weights(ebc).items():
        assert w.grad is not None and ref_w[name].grad is not None
        assert_close(w.grad, ref_w[name].grad)


def test_in_place_weight_update_between_forward_and_backward() -> None:
    ebc = EmbeddingBagCollection([_table("t", 4, 2, ["f"])])
    out = ebc(_kjt(["f"], [1, 1], [2]))
    ebc.load_state_dict({"embedding_bags.t.weight": torch.zeros(4, 2)})
    out.values().sum().backward()
    grad = ebc.embedding_bags["t"].weight.grad
    assert grad is not None and grad[1].tolist() == [2.0, 2.0]


def test_matches_torchrec_when_installed(helpers: Any) -> None:
    torchrec = pytest.importorskip("torchrec")
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TorchrecKJT

    tables = [
        _table("t1", 10, 4, ["f1", "f2"]),
        _table("t2", 20, 8, ["f2"], pooling=MEAN),
        _table("t3", 5, 4, ["f3"]),
    ]
    ours = EmbeddingBagCollection(tables)
    theirs = torchrec.EmbeddingBagCollection(
        tables=[
            torchrec.EmbeddingBagConfig(
                name=t.name,
                num_embeddings=t.num_embeddings,
                embedding_dim=t.embedding_dim,
                feature_names=list(t.feature_names),
                pooling=torchrec.PoolingType[t.pooling.value],
            )
            for t in tables
        ]
    )
    theirs.load_state_dict(ours.state_dict())
    kjt = helpers.random_kjt(tables, 4, "torchrec")
    their_kjt = TorchrecKJT(keys=kjt.keys(), values=kjt.values(), lengths=kjt.lengths())
    mine, ref = ours(kjt), theirs(their_kjt)
    assert mine.keys() == ref.keys()
    assert_close(mine.values(), ref.values())
