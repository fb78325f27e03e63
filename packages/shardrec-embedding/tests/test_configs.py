from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import shardrec_embedding.configs as cfg


def test_torchrec_defaults() -> None:
    c = cfg.EmbeddingBagConfig(num_embeddings=400, embedding_dim=8, name="t")
    assert c.feature_names == ["t"]
    assert c.pooling is cfg.PoolingType.SUM
    assert c.data_type is cfg.DataType.FP32
    assert c.get_weight_init_max() == pytest.approx(math.sqrt(1 / 400))
    assert c.get_weight_init_min() == pytest.approx(-math.sqrt(1 / 400))
    assert c.num_features() == 1
    assert c.init_fn is None and c.need_pos is False


def test_string_enums_round_trip() -> None:
    assert cfg.PoolingType("MEAN") is cfg.PoolingType.MEAN
    assert cfg.DataType("BF16") is cfg.DataType.BF16
    c = cfg.EmbeddingBagConfig(
        num_embeddings=4, embedding_dim=2, name="t", pooling="MEAN", data_type="FP16"
    )  # type: ignore[arg-type]  # plain strings are accepted at runtime, like plans in JSON
    assert c.pooling is cfg.PoolingType.MEAN and c.data_type is cfg.DataType.FP16
    assert str(cfg.PoolingType.SUM) == "SUM"


def test_frozen_and_keyword_only() -> None:
    c = cfg.EmbeddingConfig(num_embeddings=4, embedding_dim=2, name="t")
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.name = "u"  # type: ignore[misc]  # the point of the test
    with pytest.raises(TypeError):
        cfg.EmbeddingConfig(4, 2, "t")  # type: ignore[misc]  # positional arguments are refused


def test_init_fn_and_uniform_bounds() -> None:
    c = cfg.EmbeddingBagConfig(
        num_embeddings=50, embedding_dim=3, name="t", weight_init_min=0.5, weight_init_max=0.6
    )
    w = torch.zeros(50, 3)
    c.init_weight_(w)
    assert bool(((w >= 0.5) & (w <= 0.6)).all())
    custom = cfg.EmbeddingBagConfig(
        num_embeddings=5, embedding_dim=3, name="t", init_fn=lambda t: torch.nn.init.constant_(t, 7)
    )
    custom.init_weight_(w)
    assert bool((w == 7).all())


def test_dtype_mapping() -> None:
    assert cfg.data_type_to_dtype(cfg.DataType.FP16) is torch.float16
    assert cfg.data_type_to_dtype("BF16") is torch.bfloat16
    assert cfg.dtype_to_data_type(torch.float32) is cfg.DataType.FP32
    with pytest.raises(ValueError, match="complex64"):
        cfg.dtype_to_data_type(torch.complex64)


@pytest.mark.parametrize("dim", [0, -3])
def test_embedding_dim_must_be_positive(dim: int) -> None:
    with pytest.raises(ValueError, match=rf"embedding_dim must be >= 1, got {dim}"):
        cfg.EmbeddingBagConfig(num_embeddings=4, embedding_dim=dim, name="t")


def test_num_embeddings_must_be_positive() -> None:
    with pytest.raises(ValueError, match="num_embeddings must be >= 1, got 0"):
        cfg.EmbeddingConfig(num_embeddings=0, embedding_dim=4, name="t")


@pytest.mark.parametrize("dim", [4.0, True, "4"])
def test_embedding_dim_must_be_int(dim: object) -> None:
    with pytest.raises(TypeError, match="embedding_dim must be an int"):
        cfg.EmbeddingBagConfig(num_embeddings=4, embedding_dim=dim, name="t")  # type: ignore[arg-type]


def test_bad_enum_values_are_named() -> None:
    with pytest.raises(ValueError, match="'FP8'"):
        cfg.EmbeddingBagConfig(num_embeddings=4, embedding_dim=2, name="t", data_type="FP8")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'MAX'"):
        cfg.EmbeddingBagConfig(num_embeddings=4, embedding_dim=2, name="t", pooling="MAX")  # type: ignore[arg-type]


def test_bad_feature_names() -> None:
    with pytest.raises(TypeError, match="feature_names must be a list"):
        cfg.EmbeddingBagConfig(num_embeddings=4, embedding_dim=2, name="t", feature_names="f")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"repeat a feature"):
        cfg.EmbeddingBagConfig(
            num_embeddings=4, embedding_dim=2, name="t", feature_names=["f", "f"]
        )
    with pytest.raises(ValueError, match="feature name ''"):
        cfg.EmbeddingBagConfig(num_embeddings=4, embedding_dim=2, name="t", feature_names=[""])


def test_init_bounds_ordered() -> None:
    with pytest.raises(ValueError, match=r"weight_init_min 1\.0 must not exceed .* 0\.5"):
        cfg.EmbeddingBagConfig(
            num_embeddings=4, embedding_dim=2, name="t", weight_init_min=1.0, weight_init_max=0.5
        )


@pytest.mark.parametrize(
    ("field", "bound", "error", "match"),
    [
        # torch's uniform_ failed on these at module construction ("to is out of bounds")
        ("weight_init_max", math.inf, ValueError, r"weight_init_max must be finite, got inf"),
        ("weight_init_min", -math.inf, ValueError, r"weight_init_min must be finite, got -inf"),
        ("weight_init_max", math.nan, ValueError, r"weight_init_max must be finite, got nan"),
        ("weight_init_max", "0.1", TypeError, r"weight_init_max must be a number, got '0.1'"),
    ],
)
def test_init_bounds_finite_numbers(
    field: str, bound: object, error: type[Exception], match: str
) -> None:
    kwargs: dict[str, object] = {field: bound}
    with pytest.raises(error, match=match):
        cfg.EmbeddingBagConfig(num_embeddings=4, embedding_dim=2, name="t", **kwargs)  # type: ignore[arg-type]  # the bad input under test


def test_virtual_table_fields_are_carried_and_checked() -> None:
    c = cfg.EmbeddingBagConfig(
        num_embeddings=120, embedding_dim=2, name="t", total_num_buckets=12, use_virtual_table=True
    )
    assert (c.total_num_buckets, c.use_virtual_table) == (12, True)
    plain = cfg.EmbeddingConfig(num_embeddings=4, embedding_dim=2, name="u")
    assert (plain.total_num_buckets, plain.use_virtual_table) == (None, False)
    with pytest.raises(
        ValueError, match=r"num_embeddings 100 is not a multiple of total_num_buckets 7"
    ):
        cfg.EmbeddingBagConfig(num_embeddings=100, embedding_dim=2, name="t", total_num_buckets=7)
    with pytest.raises(ValueError, match=r"total_num_buckets must be >= 1, got 0"):
        cfg.EmbeddingBagConfig(num_embeddings=100, embedding_dim=2, name="t", total_num_buckets=0)
    with pytest.raises(TypeError, match="total_num_buckets must be an int"):
        cfg.EmbeddingBagConfig(num_embeddings=100, embedding_dim=2, name="t", total_num_buckets=2.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="use_virtual_table must be a bool"):
        cfg.EmbeddingBagConfig(num_embeddings=4, embedding_dim=2, name="t", use_virtual_table=1)  # type: ignore[arg-type]
