"""Gradient clipping (TorchRec path `torchrec.optim.clipping`).

The private norm helpers are re-exported under TorchRec's names for ported code that calls them.
"""

from shardrec_optim import GradientClipping, GradientClippingOptimizer
from shardrec_optim.clipping import _batch_cal_norm, _compute_total_norm, _get_grads

__all__ = [
    "GradientClipping",
    "GradientClippingOptimizer",
    "_batch_cal_norm",
    "_compute_total_norm",
    "_get_grads",
]
