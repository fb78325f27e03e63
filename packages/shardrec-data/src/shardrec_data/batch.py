"""Batch: one step's dense features, sparse ids and labels (TorchRec's ``datasets.utils.Batch``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from shardrec_jagged import KeyedJaggedTensor

__all__ = ["Batch"]


@dataclass(frozen=True)
class Batch:
    """A batch of B samples.

    Attributes:
        dense_features: ``(B, num_dense)`` float32.
        sparse_features: KeyedJaggedTensor with the dataset's sparse feature names as keys, in
            the dataset's order, stride B.
        labels: ``(B,)`` float32, 0. or 1.
    """

    dense_features: torch.Tensor
    sparse_features: KeyedJaggedTensor
    labels: torch.Tensor

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """A copy of every tensor on ``device``."""
        return Batch(
            dense_features=self.dense_features.to(device=device, non_blocking=non_blocking),
            sparse_features=self.sparse_features.to(device=device, non_blocking=non_blocking),
            labels=self.labels.to(device=device, non_blocking=non_blocking),
        )

    def pin_memory(self) -> Batch:
        """A copy in pinned host memory (for asynchronous host-to-device copies)."""
        return Batch(
            dense_features=self.dense_features.pin_memory(),
            sparse_features=self.sparse_features.pin_memory(),
            labels=self.labels.pin_memory(),
        )

    def record_stream(self, stream: torch.Stream) -> None:
        """Mark every tensor as used by ``stream`` (as TorchRec's Batch)."""
        self.dense_features.record_stream(stream)
        self.sparse_features.record_stream(stream)
        self.labels.record_stream(stream)

    def __len__(self) -> int:
        return int(self.labels.size(0))
