"""The jagged value types (TorchRec path `torchrec.sparse.jagged_tensor`).

The private names are TorchRec's helpers that its users and tests import; each is the public
function of the same meaning (docs/porting.md, "torchrec.sparse").

Importing this module loads fbgemm_gpu when it is installed, as importing TorchRec's does, so
ported code that calls `torch.ops.fbgemm.*` directly finds the operators (about 0.5 s, once;
`import shardrec` alone does not load it: the components load it on the first kernel).
"""

from shardrec_jagged import (
    ComputeJTDictToKJT,
    ComputeKJTToJTDict,
    JaggedTensor,
    KeyedJaggedTensor,
    KeyedTensor,
    fbgemm_available,
    jt_is_equal,
    kjt_is_equal,
    permute_multi_embedding,
    regroup_kts,
)
from shardrec_jagged.torchrec_private import (
    _all_keys_used_once,
    _fbgemm_permute_pooled_embs,
    _kt_regroup_arguments,
    _regroup_keyed_tensors,
    _safe_tolist,
)

fbgemm_available()  # registers torch.ops.fbgemm when fbgemm_gpu is installed; no-op otherwise

__all__ = [
    "ComputeJTDictToKJT",
    "ComputeKJTToJTDict",
    "JaggedTensor",
    "KeyedJaggedTensor",
    "KeyedTensor",
    "_all_keys_used_once",
    "_fbgemm_permute_pooled_embs",
    "_kt_regroup_arguments",
    "_regroup_keyed_tensors",
    "_safe_tolist",
    "jt_is_equal",
    "kjt_is_equal",
    "permute_multi_embedding",
    "regroup_kts",
]
