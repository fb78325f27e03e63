"""`TrainPipeline` (the pipelines' common base) and `TrainPipelineBase` (no overlap).

`TrainPipelineBase(model, optimizer, device)` is TorchRec's plain pipeline: one `progress()`
call fetches the next batch ahead, runs `model(batch) -> (losses, output)` on the current one,
and in training mode zeroes the gradients, backpropagates `losses.sum(0)` and steps the
optimizer; in eval mode it runs the forward only. `n` batches give `n` calls, then
`StopIteration`; the exhausted state holds until `reset()` (as TorchRec's). Any model and
batch work: the batch only needs `to(device, non_blocking=...)`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

import torch
from torch import Tensor, nn

from shardrec_dmp.train_pipeline import TrainPipelineSparseDist

__all__ = ["TrainPipeline", "TrainPipelineBase"]

In = TypeVar("In")
Out = TypeVar("Out")


class TrainPipeline(abc.ABC, Generic[In, Out]):
    """A training pipeline: `progress(iterator)` runs one step and returns its output."""

    @abc.abstractmethod
    def progress(self, dataloader_iter: Iterator[In]) -> Out:
        """Run one step on the next batch; `StopIteration` once the iterator is exhausted."""


TrainPipeline.register(TrainPipelineSparseDist)


class TrainPipelineBase(TrainPipeline[In, Out]):
    """Forward, backward and optimizer step per batch, with the next batch fetched ahead.

    `custom_model_fwd(batch) -> (losses, output)` replaces `model(batch)` when given (TorchRec
    1.8's `TrainPipelineBase` accepts it but still calls the model).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        custom_model_fwd: Callable[[In], tuple[Tensor, Out]] | None = None,
        enable_inplace_copy_batch: bool = False,
    ) -> None:
        del enable_inplace_copy_batch  # a CUDA copy-stream option; the copy here is synchronous
        self._model = model
        self._optimizer = optimizer
        self._device = torch.device(device)
        self._model_fwd: Callable[[In], tuple[Tensor, Out]] = (
            custom_model_fwd if custom_model_fwd is not None else model
        )
        self._cur_batch: In | None = None
        self._connected = False
        self._data_iter_stopped = False
        self._batch_count = 0

    def _next_batch(self, dataloader_iter: Iterator[In]) -> In | None:
        try:
            batch = next(dataloader_iter)
        except StopIteration:
            self._data_iter_stopped = True
            return None
        return self._to_device(batch)

    def _to_device(self, batch: In) -> In:
        to = getattr(batch, "to", None)
        if to is None:
            raise TypeError(
                f"TrainPipelineBase moves each batch with `batch.to(device, non_blocking=True)`; "
                f"got a {type(batch).__name__} without `to`. Give batches a `to` method (e.g. "
                "shardrec.datasets.utils.Batch) or move them yourself and call the model directly."
            )
        moved: In = to(self._device, non_blocking=True)
        return moved

    def progress(self, dataloader_iter: Iterator[In]) -> Out:
        """One step on the current batch; `StopIteration` when no batch is left."""
        if not self._connected:
            self._cur_batch = self._next_batch(dataloader_iter)
            self._connected = True
        if self._data_iter_stopped and self._cur_batch is None:
            raise StopIteration()
        self._batch_count += 1
        cur_batch = self._cur_batch
        next_batch = self._next_batch(dataloader_iter)
        training = self._model.training
        if training:
            self._optimizer.zero_grad()
        losses, output = self._model_fwd(cur_batch)  # type: ignore[arg-type]
        self._cur_batch = next_batch
        if training:
            torch.sum(losses, dim=0).backward()  # type: ignore[no-untyped-call]  # untyped in stubs
            self._optimizer.step()
        return output

    def reset(self) -> None:
        """Forget the iterator (and its exhausted state): the next `progress` starts afresh."""
        self._connected = False
        self._data_iter_stopped = False
        self._cur_batch = None
