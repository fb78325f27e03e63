"""The jagged value types (TorchRec path `torchrec.sparse.jagged_tensor`).

The private names are TorchRec's helpers that its users and tests import; each is the public
function of the same meaning (docs/porting.md, "torchrec.sparse").
"""

from shardrec_jagged import (
    ComputeJTDictToKJT,
    ComputeKJTToJTDict,
    JaggedTensor,
    KeyedJaggedTensor,
    KeyedTensor,
    jt_is_equal,
    kjt_is_equal,
    permute_multi_embedding,
    regroup_kts,
)
from shardrec_jagged._torch_kernels import to_host_list as _safe_tolist
from shardrec_jagged.regroup import regroup_kts as _fbgemm_permute_pooled_embs
from shardrec_jagged.regroup import regroup_kts as _regroup_keyed_tensors

__all__ = [
    "ComputeJTDictToKJT",
    "ComputeKJTToJTDict",
    "JaggedTensor",
    "KeyedJaggedTensor",
    "KeyedTensor",
    "_fbgemm_permute_pooled_embs",
    "_regroup_keyed_tensors",
    "_safe_tolist",
    "jt_is_equal",
    "kjt_is_equal",
    "permute_multi_embedding",
    "regroup_kts",
]
