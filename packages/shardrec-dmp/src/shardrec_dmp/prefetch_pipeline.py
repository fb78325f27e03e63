"""`PrefetchTrainPipelineSparseDist`: TorchRec's prefetching pipeline, three batches in flight.

One `progress()` call, for batch `i`:

```
input_dist(i+2) started          (its ids travel)
prefetch(i+1) started            (i+1's ids received; its missing rows load on the tables'
                                  worker threads, background)
forward(i) -> backward(i) -> optimizer.step()    (i's rows were prefetched one call ago)
```

So the rows of batch i+1 load from disk while batch i runs forward *and* backward (in
`TrainPipelineSparseDist` they overlap the backward only). Rows held by an in-flight batch are
never evicted: batch i's until its backward, batch i+1's until its forward (a cache holds two
batches' distinct rows). Without tiered tables the prefetch is a no-op and the pipeline is
`TrainPipelineSparseDist` one batch further ahead. Every rank issues the same collectives in
the same order as in the plain loop, and the arithmetic is unchanged: the weights equal the
plain loop's bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import nn

from shardrec_dmp.train_pipeline import Pipelineable, TrainPipelineSparseDist, _InFlight

__all__ = ["PrefetchTrainPipelineSparseDist"]


class PrefetchTrainPipelineSparseDist(TrainPipelineSparseDist):
    """`TrainPipelineSparseDist` with a prefetch stage one batch ahead (module docstring).

    TorchRec 1.8's arguments: `custom_model_fwd(batch) -> (loss, output)` replaces
    `model(batch)`; `apply_jit`, `pipeline_postproc`, `enable_inplace_copy_batch`,
    `free_features_storage_early` and `clear_data_dist_inputs` tune CUDA streams and memory
    in TorchRec and change nothing here (accepted, unused). Requirements, `execute_all_batches`
    and eval mode as `TrainPipelineSparseDist`.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        device: torch.device | str,
        execute_all_batches: bool = True,
        apply_jit: bool = False,
        pipeline_postproc: bool = True,
        custom_model_fwd: Callable[[Pipelineable], object] | None = None,
        enable_inplace_copy_batch: bool = False,
        free_features_storage_early: bool = False,
        clear_data_dist_inputs: bool = False,
    ) -> None:
        del apply_jit, pipeline_postproc, enable_inplace_copy_batch
        del free_features_storage_early, clear_data_dist_inputs
        super().__init__(model, optimizer, device, execute_all_batches)
        if custom_model_fwd is not None:
            self._model_fwd = custom_model_fwd
        self._ready: _InFlight | None = None
        """Batch i: ids received and rows prefetched (or loading)."""

    def reset(self) -> None:
        self._drop(self._ready)
        self._ready = None
        super().reset()

    def progress(self, dataloader_iter: Iterator[Pipelineable]) -> object:
        """Train on the next batch (in eval mode: only run the forward); returns the model's
        `output` for it."""
        if self._ready is None:
            # Cold start (or after the last batch): batch i, prefetched, and batch i+1 sent.
            self._ready = self._fetch(dataloader_iter) if self._next is None else self._next
            if self._ready is None:
                self._next = None
                raise StopIteration
            self._prefetch(self._ready)
            self._next = self._fetch(dataloader_iter)
        current = self._ready
        self._require_ahead(dataloader_iter, 1)
        # Batch i+1's rows load, batch i+2's ids travel, while batch i computes.
        self._prefetch(self._next)
        self._ready = self._next
        self._next = self._fetch(dataloader_iter)
        return self._run(current, None)
