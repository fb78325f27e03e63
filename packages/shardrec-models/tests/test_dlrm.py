"""DLRM, DLRM_DCN and DLRMTrain against a plain-torch reference (and TorchRec when it imports)."""

from __future__ import annotations

import pathlib
import re
import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(pathlib.Path(__file__).parent))

from models_reference import (
    Batch,
    TableSpec,
    feature_limits,
    leaf_params,
    make_batch,
    make_ebc,
    randomize_,
    ref_dlrm,
)

from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig, PoolingType
from shardrec_jagged import KeyedJaggedTensor
from shardrec_models import DLRM, DLRM_DCN, DLRMTrain, InteractionArch
from shardrec_testing import assert_close, seeded_generator

TABLES: list[TableSpec] = [("t0", 11, ["f0", "f1"]), ("t1", 7, ["f2"]), ("t2", 9, ["f3"])]
DIM = 4
DENSE_IN = 5
DENSE = [6, DIM]
OVER = [7, 3, 1]


def build(
    tables: list[TableSpec] = TABLES,
    *,
    dcn: tuple[int, int] | None = None,
    dense: list[int] = DENSE,
    over: list[int] = OVER,
    dim: int = DIM,
    dense_in: int = DENSE_IN,
    pooling: PoolingType = PoolingType.SUM,
    seed: object = 0,
) -> DLRM:
    ebc = make_ebc(tables, dim, pooling=pooling)
    if dcn is None:
        model = DLRM(ebc, dense_in, dense, over)
    else:
        model = DLRM_DCN(ebc, dense_in, dense, over, dcn[0], dcn[1])
    randomize_(model, seeded_generator("weights", seed))
    return model


def reference(model: DLRM, tables: list[TableSpec], batch: Batch, **kw: object) -> torch.Tensor:
    crossnet = getattr(model.inter_arch, "crossnet", None)
    return ref_dlrm(
        leaf_params(model),
        tables,
        batch,
        dense_layers=len(model.dense_arch.model._mlp),
        over_layers=len(model.over_arch.model[0]._mlp) + 1,
        dcn_layers=None if crossnet is None else crossnet.num_layers,
        **kw,  # type: ignore[arg-type]
    )


# -- forward -------------------------------------------------------------------------------


@st.composite
def configs(draw: st.DrawFn) -> dict[str, object]:
    n_tables = draw(st.integers(1, 3))
    pool = ["f0", "f1", "f2", "f3"]
    tables: list[TableSpec] = []
    for t in range(n_tables):
        # A feature may be read by several tables (then keyed `feature@table`).
        features = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2, unique=True))
        tables.append((f"t{t}", draw(st.integers(1, 6)), features))
    dim = draw(st.integers(1, 4))
    hidden = draw(st.lists(st.integers(1, 5), max_size=2))
    over = [*draw(st.lists(st.integers(1, 5), max_size=2)), draw(st.integers(1, 2))]
    dcn = draw(st.none() | st.tuples(st.integers(0, 2), st.integers(1, 3)))
    return {
        "tables": tables,
        "dim": dim,
        "dense": [*hidden, dim],
        "over": over,
        "dcn": dcn,
        "dense_in": draw(st.integers(1, 3)),
        "batch": draw(st.integers(0, 4)),
        "pooling": draw(st.sampled_from([PoolingType.SUM, PoolingType.MEAN])),
        "seed": draw(st.integers(0, 2**16)),
    }


@settings(max_examples=40, deadline=None)
@given(configs())
def test_forward_matches_reference(cfg: dict[str, object]) -> None:
    tables = cfg["tables"]
    model = build(
        tables,  # type: ignore[arg-type]
        dcn=cfg["dcn"],  # type: ignore[arg-type]
        dense=cfg["dense"],  # type: ignore[arg-type]
        over=cfg["over"],  # type: ignore[arg-type]
        dim=cfg["dim"],  # type: ignore[arg-type]
        dense_in=cfg["dense_in"],  # type: ignore[arg-type]
        pooling=cfg["pooling"],  # type: ignore[arg-type]
        seed=cfg["seed"],
    )
    gen = seeded_generator("batch", cfg["seed"])
    batch = make_batch(feature_limits(tables), cfg["dense_in"], cfg["batch"], gen)  # type: ignore[arg-type]
    logits = model(batch.dense_features, batch.sparse_features)
    want = reference(model, tables, batch, pooling=cfg["pooling"])  # type: ignore[arg-type]
    assert logits.shape == (cfg["batch"], cfg["over"][-1])  # type: ignore[index]
    assert_close(logits, want.detach(), msg=str(cfg))


@pytest.mark.parametrize("dcn", [None, (2, 3)], ids=["dlrm", "dcn"])
def test_named_edge_cases(dcn: tuple[int, int] | None) -> None:
    model = build(dcn=dcn)
    limits = feature_limits(TABLES)
    gen = seeded_generator("edge", dcn)
    # Zero batch: (0, 1) logits, no error.
    empty = make_batch(limits, DENSE_IN, 0, gen)
    assert model(empty.dense_features, empty.sparse_features).shape == (0, 1)
    # Every bag empty: pooled zeros, the dense path alone decides.
    batch = make_batch(limits, DENSE_IN, 3, gen)
    kjt = KeyedJaggedTensor(
        list(limits), torch.zeros(0, dtype=torch.long), lengths=torch.zeros(12, dtype=torch.long)
    )
    batch = Batch(batch.dense_features, kjt, batch.labels)
    assert_close(model(batch.dense_features, kjt), reference(model, TABLES, batch).detach())
    # Duplicate ids in one bag, a batch of one.
    kjt = KeyedJaggedTensor(
        list(limits), torch.tensor([3, 3, 3, 0, 1, 1]), lengths=torch.tensor([3, 1, 0, 2])
    )
    one = Batch(torch.randn(1, DENSE_IN, generator=gen), kjt, torch.ones(1))
    assert_close(model(one.dense_features, kjt), reference(model, TABLES, one).detach())


def test_one_feature_has_one_pair() -> None:
    tables: list[TableSpec] = [("only", 5, ["f"])]
    model = build(tables, over=[1])
    assert model.over_arch.in_features == DIM + 1  # the dense output, then <dense, f>
    batch = make_batch(feature_limits(tables), DENSE_IN, 4, seeded_generator("one"))
    assert_close(
        model(batch.dense_features, batch.sparse_features),
        reference(model, tables, batch).detach(),
    )


def test_interaction_order_is_row_by_row() -> None:
    arch = InteractionArch(2)
    dense = torch.tensor([[1.0, 0.0]])
    sparse = torch.tensor([[[2.0, 0.0], [0.0, 3.0]]])
    # pairs (d, f1), (d, f2), (f1, f2) after the dense vector itself
    assert arch(dense, sparse).tolist() == [[1.0, 0.0, 2.0, 0.0, 0.0]]


# -- gradients and the train wrapper ---------------------------------------------------------


@pytest.mark.parametrize("dcn", [None, (2, 3)], ids=["dlrm", "dcn"])
def test_train_loss_and_gradients_match_reference(dcn: tuple[int, int] | None) -> None:
    model = build(dcn=dcn, seed="grad")
    train = DLRMTrain(model)
    batch = make_batch(feature_limits(TABLES), DENSE_IN, 6, seeded_generator("grad", dcn))
    loss, (loss_d, logits, labels) = train(batch)
    params = leaf_params(model)
    ref_logits = ref_dlrm(
        params,
        TABLES,
        batch,
        dense_layers=len(DENSE),
        over_layers=len(OVER),
        dcn_layers=None if dcn is None else dcn[0],
    ).squeeze(1)
    ref_loss = F.binary_cross_entropy_with_logits(ref_logits, batch.labels)
    assert_close(loss, ref_loss)
    assert logits.shape == labels.shape == (6,)
    assert not (loss_d.requires_grad or logits.requires_grad or labels.requires_grad)
    assert torch.equal(labels, batch.labels)
    assert_close(logits, ref_logits.detach())
    loss.backward()
    ref_loss.backward()
    names = dict(model.named_parameters())
    assert sorted(names) == sorted(k for k, v in params.items() if v.requires_grad)
    for name, p in names.items():
        assert p.grad is not None, name
        want = params[name].grad
        assert want is not None, name
        assert_close(p.grad, want, msg=name)
    assert sorted(train.state_dict()) == sorted(f"model.{k}" for k in model.state_dict())


def test_train_accepts_integer_labels() -> None:
    train = DLRMTrain(build())
    batch = make_batch(feature_limits(TABLES), DENSE_IN, 3, seeded_generator("int"))
    int_batch = Batch(batch.dense_features, batch.sparse_features, batch.labels.long())
    assert_close(train(int_batch)[0], train(batch)[0])


# -- meta ------------------------------------------------------------------------------------


def test_meta_model_materializes_with_reset_parameters() -> None:
    ebc = make_ebc(TABLES, DIM, device="meta")
    model = DLRM_DCN(ebc, DENSE_IN, DENSE, OVER, 2, 3, dense_device="meta")
    assert all(p.is_meta for p in model.parameters())
    assert all(b.is_meta for b in model.buffers())
    # What DistributedModelParallel does for the dense part, module by module.
    model.to_empty(device="cpu")
    for module in model.modules():
        reset = getattr(module, "reset_parameters", None)
        if callable(reset):
            reset()
    crossnet = model.inter_arch.crossnet  # type: ignore[union-attr]
    width = (4 + 1) * DIM
    for layer in range(2):
        assert torch.equal(crossnet.bias[layer], torch.zeros(width))
        for kernel in (crossnet.W_kernels[layer], crossnet.V_kernels[layer]):
            xavier_std = (2 / (width + 3)) ** 0.5
            assert torch.isfinite(kernel).all()
            assert 0.3 * xavier_std < kernel.std() < 3 * xavier_std
    plain = DLRM(make_ebc(TABLES, DIM, device="meta"), DENSE_IN, DENSE, OVER, dense_device="meta")
    plain.to_empty(device="cpu")
    for module in plain.modules():
        reset = getattr(module, "reset_parameters", None)
        if callable(reset):
            reset()
    assert list(plain.buffers()) == []  # nothing for DDP to broadcast every step
    batch = make_batch(feature_limits(TABLES), DENSE_IN, 3, seeded_generator("meta"))
    for m, dcn_layers in ((model, 2), (plain, None)):
        assert_close(
            m(batch.dense_features, batch.sparse_features),
            ref_dlrm(
                leaf_params(m),
                TABLES,
                batch,
                dense_layers=len(DENSE),
                over_layers=len(OVER),
                dcn_layers=dcn_layers,
            ).detach(),
        )


def test_default_init_is_nn_linear() -> None:
    torch.manual_seed(0)
    model = DLRM(make_ebc(TABLES, DIM), DENSE_IN, DENSE, OVER)
    first = model.dense_arch.model._mlp[0]._linear  # type: ignore[index]
    bound = 1 / DENSE_IN**0.5  # kaiming_uniform(a=sqrt(5)) == U(-1/sqrt(fan_in), ..)
    assert first.weight.abs().max() <= bound
    assert first.bias.abs().max() <= bound
    assert first.weight.std() > 0.2 * bound


# -- TorchRec parity -------------------------------------------------------------------------


def _torchrec() -> object:
    try:
        import torchrec
        import torchrec.models.dlrm
    except Exception as exc:  # not installed (nox unit venvs), or its fbgemm fails to load
        pytest.skip(f"torchrec does not import here: {type(exc).__name__}: {exc}")
    return torchrec


@pytest.mark.parametrize("dcn", [None, (2, 3)], ids=["dlrm", "dcn"])
def test_matches_torchrec(dcn: tuple[int, int] | None) -> None:
    torchrec = _torchrec()
    trc_dlrm = torchrec.models.dlrm  # type: ignore[attr-defined]
    ours = build(dcn=dcn, seed="torchrec")
    ebc = torchrec.EmbeddingBagCollection(  # type: ignore[attr-defined]
        tables=[
            torchrec.EmbeddingBagConfig(  # type: ignore[attr-defined]
                name=n, num_embeddings=r, embedding_dim=DIM, feature_names=f
            )
            for n, r, f in TABLES
        ]
    )
    if dcn is None:
        theirs = trc_dlrm.DLRM(ebc, DENSE_IN, DENSE, OVER)
    else:
        theirs = trc_dlrm.DLRM_DCN(ebc, DENSE_IN, DENSE, OVER, dcn[0], dcn[1])
    # Same state_dict names and shapes: their checkpoint loads into ours and back.
    assert {k: v.shape for k, v in ours.state_dict().items()} == {
        k: v.shape for k, v in theirs.state_dict().items()
    }
    ours.load_state_dict(theirs.state_dict())
    randomize_(ours, seeded_generator("torchrec-weights", dcn))
    theirs.load_state_dict(ours.state_dict())
    ours_train, theirs_train = DLRMTrain(ours), trc_dlrm.DLRMTrain(theirs)
    assert sorted(ours_train.state_dict()) == sorted(theirs_train.state_dict())
    batch = make_batch(feature_limits(TABLES), DENSE_IN, 5, seeded_generator("trc", dcn))
    kjt = batch.sparse_features
    trc_batch = Batch(
        batch.dense_features,
        torchrec.KeyedJaggedTensor(kjt.keys(), kjt.values(), lengths=kjt.lengths()),  # type: ignore[attr-defined]
        batch.labels,
    )
    loss, (_, logits, _) = ours_train(batch)
    trc_loss, (_, trc_logits, _) = theirs_train(trc_batch)
    assert_close(logits, trc_logits)
    assert_close(loss, trc_loss.detach())
    loss.backward()
    trc_loss.backward()
    theirs_grads = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert p.grad is not None and theirs_grads[name].grad is not None, name
        assert_close(p.grad, theirs_grads[name].grad, msg=name)


# -- bad input -------------------------------------------------------------------------------


def test_tables_of_different_dims() -> None:
    ebc = EmbeddingBagCollection(
        [
            EmbeddingBagConfig(name="a", num_embeddings=3, embedding_dim=4, feature_names=["x"]),
            EmbeddingBagConfig(name="b", num_embeddings=3, embedding_dim=8, feature_names=["y"]),
        ]
    )
    with pytest.raises(ValueError, match=r"same embedding_dim.*a: 4, b: 8"):
        DLRM(ebc, 3, [4], [1])


def test_no_tables() -> None:
    with pytest.raises(ValueError, match="at least one embedding table"):
        DLRM(make_ebc([], DIM), 3, [DIM], [1])


def test_dense_arch_must_end_with_embedding_dim() -> None:
    with pytest.raises(ValueError, match=r"dense_arch_layer_sizes\[-1\] is 6.*embedding_dim is 4"):
        DLRM(make_ebc(TABLES, DIM), DENSE_IN, [8, 6], OVER)


@pytest.mark.parametrize("arg", ["dense", "over"])
@pytest.mark.parametrize("sizes", [[], [0], [3, -2], [2.5]], ids=["empty", "zero", "neg", "float"])
def test_bad_layer_sizes(arg: str, sizes: list[int]) -> None:
    dense = sizes if arg == "dense" else DENSE
    over = sizes if arg == "over" else OVER
    name = f"{arg}_arch_layer_sizes"
    bad = "[]" if not sizes else repr(sizes[-1])
    with pytest.raises(ValueError, match=rf"{name} .*{re.escape(bad)}"):
        DLRM(make_ebc(TABLES, DIM), DENSE_IN, dense, over)


def test_bad_dense_in_features() -> None:
    with pytest.raises(ValueError, match="dense_in_features must be an int >= 1, got 0"):
        DLRM(make_ebc(TABLES, DIM), 0, DENSE, OVER)


@pytest.mark.parametrize("rank", [0, -1])
def test_bad_low_rank(rank: int) -> None:
    with pytest.raises(ValueError, match=rf"dcn_low_rank_dim must be an int >= 1, got {rank}"):
        DLRM_DCN(make_ebc(TABLES, DIM), DENSE_IN, DENSE, OVER, 2, rank)


def test_bad_num_layers() -> None:
    with pytest.raises(ValueError, match="dcn_num_layers must be an int >= 0, got -1"):
        DLRM_DCN(make_ebc(TABLES, DIM), DENSE_IN, DENSE, OVER, -1, 2)


@pytest.mark.parametrize("dcn", [None, (1, 2)], ids=["dlrm", "dcn"])
def test_dense_width_mismatch_at_forward(dcn: tuple[int, int] | None) -> None:
    model = build(dcn=dcn)
    batch = make_batch(feature_limits(TABLES), 7, 3, seeded_generator("width"))
    with pytest.raises(ValueError, match=r"shape \(3, 7\).*dense_in_features=5.*\(B, 5\)"):
        model(batch.dense_features, batch.sparse_features)
    with pytest.raises(ValueError, match=r"shape \(5,\)"):
        model(torch.randn(5), batch.sparse_features)


def test_dense_and_sparse_batch_mismatch() -> None:
    model = build()
    batch = make_batch(feature_limits(TABLES), DENSE_IN, 3, seeded_generator("rows"))
    with pytest.raises(ValueError, match="dense_features has 2 rows but sparse_features has batch"):
        model(batch.dense_features[:2], batch.sparse_features)


def test_train_needs_one_logit() -> None:
    with pytest.raises(ValueError, match="ends with 2; end it with 1"):
        DLRMTrain(build(over=[3, 2]))
    with pytest.raises(TypeError, match="wraps a DLRM or DLRM_DCN, got Linear"):
        DLRMTrain(torch.nn.Linear(2, 1))  # type: ignore[arg-type]


def test_train_labels_shape() -> None:
    train = DLRMTrain(build())
    batch = make_batch(feature_limits(TABLES), DENSE_IN, 3, seeded_generator("labels"))
    bad = Batch(batch.dense_features, batch.sparse_features, batch.labels[:, None])
    with pytest.raises(ValueError, match=r"labels have shape \(3, 1\).*expected \(3,\)"):
        train(bad)
