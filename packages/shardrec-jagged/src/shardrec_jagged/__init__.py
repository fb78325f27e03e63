"""The value types every shardrec package speaks: JaggedTensor, KeyedJaggedTensor, KeyedTensor."""

from shardrec_jagged._backend import FbgemmUnavailableWarning, fbgemm_available
from shardrec_jagged._equality import jt_is_equal, kjt_is_equal
from shardrec_jagged._validation import JaggedDtypeError, UnknownKeyError
from shardrec_jagged.fx import Tracer, is_fx_tracing, symbolic_trace
from shardrec_jagged.jagged_tensor import JaggedTensor
from shardrec_jagged.keyed_jagged_tensor import KeyedJaggedTensor
from shardrec_jagged.keyed_tensor import KeyedTensor
from shardrec_jagged.modules import ComputeJTDictToKJT, ComputeKJTToJTDict
from shardrec_jagged.regroup import permute_multi_embedding, regroup_kts
from shardrec_jagged.torchscript import (
    TorchScriptable,
    register_torchscript_types,
    script_fields,
)
from shardrec_jagged.validator import validate_keyed_jagged_tensor

__all__ = [
    "ComputeJTDictToKJT",
    "ComputeKJTToJTDict",
    "FbgemmUnavailableWarning",
    "JaggedDtypeError",
    "JaggedTensor",
    "KeyedJaggedTensor",
    "KeyedTensor",
    "TorchScriptable",
    "Tracer",
    "UnknownKeyError",
    "fbgemm_available",
    "is_fx_tracing",
    "jt_is_equal",
    "kjt_is_equal",
    "permute_multi_embedding",
    "register_torchscript_types",
    "regroup_kts",
    "script_fields",
    "symbolic_trace",
    "validate_keyed_jagged_tensor",
]
