"""Export IR (TorchRec path `torchrec.ir`)."""

from shardrec_embedding.ir import (
    JsonSerializer,
    SerializerInterface,
    decapsulate_ir_modules,
    encapsulate_ir_modules,
    mark_dynamic_kjt,
    qualname,
)

__all__ = [
    "JsonSerializer",
    "SerializerInterface",
    "decapsulate_ir_modules",
    "encapsulate_ir_modules",
    "mark_dynamic_kjt",
    "qualname",
]
