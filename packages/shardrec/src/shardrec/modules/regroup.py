"""Regrouping pooled embeddings (TorchRec path `torchrec.modules.regroup`).

The private helpers are re-exported under TorchRec's names for ported code that calls them.
"""

from shardrec_embedding import KTRegroupAsDict, PermuteMultiEmbedding, module_init
from shardrec_embedding.regroup import _split_to_tensor_dict, _to_tensor_dict

__all__ = [
    "KTRegroupAsDict",
    "PermuteMultiEmbedding",
    "_split_to_tensor_dict",
    "_to_tensor_dict",
    "module_init",
]
