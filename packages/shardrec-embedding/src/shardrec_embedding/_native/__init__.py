"""Native CPU kernels (plain C + OpenMP, built on first use, loaded with ctypes)."""

from shardrec_embedding._native.loader import ENV_VAR, NativeUnavailableWarning, native_library
from shardrec_embedding._native.ops import (
    MAX_DIM,
    native_applies,
    native_available,
    native_pooled_into,
    native_pooled_lookup,
    native_scatter,
)
from shardrec_embedding._native.updates import (
    MAX_IDS,
    AdagradWorkspace,
    GradientPiece,
    Presorted,
    native_adagrad,
    native_presorted_update,
    native_rowwise_adagrad,
    native_segment_presort,
    native_segment_update,
    native_sgd,
)

__all__ = [
    "ENV_VAR",
    "MAX_DIM",
    "MAX_IDS",
    "AdagradWorkspace",
    "GradientPiece",
    "NativeUnavailableWarning",
    "Presorted",
    "native_adagrad",
    "native_applies",
    "native_available",
    "native_library",
    "native_pooled_into",
    "native_pooled_lookup",
    "native_presorted_update",
    "native_rowwise_adagrad",
    "native_scatter",
    "native_segment_presort",
    "native_segment_update",
    "native_sgd",
]
