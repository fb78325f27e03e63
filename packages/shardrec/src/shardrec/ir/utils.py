"""Export IR helpers (TorchRec path `torchrec.ir.utils`)."""

from shardrec_embedding.ir.utils import (
    DEFAULT_SERIALIZER_CLS,
    decapsulate_ir_modules,
    encapsulate_ir_modules,
    mark_dynamic_kjt,
    move_to_copy_nodes_to_device,
    prune_pytree_flatten_unflatten,
    qualname,
)

__all__ = [
    "DEFAULT_SERIALIZER_CLS",
    "decapsulate_ir_modules",
    "encapsulate_ir_modules",
    "mark_dynamic_kjt",
    "move_to_copy_nodes_to_device",
    "prune_pytree_flatten_unflatten",
    "qualname",
]
