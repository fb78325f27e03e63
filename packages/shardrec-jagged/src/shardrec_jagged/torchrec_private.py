"""TorchRec's private helper names that TorchRec users and TorchRec's own tests import from
``torchrec.sparse.jagged_tensor``; each is the shardrec function of the same meaning.

Served at ``shardrec.sparse.jagged_tensor`` only; shardrec's own code uses the public names.
"""

from __future__ import annotations

from shardrec_jagged._torch_kernels import to_host_list
from shardrec_jagged.regroup import regroup_kts

__all__ = ["_fbgemm_permute_pooled_embs", "_regroup_keyed_tensors", "_safe_tolist"]

_safe_tolist = to_host_list  # a tensor's values as a host list (one copy, no device-wide sync)
_regroup_keyed_tensors = regroup_kts  # TorchRec's reference regroup ("legacy")
_fbgemm_permute_pooled_embs = regroup_kts  # TorchRec's fbgemm-backed regroup
