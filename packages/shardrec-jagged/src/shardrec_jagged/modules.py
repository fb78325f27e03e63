"""TorchRec's two conversion modules between a KeyedJaggedTensor and a dict of JaggedTensors.

Both are plain ``nn.Module``s with no state; they script (the value types have TorchScript
twins) and trace (``from_jt_dict`` is a torch.fx leaf).
"""

from __future__ import annotations

from torch import nn

from shardrec_jagged.jagged_tensor import JaggedTensor
from shardrec_jagged.keyed_jagged_tensor import KeyedJaggedTensor

__all__ = ["ComputeJTDictToKJT", "ComputeKJTToJTDict"]


class ComputeKJTToJTDict(nn.Module):
    """``kjt -> {key: JaggedTensor}`` (``kjt.to_dict()``; variable batch per key included)."""

    def forward(self, keyed_jagged_tensor: KeyedJaggedTensor) -> dict[str, JaggedTensor]:
        return keyed_jagged_tensor.to_dict()


class ComputeJTDictToKJT(nn.Module):
    """``{key: JaggedTensor} -> kjt`` (``KeyedJaggedTensor.from_jt_dict``); bag counts that
    differ between keys give a variable-batch KJT."""

    def forward(self, jt_dict: dict[str, JaggedTensor]) -> KeyedJaggedTensor:
        return KeyedJaggedTensor.from_jt_dict(jt_dict)
