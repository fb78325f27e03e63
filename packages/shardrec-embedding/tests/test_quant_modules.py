"""Quantized collections against the float modules, state dicts, bad input, TorchScript, export."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from _quant_cases import float_and_quantized, qconfig, quantized
from torch import nn
from torch.ao.quantization import PlaceholderObserver

from shardrec_embedding import (
    BaseEmbeddingConfig,
    DataType,
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
    PoolingType,
    QuantConfig,
    QuantEmbeddingBagCollection,
    QuantEmbeddingCollection,
    quantize_inference_model,
)
from shardrec_embedding.quant import dequantize, quantize, scale_bias
from shardrec_jagged import KeyedJaggedTensor, script_fields
from shardrec_testing import assert_scripted_reloads_without_shardrec

DTYPES = {
    torch.int8: DataType.INT8,
    torch.quint4x2: DataType.INT4,
    torch.quint2x4: DataType.INT2,
    torch.float16: DataType.FP16,
    torch.bfloat16: DataType.BF16,
}


def _bag_tables(pooling: PoolingType = PoolingType.SUM) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name="t0",
            num_embeddings=40,
            embedding_dim=16,
            feature_names=["a", "b"],
            pooling=pooling,
        ),
        EmbeddingBagConfig(
            name="t1", num_embeddings=25, embedding_dim=8, feature_names=["c"], pooling=pooling
        ),
        EmbeddingBagConfig(
            name="t2", num_embeddings=30, embedding_dim=16, feature_names=["a"], pooling=pooling
        ),
        EmbeddingBagConfig(
            name="t3", num_embeddings=20, embedding_dim=6, feature_names=["d"], pooling=pooling
        ),
    ]


def _pooled_bound(
    ebc: EmbeddingBagCollection, kjt: KeyedJaggedTensor, data_type: DataType, helpers: object
) -> dict[str, torch.Tensor]:
    """Per output element: sum over the bag of |id weight| * (row scale / 2) (MEAN: / n)."""
    tables = ebc.embedding_bag_configs()
    half_scales = {}
    for t in tables:
        w = ebc.embedding_bags[t.name].weight.detach()
        if data_type in (DataType.INT8, DataType.INT4, DataType.INT2):
            s, _ = scale_bias(quantize(w, data_type))
            half_scales[t.name] = (s / 2 + 1e-6).unsqueeze(1).expand(-1, t.embedding_dim)
        else:
            rel = 2.0**-8 if data_type is DataType.BF16 else 2.0**-11
            half_scales[t.name] = w.abs() * rel + 1e-7
    positive = KeyedJaggedTensor(
        keys=kjt.keys(),
        values=kjt.values(),
        lengths=kjt.lengths(),
        weights=None if kjt.weights_or_none() is None else kjt.weights().abs(),
        stride=kjt.stride(),
    )
    return helpers.naive_pooled(tables, half_scales, positive)  # type: ignore[attr-defined]


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_ebc_within_scale_bound(
    dtype: torch.dtype, pooled_case: tuple[PoolingType, bool], helpers: object
) -> None:
    pooling, weighted = pooled_case
    ebc, qebc = float_and_quantized(_bag_tables(pooling), weighted, dtype)
    kjt = helpers.random_kjt(
        ebc.embedding_bag_configs(),
        7,
        ("q", str(dtype), pooling.value, weighted),
        weighted=weighted,
        max_length=5,
    )  # type: ignore[attr-defined]
    assert int((kjt.lengths() == 0).sum()) > 0  # empty bags covered
    out = qebc(kjt)
    ref = ebc(kjt)
    assert out.keys() == ref.keys() and out.values().dtype == torch.float32
    bound = _pooled_bound(ebc, kjt, DTYPES[dtype], helpers)
    got, want = out.to_dict(), ref.to_dict()
    # fp16/bf16 tables also pool in their own precision: one rounding per added row
    accumulate = {DataType.FP16: 2.0**-11, DataType.BF16: 2.0**-8}.get(DTYPES[dtype], 0.0) * 5
    for name in ref.keys():  # noqa: SIM118  # KeyedTensor iterates values
        slack = bound[name] + want[name].detach().abs() * accumulate + 1e-5
        assert bool(((got[name] - want[name]).abs() <= slack).all()), name
    # exact against a naive loop over the dequantized tables
    sd = qebc.state_dict()
    deq = {}
    for t in qebc.embedding_bag_configs():
        rows = sd[f"embedding_bags.{t.name}.weight"]
        if f"embedding_bags.{t.name}.weight_qscaleshift" in sd:
            rows = torch.cat([rows, sd[f"embedding_bags.{t.name}.weight_qscaleshift"]], dim=1)
        deq[t.name] = dequantize(rows, t.embedding_dim, t.data_type)
    naive = helpers.naive_pooled(qebc.embedding_bag_configs(), deq, kjt)  # type: ignore[attr-defined]
    for name in ref.keys():  # noqa: SIM118  # KeyedTensor iterates values
        tol = 1e-5 if accumulate == 0 else accumulate
        torch.testing.assert_close(got[name], naive[name], rtol=tol, atol=tol)


def test_quantize_dynamic_with_mapping_and_fp16_output() -> None:
    ebc = EmbeddingBagCollection(_bag_tables())
    model = nn.Sequential(ebc)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = torch.ao.quantization.quantize_dynamic(
            model,
            qconfig_spec={EmbeddingBagCollection: qconfig(torch.int8, torch.half)},
            mapping={EmbeddingBagCollection: QuantEmbeddingBagCollection},
            inplace=False,
        )
    assert isinstance(q[0], QuantEmbeddingBagCollection) and isinstance(
        model[0], EmbeddingBagCollection
    )
    kjt = KeyedJaggedTensor.from_lengths_sync(
        ["a", "b", "c", "d"], torch.tensor([1, 2, 3, 4]), torch.tensor([1, 1, 1, 1])
    )
    out = q(kjt).values()
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.float(), ebc(kjt).values(), atol=2e-2, rtol=0)
    assert all(b.dtype == torch.uint8 for b in q.buffers())


def test_per_table_dtype_and_bytes() -> None:
    ebc = EmbeddingBagCollection(_bag_tables())
    ebc.qconfig = QuantConfig(
        activation=PlaceholderObserver.with_args(dtype=torch.float),
        weight=PlaceholderObserver.with_args(dtype=torch.int8),
        per_table_weight_dtype={"t1": torch.quint4x2, "t3": torch.float16},
    )
    q = QuantEmbeddingBagCollection.from_float(ebc)
    assert [t.data_type for t in q.embedding_bag_configs()] == [
        DataType.INT8,
        DataType.INT4,
        DataType.INT8,
        DataType.FP16,
    ]
    # INT8 rows: 16 codes + 8 bytes (fp32 scale/bias for torch's kernel); INT4: 4 + 4; FP16 2 * 6
    assert q.storage_bytes() == 70 * 24 + 25 * 8 + 20 * 12


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_state_dict_round_trip_exact(dtype: torch.dtype) -> None:
    ebc = EmbeddingBagCollection(_bag_tables())
    q = quantized(ebc, dtype)
    sd = q.state_dict()
    names = {"t0", "t1", "t2", "t3"}
    assert {k.split(".")[1] for k in sd} == names
    if DTYPES[dtype] in (DataType.INT8, DataType.INT4, DataType.INT2):
        assert sd["embedding_bags.t3.weight_qscaleshift"].shape == (20, 4)
    fresh = QuantEmbeddingBagCollection(q.embedding_bag_configs())
    fresh.load_state_dict(sd)
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, sd[k]), k
    kjt = KeyedJaggedTensor.from_lengths_sync(
        ["a", "b", "c", "d"], torch.tensor([1, 2, 3, 4, 5]), torch.tensor([2, 1, 1, 1])
    )
    assert torch.equal(fresh(kjt).values(), q(kjt).values())


def test_state_dict_shape_mismatch_and_missing_keys() -> None:
    q = quantized(EmbeddingBagCollection(_bag_tables()), torch.int8)
    sd = q.state_dict()
    sd["embedding_bags.t1.weight"] = torch.zeros(25, 9, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match=r"embedding_bags.t1.weight: expected \(25, 8\)"):
        q.load_state_dict(sd)
    del sd["embedding_bags.t2.weight_qscaleshift"]
    with pytest.raises(RuntimeError, match=r"t2\.weight_qscaleshift"):
        q.load_state_dict(sd)


@pytest.mark.parametrize(
    ("cls", "wrong", "expected"),
    [
        (QuantEmbeddingBagCollection, EmbeddingConfig, "EmbeddingBagConfigs"),
        (QuantEmbeddingCollection, EmbeddingBagConfig, "EmbeddingConfigs"),
    ],
)
def test_a_table_config_of_the_other_kind_is_a_type_error(
    cls: type[nn.Module], wrong: type[BaseEmbeddingConfig], expected: str
) -> None:
    table = wrong(name="t", num_embeddings=3, embedding_dim=4, data_type=DataType.INT8)
    with pytest.raises(TypeError, match=f"{cls.__name__} takes {expected}, got {wrong.__name__}"):
        cls([table])


def test_bad_input() -> None:
    ebc = EmbeddingBagCollection(_bag_tables())
    with pytest.raises(ValueError, match="no qconfig"):
        QuantEmbeddingBagCollection.from_float(ebc)
    ebc.qconfig = qconfig(torch.int32)
    with pytest.raises(ValueError, match=r"torch\.int32"):
        QuantEmbeddingBagCollection.from_float(ebc)
    with pytest.raises(ValueError, match=r"torch\.int32"):
        quantize_inference_model(nn.Sequential(EmbeddingBagCollection(_bag_tables())), torch.int32)
    with pytest.raises(ValueError, match="NFP8"):
        QuantEmbeddingBagCollection(
            [
                EmbeddingBagConfig(
                    name="t", num_embeddings=3, embedding_dim=4, data_type=DataType.NFP8
                )
            ]
        )
    q = quantize_inference_model(EmbeddingBagCollection(_bag_tables()))
    kjt = KeyedJaggedTensor.from_lengths_sync(
        ["a", "b", "c", "d"], torch.tensor([1, 2, 25, 4]), torch.tensor([1, 1, 1, 1])
    )
    with pytest.raises(
        IndexError, match="feature 'c' id 25 is out of range for table 't1' with 25 rows"
    ):
        q(kjt)
    neg = KeyedJaggedTensor.from_lengths_sync(
        ["a", "b", "c", "d"], torch.tensor([-1, 2, 2, 4]), torch.tensor([1, 1, 1, 1])
    )
    with pytest.raises(IndexError, match="feature 'a' id -1"):
        q(neg)
    with pytest.raises(ValueError, match="lacks feature"):
        q(KeyedJaggedTensor.from_lengths_sync(["a"], torch.tensor([1]), torch.tensor([1])))


def test_ec_within_scale_bound(helpers: object) -> None:
    tables = [
        EmbeddingConfig(name="u", num_embeddings=30, embedding_dim=12, feature_names=["x", "y"]),
        EmbeddingConfig(name="v", num_embeddings=10, embedding_dim=12, feature_names=["z"]),
    ]
    ec = EmbeddingCollection(tables, need_indices=True)
    with pytest.raises(ValueError, match="EmbeddingCollection has no qconfig"):
        QuantEmbeddingCollection.from_float(ec)
    kjt = helpers.random_kjt(tables, 5, "ec")  # type: ignore[attr-defined]
    for dtype in (torch.int8, torch.quint4x2, torch.float16):
        model = quantize_inference_model(nn.Sequential(copy.deepcopy(ec)), dtype)
        q = model[0]
        assert isinstance(q, QuantEmbeddingCollection)
        got, want = q(kjt), ec(kjt)
        assert list(got) == list(want)
        for name, jt in want.items():
            assert torch.equal(got[name].lengths(), jt.lengths())
            assert torch.equal(got[name].weights(), jt.weights())
            table = "v" if name == "z" else "u"
            w = ec.embeddings[table].weight.detach()
            if dtype is torch.float16:
                bound = w.abs().amax() * 2.0**-11 + 1e-7
                assert bool(((got[name].values() - jt.values()).abs() <= bound).all())
            else:
                s, _ = scale_bias(quantize(w, DTYPES[dtype]))
                ids = jt.weights()
                assert bool(
                    (
                        (got[name].values() - jt.values()).abs() <= s[ids].unsqueeze(1) / 2 + 1e-6
                    ).all()
                )
        bad = KeyedJaggedTensor.from_lengths_sync(
            ["x", "y", "z"], torch.tensor([0, 1, 10]), torch.tensor([1, 1, 1])
        )
        with pytest.raises(IndexError, match="feature 'z' id 10 is out of range for table 'v'"):
            q(bad)
        sd = q.state_dict()
        fresh = QuantEmbeddingCollection(q.embedding_configs(), need_indices=True)
        fresh.load_state_dict(sd)
        assert torch.equal(fresh(kjt)["z"].values(), got["z"].values())


class _Model(nn.Module):
    def __init__(self, ebc: nn.Module) -> None:
        super().__init__()
        self.ebc = ebc
        self.dense = nn.Linear(16 + 16 + 8 + 16 + 6, 1)

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        return self.dense(self.ebc(kjt).values())


def _script_kjt(weighted: bool = False) -> KeyedJaggedTensor:
    return KeyedJaggedTensor(
        keys=["a", "b", "c", "d"],
        values=torch.tensor([1, 2, 3, 4, 5, 6]),
        lengths=torch.tensor([2, 0, 1, 1, 0, 1, 1, 0]),
        weights=torch.rand(6) if weighted else None,
    )


@pytest.mark.parametrize(
    ("dtype", "pooling", "weighted"),
    [
        (torch.int8, PoolingType.SUM, False),
        (torch.quint4x2, PoolingType.MEAN, False),
        (torch.float16, PoolingType.SUM, True),
    ],
)
def test_torchscript_takes_the_kjt(
    dtype: torch.dtype, pooling: PoolingType, weighted: bool
) -> None:
    q = quantize_inference_model(
        EmbeddingBagCollection(_bag_tables(pooling), is_weighted=weighted), dtype
    )
    scripted = torch.jit.script(q)
    kjt = _script_kjt(weighted)
    got, want = scripted(kjt), q(kjt)
    assert got.keys() == want.keys()
    assert torch.equal(got.values(), want.values())
    # the values/lengths form stays available for servers that never build a KJT
    assert torch.equal(
        torch.jit.script(q.scriptable(kjt.keys()))(
            kjt.values(), kjt.lengths(), kjt.weights_or_none()
        ),
        want.values(),
    )


def test_torchscript_bad_input_names_the_value() -> None:
    q = quantize_inference_model(EmbeddingBagCollection(_bag_tables()), torch.int8)
    scripted = torch.jit.script(q)
    kjt = _script_kjt()
    out_of_range = KeyedJaggedTensor(
        keys=kjt.keys(), values=torch.tensor([1, 2, 3, 4, 5, 99]), lengths=kjt.lengths()
    )
    with pytest.raises(torch.jit.Error, match="feature 'd' id 99 is out of range for table 't3'"):
        scripted(out_of_range)
    missing = KeyedJaggedTensor(keys=["a", "b"], values=kjt.values()[:3], lengths=kjt.lengths()[:4])
    with pytest.raises(torch.jit.Error, match="lacks feature 'c' that table 't1' reads"):
        scripted(missing)
    weighted = _script_kjt(weighted=True)
    with pytest.raises(torch.jit.Error, match="unweighted but the KeyedJaggedTensor carries"):
        scripted(weighted)
    floats = KeyedJaggedTensor(keys=kjt.keys(), values=kjt.values().float(), lengths=kjt.lengths())
    with pytest.raises(torch.jit.Error, match="ids must be an integer tensor"):
        scripted(floats)


def test_torchscript_ec_takes_the_kjt() -> None:
    class Seq(nn.Module):
        def __init__(self, ec: nn.Module) -> None:
            super().__init__()
            self.ec = ec

        def forward(self, kjt: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
            return {k: jt.values() for k, jt in self.ec(kjt).items()}

    ec = EmbeddingCollection(
        [
            EmbeddingConfig(name="x", num_embeddings=30, embedding_dim=8, feature_names=["a"]),
            EmbeddingConfig(name="y", num_embeddings=20, embedding_dim=8, feature_names=["b"]),
        ],
        need_indices=True,
    )
    q = quantize_inference_model(ec, torch.int8)
    assert isinstance(q, QuantEmbeddingCollection)
    kjt = KeyedJaggedTensor(
        keys=["a", "b"], values=torch.tensor([3, 1, 4, 1, 5]), lengths=torch.tensor([2, 0, 1, 2])
    )
    got_jts, want_jts = torch.jit.script(q)(kjt), q(kjt)
    assert got_jts.keys() == want_jts.keys()
    for name, jt in want_jts.items():
        assert torch.equal(got_jts[name].values(), jt.values())
        assert torch.equal(got_jts[name].lengths(), jt.lengths())
        assert torch.equal(got_jts[name].weights(), jt.weights())
    got = torch.jit.script(Seq(q))(kjt)
    assert all(torch.equal(got[k], jt.values()) for k, jt in want_jts.items())


def test_torchscript_artifact_reloads_without_our_classes(tmp_path: Path) -> None:
    q = quantize_inference_model(EmbeddingBagCollection(_bag_tables()), torch.quint4x2)
    model = _Model(q)
    kjt = _script_kjt()
    scripted = torch.jit.script(model)
    expected = model(kjt)
    assert torch.equal(scripted(kjt), expected)
    assert_scripted_reloads_without_shardrec(scripted, script_fields(kjt), expected, tmp_path)


def test_torch_export_with_kjt_input(tmp_path: Path) -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ebc = EmbeddingBagCollection(_bag_tables(), is_weighted=True)

        def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
            return self.ebc(kjt).values()

    for dtype in (torch.quint4x2,):  # export traces take ~10 s each on CPU
        m = quantize_inference_model(M(), dtype)
        kjt = KeyedJaggedTensor.from_lengths_sync(
            ["a", "b", "c", "d"],
            torch.tensor([1, 2, 3, 4, 5]),
            torch.tensor([2, 1, 1, 1]),
            weights=torch.rand(5),
        )
        ep = torch.export.export(m, (kjt,), strict=False)
        torch.testing.assert_close(ep.module()(kjt), m(kjt), rtol=1e-6, atol=1e-6)
        # The saved program takes the KJT itself; reloading it needs shardrec_jagged imported
        # (the KJT is a pytree node of the input spec), not the embedding package.
        path = tmp_path / f"ep_{str(dtype).split('.')[-1]}.pt2"
        torch.export.save(ep, path)
        torch.save({"kjt": script_fields(kjt), "expected": m(kjt)}, tmp_path / "io.pt")
        code = textwrap.dedent(f"""
            import sys, torch
            from shardrec_jagged import KeyedJaggedTensor
            ep = torch.export.load({str(path)!r})
            io = torch.load({str(tmp_path / "io.pt")!r})
            assert "shardrec_embedding" not in sys.modules, "imported shardrec_embedding"
            f = io["kjt"]
            kjt = KeyedJaggedTensor(
                keys=f["_keys"], values=f["_values"], weights=f["_weights"], lengths=f["_lengths"]
            )
            got = ep.module()(kjt)
            torch.testing.assert_close(got, io["expected"], rtol=1e-6, atol=1e-6)
            print("ok")
        """)
        run = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, run.stderr
