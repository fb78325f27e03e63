"""shardrec's sharders answer TorchRec's isinstance checks on the sharder base classes."""

from __future__ import annotations

from shardrec_planner.sharder_data import (
    BaseEmbeddingSharder,
    BaseQuantEmbeddingSharder,
    StorageUsageType,
    build_sharder_data,
)
from shardrec_sharding import (
    EmbeddingBagCollectionSharder,
    EmbeddingCollectionSharder,
    QuantEmbeddingBagCollectionSharder,
    QuantEmbeddingCollectionSharder,
)


def test_float_and_quant_sharders_are_their_torchrec_kinds() -> None:
    for float_sharder in (EmbeddingBagCollectionSharder(), EmbeddingCollectionSharder()):
        assert isinstance(float_sharder, BaseEmbeddingSharder)
        assert not isinstance(float_sharder, BaseQuantEmbeddingSharder)
        assert build_sharder_data(float_sharder).storage_usage_type is StorageUsageType.BASE
    for quant in (QuantEmbeddingBagCollectionSharder(), QuantEmbeddingCollectionSharder()):
        assert isinstance(quant, BaseQuantEmbeddingSharder)
        assert build_sharder_data(quant).storage_usage_type is StorageUsageType.BASE_QUANT
    fused = {"optimizer": "sgd", "learning_rate": 0.5}
    data = build_sharder_data(EmbeddingBagCollectionSharder(fused_params=fused))
    assert data.fused_params == fused
