"""Table configs (TorchRec path `torchrec.modules.embedding_configs`)."""

from shardrec_embedding import QuantConfig
from shardrec_embedding import configs as _source
from shardrec_embedding.configs import *  # noqa: F403

__all__ = [*_source.__all__, "QuantConfig"]
