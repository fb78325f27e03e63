"""Lazy modules (TorchRec path `torchrec.modules.lazy_extension`)."""

from shardrec_models import LazyModuleExtensionMixin, lazy_apply

__all__ = ["LazyModuleExtensionMixin", "lazy_apply"]
