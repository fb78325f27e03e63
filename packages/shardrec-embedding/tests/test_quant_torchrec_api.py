"""TorchRec's quantization entry points: `quantize_embeddings`, the split scale/bias state dict,
and float tables declared with a quantized data type (trained in fp16)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from shardrec_embedding import (
    DataType,
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
    QuantEmbeddingBagCollection,
    QuantEmbeddingCollection,
)
from shardrec_embedding.quant import (
    MODULE_ATTR_USE_UNFLATTENED_LENGTHS_FOR_BATCHING,
    quant_prep_enable_quant_state_dict_split_scale_bias,
    quant_prep_enable_quant_state_dict_split_scale_bias_for_types,
    quantize_embeddings,
    quantize_inference_model,
)
from shardrec_jagged import KeyedJaggedTensor
from shardrec_jagged.fx import symbolic_trace

_TABLES = [
    {"name": "t1", "num_embeddings": 12, "embedding_dim": 8, "feature_names": ["f1"]},
    {"name": "t2", "num_embeddings": 9, "embedding_dim": 8, "feature_names": ["f2"]},
]


def _bags(data_type: DataType = DataType.FP32) -> list[EmbeddingBagConfig]:
    return [EmbeddingBagConfig(**kw, data_type=data_type) for kw in _TABLES]


def _seqs(data_type: DataType = DataType.FP32) -> list[EmbeddingConfig]:
    return [EmbeddingConfig(**kw, data_type=data_type) for kw in _TABLES]


def _kjt(seed: int = 0) -> KeyedJaggedTensor:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 4, (6,), generator=g)
    n = int(lengths.sum())
    values = torch.cat(
        [
            torch.randint(0, 12, (int(lengths[:3].sum()),), generator=g),
            torch.randint(0, 9, (n - int(lengths[:3].sum()),), generator=g),
        ]
    )
    return KeyedJaggedTensor.from_lengths_sync(["f1", "f2"], values, lengths)


class _Holder(nn.Module):
    def __init__(self, bags: nn.Module, seqs: nn.Module) -> None:
        super().__init__()
        self.bags = bags
        self.seqs = seqs


def test_quantize_embeddings_swaps_bags_only_by_default() -> None:
    torch.manual_seed(0)
    model = _Holder(EmbeddingBagCollection(_bags()), EmbeddingCollection(_seqs()))
    reference = quantize_inference_model(
        copy.deepcopy(model).bags, torch.int8, per_table_weight_dtype={"t1": torch.float16}
    )
    out = quantize_embeddings(
        model, dtype=torch.int8, inplace=True, per_table_weight_dtype={"t1": torch.float16}
    )
    assert out is model
    assert isinstance(model.bags, QuantEmbeddingBagCollection)
    assert isinstance(model.seqs, EmbeddingCollection)  # not in the default spec
    types = {t.name: t.data_type for t in model.bags.embedding_bag_configs()}
    assert types == {"t1": DataType.FP16, "t2": DataType.INT8}
    kjt = _kjt()
    assert torch.equal(model.bags(kjt).values(), reference(kjt).values())


def test_quantize_embeddings_additional_mapping_and_copy() -> None:
    torch.manual_seed(1)
    model = _Holder(EmbeddingBagCollection(_bags()), EmbeddingCollection(_seqs()))
    reference = quantize_inference_model(
        copy.deepcopy(model).seqs, torch.quint4x2, output_dtype=torch.float16
    )
    new = quantize_embeddings(
        model,
        dtype=torch.quint4x2,
        inplace=False,
        additional_qconfig_spec_keys=[EmbeddingCollection],
        additional_mapping={EmbeddingCollection: QuantEmbeddingCollection},
        output_dtype=torch.float16,
    )
    assert isinstance(model.seqs, EmbeddingCollection)  # inplace=False: the original stays
    assert isinstance(new.seqs, QuantEmbeddingCollection)
    assert {t.data_type for t in new.seqs.embedding_configs()} == {DataType.INT4}
    kjt = _kjt(3)
    got, want = new.seqs(kjt), reference(kjt)
    for key in ("f1", "f2"):
        assert got[key].values().dtype == torch.float16
        assert torch.equal(got[key].values(), want[key].values())


def test_quantize_embeddings_bad_dtype() -> None:
    with pytest.raises(ValueError, match=r"torch\.int32"):
        quantize_embeddings(EmbeddingBagCollection(_bags()), dtype=torch.int32, inplace=True)


@pytest.mark.parametrize("dtype", [torch.int8, torch.quint4x2, torch.quint2x4])
@pytest.mark.parametrize("kind", ["bags", "seqs"])
def test_split_scale_bias_state_dict(dtype: torch.dtype, kind: str) -> None:
    torch.manual_seed(2)
    float_module = (
        EmbeddingBagCollection(_bags()) if kind == "bags" else EmbeddingCollection(_seqs())
    )
    plain = quantize_inference_model(copy.deepcopy(float_module), dtype)
    quant_prep_enable_quant_state_dict_split_scale_bias(float_module)
    split = quantize_inference_model(float_module, dtype)
    prefix = "embedding_bags." if kind == "bags" else "embeddings."
    sd, ref = split.state_dict(), plain.state_dict()
    for t in ("t1", "t2"):
        assert f"{prefix}{t}.weight_qscaleshift" not in sd
        assert torch.equal(sd[f"{prefix}{t}.weight"], ref[f"{prefix}{t}.weight"])
        scale, bias = sd[f"{prefix}{t}.weight_qscale"], sd[f"{prefix}{t}.weight_qbias"]
        assert scale.dtype == bias.dtype == torch.float16 and scale.shape == (scale.shape[0], 1)
        pair = ref[f"{prefix}{t}.weight_qscaleshift"].view(torch.float16)
        assert torch.equal(scale, pair[:, :1]) and torch.equal(bias, pair[:, 1:])
    # loads back exactly into a fresh split module, and it looks up the same rows
    configs = split.embedding_bag_configs() if kind == "bags" else split.embedding_configs()
    cls = QuantEmbeddingBagCollection if kind == "bags" else QuantEmbeddingCollection
    fresh = cls(configs, quant_state_dict_split_scale_bias=True)
    fresh.load_state_dict(sd)
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, sd[key]), key
    kjt = _kjt(5)
    a, b = fresh(kjt), plain(kjt)
    if kind == "bags":
        assert torch.equal(a.values(), b.values())
    else:
        assert all(torch.equal(a[k].values(), b[k].values()) for k in ("f1", "f2"))
    del sd[f"{prefix}t2.weight_qbias"]
    with pytest.raises(RuntimeError, match=r"t2\.weight_qbias"):
        fresh.load_state_dict(sd)


@pytest.mark.parametrize("data_type", [DataType.INT8, DataType.INT4, DataType.INT2])
def test_float_tables_with_a_quantized_type_train_in_fp16(data_type: DataType) -> None:
    torch.manual_seed(4)
    declared = EmbeddingBagCollection(_bags(data_type))
    half = EmbeddingBagCollection(_bags(DataType.FP16))
    half.load_state_dict(declared.state_dict())
    for name, p in declared.named_parameters():
        assert p.dtype == torch.float16, name
    kjt = _kjt(6)
    assert torch.equal(declared(kjt).values(), half(kjt).values())
    seqs = EmbeddingCollection(_seqs(data_type))
    assert all(p.dtype == torch.float16 for p in seqs.parameters())
    # quantizing keeps the qconfig's type, whatever the float table declared
    q = quantize_inference_model(declared, torch.quint4x2)
    assert {t.data_type for t in q.embedding_bag_configs()} == {DataType.INT4}


def test_float_tables_refuse_other_integer_types() -> None:
    with pytest.raises(ValueError, match="INT32"):
        EmbeddingCollection(_seqs(DataType.INT32))


def _graph_calls(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]


@pytest.mark.parametrize("dtype", [torch.int8, torch.float16])
def test_traced_bags_script_and_match_eager(dtype: torch.dtype) -> None:
    torch.manual_seed(7)
    q = quantize_inference_model(EmbeddingBagCollection(_bags()), dtype)
    gm = symbolic_trace(q)
    calls = _graph_calls(gm)
    assert calls[0].op == "call_function" and calls[0].name == "_get_kjt_keys"
    assert [n.target for n in calls if n.op == "call_module"] == ["lookup"]
    scripted = torch.jit.script(gm)
    for seed in range(3):
        kjt = _kjt(seed)
        want = q(kjt)
        for got in (gm(kjt), scripted(kjt)):
            assert got.keys() == want.keys()
            assert torch.equal(got.values(), want.values())
    bad = KeyedJaggedTensor.from_lengths_sync(
        ["f1", "f2"], torch.tensor([12, 0]), torch.tensor([1, 1])
    )
    with pytest.raises(IndexError, match="12"):
        gm(bad)


def _hint_input(gm: torch.fx.GraphModule) -> str:
    (hint,) = [n for n in _graph_calls(gm) if n.name == "batching_hinted_output"]
    return str(hint.args[0])


def test_traced_sequences_script_match_eager_and_hint_batching() -> None:
    torch.manual_seed(8)
    q = quantize_inference_model(EmbeddingCollection(_seqs()), torch.quint4x2)
    gm = symbolic_trace(q)
    assert _graph_calls(gm)[0].name == "_get_kjt_keys"
    assert _hint_input(gm) == "lengths"  # the flat lengths by default
    scripted = torch.jit.script(gm)
    kjt = _kjt(9)
    want = q(kjt)
    for got in (gm(kjt), scripted(kjt)):
        assert set(got) == set(want)
        for key in want:
            assert torch.equal(got[key].values(), want[key].values())
            assert torch.equal(got[key].lengths(), want[key].lengths())
    setattr(q, MODULE_ATTR_USE_UNFLATTENED_LENGTHS_FOR_BATCHING, True)
    assert _hint_input(symbolic_trace(q)) == "unflattened_lengths"


def test_split_scale_bias_for_types_marks_only_those_types() -> None:
    model = _Holder(EmbeddingBagCollection(_bags()), EmbeddingCollection(_seqs()))
    quant_prep_enable_quant_state_dict_split_scale_bias_for_types(model, [EmbeddingCollection])
    quantize_inference_model(model, torch.int8)
    keys = set(model.state_dict())
    assert "seqs.embeddings.t1.weight_qscale" in keys
    assert "bags.embedding_bags.t1.weight_qscaleshift" in keys
    assert "bags.embedding_bags.t1.weight_qscale" not in keys
