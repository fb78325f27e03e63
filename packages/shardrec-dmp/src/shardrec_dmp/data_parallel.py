"""How `DistributedModelParallel` replicates the dense part: a data-parallel wrapper.

A wrapper's `wrap(dmp, env, device)` replaces `dmp._dmp_wrapped_module` (the model with its
sharded submodules) by a data-parallel version of it, leaving the sharded modules' parameters
to their own collectives. TorchRec users pass their own wrapper (`data_parallel_wrapper=`) the
same way; `DefaultDataParallelWrapper` takes TorchRec's arguments.
"""

from __future__ import annotations

import abc
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from shardrec_collectives import ShardingEnv

if TYPE_CHECKING:
    from shardrec_dmp.model_parallel import DistributedModelParallel

__all__ = ["DataParallelWrapper", "DefaultDataParallelWrapper"]

_HOOKS = {"fp16": default_hooks.fp16_compress_hook, "bf16": default_hooks.bf16_compress_hook}


class DataParallelWrapper(abc.ABC):
    """Applies data parallelism to a `DistributedModelParallel`'s dense part."""

    @abc.abstractmethod
    def wrap(self, dmp: DistributedModelParallel, env: ShardingEnv, device: torch.device) -> None:
        """Replace `dmp._dmp_wrapped_module` by its data-parallel version (or leave it)."""


class DefaultDataParallelWrapper(DataParallelWrapper):
    """`DistributedDataParallel` over every parameter outside the sharded modules.

    Arguments as TorchRec's: `bucket_cap_mb`, `static_graph`, `find_unused_parameters` go to
    DDP; `allreduce_comm_precision` ("fp16" / "bf16") compresses the gradient all-reduce;
    `params_to_ignore` names more parameters DDP leaves alone; `ddp_kwargs` are passed on last
    (so they override). As in TorchRec, DDP runs with `gradient_as_bucket_view=True` and
    `broadcast_buffers=False` unless `ddp_kwargs` says otherwise.

    Does nothing when the model is already wrapped in DDP, when `env` has no process group
    (a local environment) or when no dense parameter needs gradients.
    """

    def __init__(
        self,
        bucket_cap_mb: int = 25,
        static_graph: bool = True,
        find_unused_parameters: bool = False,
        allreduce_comm_precision: str | None = None,
        params_to_ignore: Sequence[str] | None = None,
        ddp_kwargs: Mapping[str, object] | None = None,
    ) -> None:
        if allreduce_comm_precision is not None and allreduce_comm_precision not in _HOOKS:
            raise ValueError(
                f"allreduce_comm_precision={allreduce_comm_precision!r} is not one of "
                f"{sorted(_HOOKS)} (or None for the gradients' own dtype)"
            )
        if bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb={bucket_cap_mb} must be > 0 (MiB per DDP bucket)")
        self._bucket_cap_mb = bucket_cap_mb
        self._static_graph = static_graph
        self._find_unused_parameters = find_unused_parameters
        self._allreduce_comm_precision = allreduce_comm_precision
        self._params_to_ignore = set(params_to_ignore or ())
        self._ddp_kwargs = dict(ddp_kwargs or {})

    def wrap(self, dmp: DistributedModelParallel, env: ShardingEnv, device: torch.device) -> None:
        module = dmp._dmp_wrapped_module
        if isinstance(module, DistributedDataParallel) or env.pg is None:
            return
        sharded = list(dmp.sharded_modules)
        ignored = {
            name
            for name, _ in [*module.named_parameters(), *module.named_buffers()]
            if any(name.startswith(f"{p}.") or not p for p in sharded)
        } | self._params_to_ignore
        dense = [p for n, p in module.named_parameters() if n not in ignored]
        if not any(p.requires_grad for p in dense):
            return  # nothing dense to synchronize; DDP refuses such a module
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(  # type: ignore[no-untyped-call]  # untyped in torch; the documented way to exclude parameters
            module, sorted(ignored)
        )
        options: dict[str, object] = {
            "gradient_as_bucket_view": True,
            "broadcast_buffers": False,
            "static_graph": self._static_graph,
            "find_unused_parameters": self._find_unused_parameters,
            "bucket_cap_mb": self._bucket_cap_mb,
            **self._ddp_kwargs,
        }
        with warnings.catch_warnings():
            # torch >= 2.13 announces broadcast_buffers' deprecation; its replacement syncs the
            # buffers at init, which broadcast_buffers=False (TorchRec's setting) does not.
            warnings.filterwarnings(
                "ignore", message=".*broadcast_buffers.* is deprecated", category=FutureWarning
            )
            ddp = DistributedDataParallel(
                module,
                device_ids=[device] if device.type == "cuda" else None,
                process_group=env.pg,
                **options,  # type: ignore[arg-type]  # DDP's keyword types vary; passed through as TorchRec does
            )
        if self._allreduce_comm_precision is not None:
            ddp.register_comm_hook(None, _HOOKS[self._allreduce_comm_precision])
        wrapped: nn.Module = ddp
        dmp._dmp_wrapped_module = wrapped


def dmp_default_wrapper() -> DefaultDataParallelWrapper:
    """What `DistributedModelParallel` uses when given no wrapper: DDP's own defaults, except
    `gradient_as_bucket_view=True` (TorchRec's setting).

    Not TorchRec's `static_graph=True`: a static graph fails models whose forward uses
    different dense parameters from one step to the next. Buffers are still broadcast from
    rank 0 in each forward (DDP's default; a no-op for models without buffers).

    `gradient_as_bucket_view=True`: the dense gradients are views of DDP's all-reduce buckets
    instead of separate tensors copied into the buckets and back after the all-reduce. The
    all-reduce sums the same values, so gradients are bit-identical; it saves two copies of the
    dense gradients and a fresh allocation of them per step (measured -7 to -12 ms of CPU per
    DLRM step on 2 gloo ranks, docs/bench/dmp.md).

    `bucket_cap_mb=25`: a DLRM's few MB of dense gradients fill one bucket, all-reduced once the
    dense arch's last gradient is ready, on the same process group as the sharded modules'
    collectives (gloo runs two collectives of a group at once). It completes under the fused
    embedding update that follows in backward; smaller buckets start the over arch's part
    earlier but measured no faster (docs/bench/dmp.md, session 12). Gradients are the same bits
    whatever the bucket layout.
    """
    return DefaultDataParallelWrapper(
        static_graph=False,
        ddp_kwargs={"gradient_as_bucket_view": True, "broadcast_buffers": True},
    )
