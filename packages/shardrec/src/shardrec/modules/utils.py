"""Module helpers (TorchRec path `torchrec.modules.utils`)."""

from shardrec_embedding.module_utils import (
    check_module_output_dimension,
    construct_jagged_tensors,
    construct_modulelist_from_single_module,
    convert_list_of_modules_to_modulelist,
    deterministic_dedup,
    extract_module_or_tensor_callable,
    get_module_output_dimension,
    init_mlp_weights_xavier_uniform,
)

__all__ = [
    "check_module_output_dimension",
    "construct_jagged_tensors",
    "construct_modulelist_from_single_module",
    "convert_list_of_modules_to_modulelist",
    "deterministic_dedup",
    "extract_module_or_tensor_callable",
    "get_module_output_dimension",
    "init_mlp_weights_xavier_uniform",
]
