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
from shardrec_jagged.torchrec_private import (
    _all_keys_used_once,
    _fbgemm_permute_pooled_embs,
    _regroup_keyed_tensors,
    _safe_tolist,
)

__all__ = [
    "ComputeJTDictToKJT",
    "ComputeKJTToJTDict",
    "JaggedTensor",
    "KeyedJaggedTensor",
    "KeyedTensor",
    "_all_keys_used_once",
    "_fbgemm_permute_pooled_embs",
    "_regroup_keyed_tensors",
    "_safe_tolist",
    "jt_is_equal",
    "kjt_is_equal",
    "permute_multi_embedding",
    "regroup_kts",
]
