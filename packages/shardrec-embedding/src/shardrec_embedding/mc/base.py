"""`ManagedCollisionModule`: the interface of a raw-id -> row remapper (TorchRec's base class).

A managed-collision (MC) module maps the raw ids of one table's features into the table's rows
`[0, output_size())` and decides which raw ids own a row. Its input and output are
`dict[str, JaggedTensor]` keyed by table (or feature) name; only the values change.

Row-wise sharding splits the output range into segments (`output_segments`, at most 1024
shards): each rank rebuilds its own module over its segment (`rebuild_with_output_id_range`).
"""

from __future__ import annotations

import abc
import logging

import torch
from torch import nn

from shardrec_jagged import JaggedTensor

__all__ = ["ManagedCollisionModule", "apply_mc_method_to_jt_dict"]

_LOG = logging.getLogger(__name__)
_MAX_SEGMENTS = 1025  # 1024 row-wise shards, TorchRec's fixed buffer length


@torch.fx.wrap
def apply_mc_method_to_jt_dict(
    mc_module: nn.Module,
    method: str,
    features_dict: dict[str, JaggedTensor],
) -> dict[str, JaggedTensor]:
    """Call `mc_module.<method>(features_dict)` (a leaf for `torch.fx` tracing)."""
    result: dict[str, JaggedTensor] = getattr(mc_module, method)(features_dict)
    return result


class ManagedCollisionModule(nn.Module, abc.ABC):
    """Base of the MC modules (TorchRec's `ManagedCollisionModule`).

    Args:
        device: where the module's buffers live.
        output_segments: boundaries of the row ranges that row-wise shards own, ascending
            (`[0, zch_size]` unsharded); at most 1025 entries.
        skip_state_validation: do not register the segment / iteration buffers nor validate a
            loaded state (TorchRec: modules that are never resharded).
        read_only_suffix: features whose name ends with it are looked up without admitting ids.
        enable_per_feature_lookups: look features of one table up separately.

    Buffers (state dict): `_output_segments_tensor: (1025,)` (segments padded with -1) and
    `_current_iter_tensor: (1,)`, the training iteration count.
    """

    _output_segments_tensor: torch.Tensor
    _current_iter_tensor: torch.Tensor

    def __init__(
        self,
        device: torch.device,
        output_segments: list[int],
        skip_state_validation: bool = False,
        read_only_suffix: str = "_readonly",
        enable_per_feature_lookups: bool = False,
    ) -> None:
        super().__init__()
        self._device = torch.device(device)
        self._enable_per_feature_lookups = enable_per_feature_lookups
        self._read_only_suffix = read_only_suffix
        if skip_state_validation:
            return
        if len(output_segments) > _MAX_SEGMENTS:
            raise ValueError(
                f"{type(self).__name__}: {len(output_segments) - 1} output segments; at most "
                f"{_MAX_SEGMENTS - 1} row-wise shards are supported (use fewer ranks per table)"
            )
        padded = list(output_segments) + [-1] * (_MAX_SEGMENTS - len(output_segments))
        self.register_buffer(
            "_output_segments_tensor", torch.tensor(padded, dtype=torch.int64, device=self._device)
        )
        self.register_buffer(
            "_current_iter_tensor", torch.zeros(1, dtype=torch.int64, device=self._device)
        )
        self.register_load_state_dict_post_hook(_validate_after_load)  # type: ignore[no-untyped-call]  # untyped in torch

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def readable_suffix(self) -> str:
        return self._read_only_suffix

    @abc.abstractmethod
    def preprocess(self, features: dict[str, JaggedTensor]) -> dict[str, JaggedTensor]:
        """Transform raw ids before profiling (e.g. the input hash)."""

    @abc.abstractmethod
    def profile(self, features: dict[str, JaggedTensor]) -> dict[str, JaggedTensor]:
        """Record the ids (training only) and run admission / eviction when due."""

    @abc.abstractmethod
    def remap(
        self,
        features: dict[str, JaggedTensor],
        mutate_miss_lengths: bool = True,
        write_weights: torch.Tensor | None = None,
    ) -> dict[str, JaggedTensor]:
        """Raw ids -> rows of the table."""

    def __prepare_scriptable__(self) -> nn.Module:
        raise NotImplementedError(
            f"torch.jit.script of a bare {type(self).__name__} is not supported; put it in a "
            "ManagedCollisionCollection and script that (a lookup-only twin, eval mode), or "
            "trace the module in eval mode with torch.fx and script the trace"
        )

    @abc.abstractmethod
    def forward(
        self,
        features: dict[str, JaggedTensor],
        mutate_miss_lengths: bool = True,
    ) -> dict[str, JaggedTensor]:
        """`remap(profile(preprocess(features)))`."""

    @abc.abstractmethod
    def evict(self) -> torch.Tensor | None:
        """Rows freed for new ids since the last call (to reset downstream), or None."""

    @abc.abstractmethod
    def output_size(self) -> int:
        """Number of rows the remapped ids address (the table's `num_embeddings`)."""

    @abc.abstractmethod
    def input_size(self) -> int:
        """Range of the raw ids (`input_hash_size`), for sharding."""

    @abc.abstractmethod
    def buckets(self) -> int:
        """Number of uniform buckets of the output range (resharding granularity)."""

    @abc.abstractmethod
    def validate_state(self) -> None:
        """Check the state after a checkpoint load."""

    @abc.abstractmethod
    def open_slots(self) -> torch.Tensor:
        """Rows not yet owned by a raw id, `(1,)`."""

    @abc.abstractmethod
    def rebuild_with_output_id_range(
        self,
        output_id_range: tuple[int, int],
        output_segments: list[int],
        device: torch.device | None = None,
    ) -> ManagedCollisionModule:
        """A module of the same kind owning rows `[start, end)` of the global range (row-wise)."""


def _validate_after_load(module: nn.Module, incompatible_keys: object) -> None:
    if isinstance(module, ManagedCollisionModule):
        module.validate_state()
