"""TorchRec's quantization paths re-export shardrec's objects (the same objects)."""

from __future__ import annotations

import shardrec.inference.modules
import shardrec.modules.embedding_configs
import shardrec.quant.embedding_modules
import shardrec_embedding
import shardrec_sharding


def test_quant_paths_are_the_component_objects() -> None:
    qmod = shardrec.quant.embedding_modules
    assert qmod.EmbeddingBagCollection is shardrec_embedding.QuantEmbeddingBagCollection
    assert qmod.EmbeddingCollection is shardrec_embedding.QuantEmbeddingCollection
    assert shardrec.modules.embedding_configs.QuantConfig is shardrec_embedding.QuantConfig
    assert (
        shardrec.inference.modules.quantize_inference_model
        is shardrec_embedding.quantize_inference_model
    )
    assert shardrec.inference.modules.shard_quant_model is shardrec_sharding.shard_quant_model


def test_tutorial_imports_resolve() -> None:
    import shardrec as torchrec
    from shardrec.modules.embedding_configs import QuantConfig
    from shardrec.quant.embedding_modules import (
        EmbeddingBagCollection as QuantEmbeddingBagCollection,
    )

    assert QuantEmbeddingBagCollection.from_float is not None
    assert QuantConfig._fields == ("activation", "weight", "per_table_weight_dtype")
    assert torchrec.EmbeddingBagCollection is shardrec_embedding.EmbeddingBagCollection
