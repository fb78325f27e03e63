"""`DLRMTrain`: a DLRM with its loss, in the form train loops and the train pipeline expect.

`forward(batch)` returns `(loss, (loss.detach(), logits.detach(), labels.detach()))`, as
TorchRec's `torchrec.models.dlrm.DLRMTrain`, so the same loop code (and
`shardrec_dmp.TrainPipelineSparseDist`) drives either library's model.
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor, nn

from shardrec_jagged import KeyedJaggedTensor
from shardrec_models.dlrm import DLRM

__all__ = ["BatchLike", "DLRMTrain"]


class BatchLike(Protocol):
    """What DLRMTrain reads from a batch: any object with these three attributes (for example
    `shardrec_data.Batch` or `torchrec.datasets.utils.Batch`)."""

    @property
    def dense_features(self) -> Tensor:
        """float `(B, dense_in_features)`."""
        ...

    @property
    def sparse_features(self) -> KeyedJaggedTensor:
        """ids of every feature the tables read, stride B."""
        ...

    @property
    def labels(self) -> Tensor:
        """`(B,)`, 0 or 1 (any dtype; compared as float)."""
        ...


class DLRMTrain(nn.Module):
    """`dlrm_module` plus the mean binary cross entropy of its logits against `batch.labels`.

    Args:
        dlrm_module: a `DLRM` or `DLRM_DCN` with one logit per sample
            (`over_arch_layer_sizes[-1] == 1`).

    forward: `batch` (BatchLike) -> `(loss, (loss.detach(), logits.detach(), labels.detach()))`
    with `loss` a scalar, `logits` and `labels` `(B,)`. The parameter names are the model's
    under `model.` (`model.sparse_arch.embedding_bag_collection...`), as in TorchRec.
    """

    def __init__(self, dlrm_module: DLRM) -> None:
        super().__init__()
        if not isinstance(dlrm_module, DLRM):
            raise TypeError(f"DLRMTrain wraps a DLRM or DLRM_DCN, got {type(dlrm_module).__name__}")
        outputs = dlrm_module.over_arch.out_features
        if outputs != 1:
            raise ValueError(
                f"DLRMTrain needs one logit per sample, but the model's over_arch_layer_sizes "
                f"ends with {outputs}; end it with 1"
            )
        self.model = dlrm_module
        self.loss_fn = nn.BCEWithLogitsLoss()

    def forward(self, batch: BatchLike) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor]]:
        logits = self.model(batch.dense_features, batch.sparse_features).squeeze(-1)
        labels = batch.labels
        if labels.shape != logits.shape:
            raise ValueError(
                f"labels have shape {tuple(labels.shape)}, but the batch has {logits.shape[0]} "
                f"samples: expected ({logits.shape[0]},)"
            )
        loss = self.loss_fn(logits, labels.float())
        return loss, (loss.detach(), logits.detach(), labels.detach())
