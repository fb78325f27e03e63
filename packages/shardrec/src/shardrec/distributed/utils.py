"""Distributed helpers (TorchRec path `torchrec.distributed.utils`): `none_throws`, the
fused-params merges (`merge_fused_params`, `add_params_from_parameter_sharding`) and
`get_unsharded_module_names`."""

from shardrec_dmp import get_unsharded_module_names
from shardrec_planner.optional import none_throws
from shardrec_sharding import add_params_from_parameter_sharding, merge_fused_params

__all__ = [
    "add_params_from_parameter_sharding",
    "get_unsharded_module_names",
    "merge_fused_params",
    "none_throws",
]
