"""Export IR: `torch.export` of models holding shardrec collections, and back
(TorchRec's `torchrec.ir`; docs/inference.md, docs/design/export-ir.md)."""

from shardrec_embedding.ir.serializer import JsonSerializer
from shardrec_embedding.ir.types import SerializerInterface
from shardrec_embedding.ir.utils import (
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
