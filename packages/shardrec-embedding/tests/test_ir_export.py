"""The export IR (`shardrec_embedding.ir`): encapsulate -> torch.export -> save/load ->
unflatten -> decapsulate gives a model whose outputs equal the eager model's."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import pytest
import torch
from torch import nn

from shardrec_embedding import (
    DataType,
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
    FeatureProcessedEmbeddingBagCollection,
    KTRegroupAsDict,
    PoolingType,
    PositionWeightedModule,
    PositionWeightedModuleCollection,
    QuantEmbeddingBagCollection,
    QuantEmbeddingCollection,
)
from shardrec_embedding.ir import (
    JsonSerializer,
    decapsulate_ir_modules,
    encapsulate_ir_modules,
    mark_dynamic_kjt,
    qualname,
)
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor

KEYS = ["f1", "f2", "f3"]


def _bag_tables(
    data_type: DataType = DataType.FP32, pooling: PoolingType = PoolingType.MEAN
) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name="t1", embedding_dim=4, num_embeddings=20, feature_names=["f1", "f2"],
            data_type=data_type,
        ),
        EmbeddingBagConfig(
            name="t2", embedding_dim=8, num_embeddings=30, feature_names=["f3"],
            pooling=pooling, data_type=data_type,
        ),
    ]  # fmt: skip


def _tables(data_type: DataType = DataType.FP32) -> list[EmbeddingConfig]:
    return [
        EmbeddingConfig(
            name="t1", embedding_dim=4, num_embeddings=20, feature_names=["f1", "f2"],
            data_type=data_type,
        ),
        EmbeddingConfig(
            name="t2", embedding_dim=4, num_embeddings=30, feature_names=["f3"],
            data_type=data_type,
        ),
    ]  # fmt: skip


def _mixed_bag_tables() -> list[EmbeddingBagConfig]:
    int8, fp16 = _bag_tables(DataType.INT8), _bag_tables(DataType.FP16)
    return [int8[0], fp16[1]]


def _random_kjt(gen: torch.Generator, batch: int, weighted: bool) -> KeyedJaggedTensor:
    """Bags of 0..3 ids (some empty), ids valid for every table (< 20)."""
    lengths = torch.randint(0, 4, (len(KEYS) * batch,), generator=gen)
    lengths[0] = 0  # always one empty bag
    n = int(lengths.sum())
    return KeyedJaggedTensor.from_lengths_sync(
        keys=KEYS,
        values=torch.randint(0, 20, (n,), generator=gen),
        lengths=lengths,
        weights=torch.rand(n, generator=gen) if weighted else None,
    )


class Pooled(nn.Module):
    def __init__(self, sparse: nn.Module) -> None:
        super().__init__()
        self.sparse = sparse
        self.over = nn.Linear(4 * 2 + 8, 1)

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        return self.over(self.sparse(kjt).values().float())


class Sequence(nn.Module):
    def __init__(self, sparse: nn.Module) -> None:
        super().__init__()
        self.sparse = sparse

    def forward(self, kjt: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
        out: dict[str, JaggedTensor] = self.sparse(kjt)
        return {k: jt.values().float().sum(1) for k, jt in out.items()}


def _roundtrip(
    model: nn.Module, kjt: KeyedJaggedTensor, dynamic: bool = True
) -> tuple[nn.Module, torch.export.ExportedProgram]:
    """Encapsulate, export (id count dynamic), save to bytes, load, unflatten, decapsulate."""
    model, fqns = encapsulate_ir_modules(model, JsonSerializer)
    shapes = None
    if dynamic:
        shapes = mark_dynamic_kjt(kjt).dynamic_shapes(model, (kjt,))
    ep = torch.export.export(
        model, (kjt,), strict=False, dynamic_shapes=shapes,
        preserve_module_call_signature=tuple(fqns),
    )  # fmt: skip
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    buffer.seek(0)
    loaded = torch.export.load(buffer)
    return decapsulate_ir_modules(torch.export.unflatten(loaded), JsonSerializer), ep


def _assert_same(got: object, expected: object) -> None:
    if isinstance(expected, dict):
        assert isinstance(got, dict) and got.keys() == expected.keys()
        for k in expected:
            torch.testing.assert_close(got[k], expected[k])
    else:
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("weighted", [False, True])
def test_ebc_roundtrip_equals_eager_without_loading_a_state_dict(weighted: bool) -> None:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    pooling = PoolingType.SUM if weighted else PoolingType.MEAN  # MEAN refuses weights
    model = Pooled(EmbeddingBagCollection(_bag_tables(pooling=pooling), is_weighted=weighted))
    model.eval()
    example = _random_kjt(gen, 4, weighted)
    inputs = [example] + [_random_kjt(gen, 4, weighted) for _ in range(3)]
    expected = [model(k) for k in inputs]
    restored, _ = _roundtrip(model, example)
    assert isinstance(restored.sparse, EmbeddingBagCollection)
    for kjt, want in zip(inputs, expected, strict=True):
        _assert_same(restored(kjt), want)


def test_ebc_dynamic_id_count_and_empty_batch_input() -> None:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(2)
    model = Pooled(EmbeddingBagCollection(_bag_tables())).eval()
    example = _random_kjt(gen, 3, False)
    others = [_random_kjt(gen, 3, False) for _ in range(3)]
    all_empty = KeyedJaggedTensor.from_lengths_sync(
        keys=KEYS, values=torch.tensor([], dtype=torch.int64),
        lengths=torch.zeros(9, dtype=torch.int64),
    )  # fmt: skip
    expected = [model(k) for k in [*others, all_empty]]
    restored, ep = _roundtrip(model, example, dynamic=True)
    for kjt, want in zip([*others, all_empty], expected, strict=True):
        _assert_same(restored(kjt), want)
    # the program itself accepts other id counts (its lookups are shape-only stand-ins)
    assert ep.module()(others[0]).shape == expected[0].shape


def test_variable_batch_serves_other_batch_sizes() -> None:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(7)
    model = Pooled(EmbeddingBagCollection(_bag_tables())).eval()
    example = _random_kjt(gen, 4, False)
    inputs = [_random_kjt(gen, b, False) for b in (2, 4, 7)]  # batch 1: see docs/inference.md
    expected = [model(k) for k in inputs]
    model, fqns = encapsulate_ir_modules(model, JsonSerializer)
    shapes = mark_dynamic_kjt(example, variable_batch=True).dynamic_shapes(model, (example,))
    ep = torch.export.export(
        model, (example,), strict=False, dynamic_shapes=shapes,
        preserve_module_call_signature=tuple(fqns),
    )  # fmt: skip
    restored = decapsulate_ir_modules(torch.export.unflatten(ep), JsonSerializer)
    for kjt, want in zip(inputs, expected, strict=True):
        assert ep.module()(kjt).shape == want.shape
        _assert_same(restored(kjt), want)


def test_ec_roundtrip_equals_eager_with_indices() -> None:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(3)
    model = Sequence(EmbeddingCollection(_tables(), need_indices=True)).eval()
    example = _random_kjt(gen, 4, False)
    inputs = [example, _random_kjt(gen, 4, False)]
    expected = [model(k) for k in inputs]
    restored, _ = _roundtrip(model, example)
    assert isinstance(restored.sparse, EmbeddingCollection)
    for kjt, want in zip(inputs, expected, strict=True):
        _assert_same(restored(kjt), want)
    jts = restored.sparse(inputs[1])
    torch.testing.assert_close(jts["f1"].weights(), inputs[1]["f1"].values())


@pytest.mark.parametrize(
    ("build", "wrap"),
    [
        (lambda: QuantEmbeddingBagCollection(_bag_tables(DataType.INT8)), Pooled),
        (
            lambda: QuantEmbeddingBagCollection(
                _bag_tables(DataType.INT4), output_dtype=torch.float16
            ),
            Pooled,
        ),
        (lambda: QuantEmbeddingBagCollection(_mixed_bag_tables()), Pooled),
        (lambda: QuantEmbeddingCollection(_tables(DataType.INT8)), Sequence),
    ],
    ids=["qebc-int8", "qebc-int4-fp16-out", "qebc-int8-and-fp16-tables", "qec-int8"],
)
def test_quantized_roundtrip_equals_eager(
    build: Callable[[], nn.Module], wrap: Callable[[nn.Module], nn.Module]
) -> None:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(4)
    sparse = build()
    model = wrap(sparse).eval()
    example = _random_kjt(gen, 4, False)
    inputs = [example, _random_kjt(gen, 4, False)]
    expected = [model(k) for k in inputs]
    restored, _ = _roundtrip(model, example)
    assert type(restored.sparse) is type(sparse)
    assert restored.sparse.output_dtype() == sparse.output_dtype()
    for kjt, want in zip(inputs, expected, strict=True):
        _assert_same(restored(kjt), want)


class Processed(nn.Module):
    """A plain and a position-weighted collection, regrouped into two outputs."""

    def __init__(self, processors: str) -> None:
        super().__init__()
        self.ebc = EmbeddingBagCollection(_bag_tables()[:1])  # f1, f2
        fp = (
            PositionWeightedModuleCollection({"f3": 5})
            if processors == "collection"
            else {"f3": PositionWeightedModule(5)}
        )
        self.fpebc = FeatureProcessedEmbeddingBagCollection(
            EmbeddingBagCollection(_bag_tables(pooling=PoolingType.SUM)[1:], is_weighted=True),
            fp,
        )
        self.regroup = KTRegroupAsDict([["f1", "f3"], ["f2"]], ["a", "b"])

    def forward(self, kjt: KeyedJaggedTensor) -> dict[str, torch.Tensor]:
        return self.regroup([self.ebc(kjt), self.fpebc(kjt)])


@pytest.mark.parametrize("processors", ["collection", "dict"])
@pytest.mark.parametrize("short_circuit", [False, True])
def test_feature_processed_and_regroup_roundtrip(processors: str, short_circuit: bool) -> None:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(8)
    model = Processed(processors).eval()
    with torch.no_grad():  # position weights away from their all-ones init
        for p in model.fpebc.parameters():
            p.uniform_(0.5, 1.5)
    example = _random_kjt(gen, 4, False)
    inputs = [example, _random_kjt(gen, 4, False)]
    expected = [model(k) for k in inputs]
    model.regroup.clear_cache()
    model, fqns = encapsulate_ir_modules(model, JsonSerializer)
    assert set(fqns) >= {"ebc", "fpebc", "fpebc._embedding_bag_collection", "regroup"}
    shapes = mark_dynamic_kjt(example).dynamic_shapes(model, (example,))
    ep = torch.export.export(
        model, (example,), strict=False, dynamic_shapes=shapes,
        preserve_module_call_signature=tuple(fqns),
    )  # fmt: skip
    restored = decapsulate_ir_modules(
        torch.export.unflatten(ep),
        JsonSerializer,
        short_circuit_pytree_ebc_regroup=short_circuit,
        finalize_interpreter_modules=short_circuit,
    )
    assert isinstance(restored.fpebc, FeatureProcessedEmbeddingBagCollection)
    assert isinstance(restored.regroup, KTRegroupAsDict)
    for kjt, want in zip(inputs, expected, strict=True):
        _assert_same(restored(kjt), want)


def test_metadata_is_json_with_public_type_names() -> None:
    ebc = EmbeddingBagCollection(_bag_tables())
    encapsulate_ir_modules(ebc, JsonSerializer)
    raw = json.loads(ebc.get_buffer("ir_metadata").numpy().tobytes().decode())
    assert raw["typename"] == "shardrec.modules.embedding_modules.EmbeddingBagCollection"
    assert [t["name"] for t in raw["metadata_dict"]["tables"]] == ["t1", "t2"]
    assert raw["metadata_dict"]["tables"][1]["pooling"] == "MEAN"
    assert (
        qualname(QuantEmbeddingCollection) == "shardrec.quant.embedding_modules.EmbeddingCollection"
    )
    assert qualname(nn.Linear(1, 1)) == "torch.nn.modules.linear.Linear"


def test_refusals_name_the_problem() -> None:
    class Unknown(nn.Module):
        pass

    with pytest.raises(ValueError, match=r"Expected typename to be one of .*Unknown"):
        JsonSerializer.encapsulate_module(Unknown())
    bad = nn.Module()
    data = bytearray(json.dumps({"typename": "x.Nope", "metadata_dict": {}}).encode())
    bad.register_buffer("ir_metadata", torch.frombuffer(data, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"got x\.Nope"):
        JsonSerializer.decapsulate_module(bad)
    with pytest.raises(ValueError, match="needs finalize_interpreter_modules=True"):
        decapsulate_ir_modules(nn.Module(), JsonSerializer, short_circuit_pytree_ebc_regroup=True)


def test_a_program_whose_weights_do_not_match_its_description_is_refused() -> None:
    gen = torch.Generator().manual_seed(9)
    model = Pooled(EmbeddingBagCollection(_bag_tables())).eval()
    model, fqns = encapsulate_ir_modules(model, JsonSerializer)
    kjt = _random_kjt(gen, 2, False)
    ep = torch.export.export(
        model, (kjt,), strict=False, preserve_module_call_signature=tuple(fqns)
    )
    unflat = torch.export.unflatten(ep)
    unflat.sparse.embedding_bags.t2.weight = nn.Parameter(torch.zeros(3, 8))
    with pytest.raises(ValueError, match=r"no tensor 'embedding_bags\.t2\.weight' of shape"):
        decapsulate_ir_modules(unflat, JsonSerializer)


def test_deserialize_on_meta_builds_an_empty_module() -> None:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(5)
    model = Pooled(EmbeddingBagCollection(_bag_tables())).eval()
    model, fqns = encapsulate_ir_modules(model, JsonSerializer)
    kjt = _random_kjt(gen, 2, False)
    ep = torch.export.export(
        model, (kjt,), strict=False, preserve_module_call_signature=tuple(fqns)
    )
    restored = decapsulate_ir_modules(
        torch.export.unflatten(ep), JsonSerializer, torch.device("meta")
    )
    assert all(p.device.type == "meta" for p in restored.sparse.parameters())


def test_direct_export_of_ebc_without_ir_equals_eager() -> None:
    # No encapsulation: the lookup itself is in the graph; the program alone serves.
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(6)
    model = Pooled(EmbeddingBagCollection(_bag_tables())).eval()
    example = _random_kjt(gen, 3, False)
    other = _random_kjt(gen, 3, False)
    shapes = mark_dynamic_kjt(example).dynamic_shapes(model, (example,))
    ep = torch.export.export(model, (example,), strict=False, dynamic_shapes=shapes)
    for kjt in (example, other):
        torch.testing.assert_close(ep.module()(kjt), model(kjt))


def test_collection_without_tables_round_trips() -> None:
    class Empty(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ebc = EmbeddingBagCollection([])

        def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
            return self.ebc(kjt).values()

    kjt = KeyedJaggedTensor.from_lengths_sync(
        keys=["a"], values=torch.tensor([1]), lengths=torch.tensor([1, 0])
    )
    restored, ep = _roundtrip(Empty(), kjt, dynamic=False)
    assert restored(kjt).shape == ep.module()(kjt).shape == (2, 0)
