"""Quantized-communication configs and codecs (TorchRec path
`torchrec.distributed.fbgemm_qcomm_codec`); plain-torch codecs, no fbgemm-gpu needed."""

from shardrec_collectives.qcomm import (
    CommType,
    QCommsConfig,
    QuantizationContext,
    QuantizedCommCodec,
    get_qcomm_codecs,
    get_qcomm_codecs_registry,
)

__all__ = [
    "CommType",
    "QCommsConfig",
    "QuantizationContext",
    "QuantizedCommCodec",
    "get_qcomm_codecs",
    "get_qcomm_codecs_registry",
]
