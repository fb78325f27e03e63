"""JSON serialization of collections inside an exported program (TorchRec's
`torchrec.ir.serializer`).

`JsonSerializer.module_to_serializer_cls` maps a class's `qualname` to its serializer; one
serializer per supported class: EmbeddingBagCollection, EmbeddingCollection, the quantized
EmbeddingBagCollection / EmbeddingCollection, FeatureProcessedEmbeddingBagCollection,
PositionWeightedModule(Collection), KTRegroupAsDict. Register your own module the same way
(subclass `JsonSerializer`, set `_module_cls`, `serialize_to_dict`, `deserialize_from_dict`,
optionally `_children` / `children` and `swap_meta_forward`).
"""

from __future__ import annotations

from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_embedding.feature_processors import (
    FeatureProcessedEmbeddingBagCollection,
    PositionWeightedModule,
    PositionWeightedModuleCollection,
)
from shardrec_embedding.ir._collection_serializers import (
    EBCJsonSerializer,
    ECJsonSerializer,
    QuantEBCJsonSerializer,
    QuantECJsonSerializer,
)
from shardrec_embedding.ir._json import JsonSerializer, _register
from shardrec_embedding.ir._meta_forward import (
    ebc_meta_forward,
    ec_meta_forward,
    kt_regroup_meta_forward,
    qebc_meta_forward,
    qec_meta_forward,
)
from shardrec_embedding.ir._metadata import (
    embedding_bag_config_to_metadata,
    embedding_metadata_to_config,
    get_deserialized_device,
)
from shardrec_embedding.ir._module_serializers import (
    FPEBCJsonSerializer,
    KTRegroupAsDictJsonSerializer,
    PWMCJsonSerializer,
    PWMJsonSerializer,
)
from shardrec_embedding.quant import QuantEmbeddingBagCollection, QuantEmbeddingCollection
from shardrec_embedding.regroup import KTRegroupAsDict

__all__ = [
    "EBCJsonSerializer",
    "ECJsonSerializer",
    "FPEBCJsonSerializer",
    "JsonSerializer",
    "KTRegroupAsDictJsonSerializer",
    "PWMCJsonSerializer",
    "PWMJsonSerializer",
    "QuantEBCJsonSerializer",
    "QuantECJsonSerializer",
    "ebc_meta_forward",
    "ec_meta_forward",
    "embedding_bag_config_to_metadata",
    "embedding_metadata_to_config",
    "get_deserialized_device",
    "kt_regroup_meta_forward",
    "qebc_meta_forward",
    "qec_meta_forward",
]


for _cls, _serializer in (
    (EmbeddingBagCollection, EBCJsonSerializer),
    (EmbeddingCollection, ECJsonSerializer),
    (QuantEmbeddingBagCollection, QuantEBCJsonSerializer),
    (QuantEmbeddingCollection, QuantECJsonSerializer),
    (PositionWeightedModule, PWMJsonSerializer),
    (PositionWeightedModuleCollection, PWMCJsonSerializer),
    (FeatureProcessedEmbeddingBagCollection, FPEBCJsonSerializer),
    (KTRegroupAsDict, KTRegroupAsDictJsonSerializer),
):
    _register(_cls, _serializer)
