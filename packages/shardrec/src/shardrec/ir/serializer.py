"""Export IR serializers (TorchRec path `torchrec.ir.serializer`)."""

from shardrec_embedding.ir.serializer import (
    EBCJsonSerializer,
    ECJsonSerializer,
    FPEBCJsonSerializer,
    JsonSerializer,
    KTRegroupAsDictJsonSerializer,
    PWMCJsonSerializer,
    PWMJsonSerializer,
    QuantEBCJsonSerializer,
    QuantECJsonSerializer,
    ebc_meta_forward,
    embedding_bag_config_to_metadata,
    embedding_metadata_to_config,
    get_deserialized_device,
    kt_regroup_meta_forward,
)

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
    "embedding_bag_config_to_metadata",
    "embedding_metadata_to_config",
    "get_deserialized_device",
    "kt_regroup_meta_forward",
]
