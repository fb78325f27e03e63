"""Table configs (TorchRec path `torchrec.modules.embedding_configs`)."""

from shardrec_embedding import QuantConfig
from shardrec_embedding import configs as _source
from shardrec_embedding.configs import *  # noqa: F403

# TorchRec's names only: `module_dtype` is shardrec's own helper (shardrec_embedding.configs).
__all__ = [*(n for n in _source.__all__ if n != "module_dtype"), "QuantConfig"]
