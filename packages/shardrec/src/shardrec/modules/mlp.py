"""MLP blocks (TorchRec path `torchrec.modules.mlp`)."""

from shardrec_models import MLP, Perceptron

__all__ = ["MLP", "Perceptron"]
