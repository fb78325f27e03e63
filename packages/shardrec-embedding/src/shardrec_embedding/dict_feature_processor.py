"""Position weights over a dict of per-feature JaggedTensors (TorchRec's older
`torchrec.modules.feature_processor` path).

`DictPositionWeightedModule(max_feature_lengths)` holds one learnable `(max_length,)` weight
per named feature, initialized to 1. Its forward takes `dict[str, JaggedTensor]` and returns
the same dict with each named feature replaced by the same ids and lengths whose `weights`
are its position weights gathered at each id's position in its bag (the rule of
`feature_processors.py`); features it has no weight for pass through unchanged. As in
TorchRec, the input dict itself is updated and returned.

Under the TorchRec path it is `PositionWeightedModule`; shardrec's own package keeps the name
`PositionWeightedModule` for the one-feature module of `torchrec.modules.feature_processor_`.
In eager mode a missing feature or a bag longer than its maximum raises `ValueError`.

No `from __future__ import annotations` here: the module scripts and fx-traces.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
import torch.fx
from torch import nn

from shardrec_embedding._tables import traced_input
from shardrec_embedding.feature_processors import (
    _check_max_length,
    _positions,
    init_position_weights,
)
from shardrec_jagged import JaggedTensor, TorchScriptable

__all__ = ["BaseFeatureProcessor", "DictPositionWeightedModule", "PositionWeightedModule"]


class BaseFeatureProcessor(TorchScriptable, nn.Module):
    """Base of processors of `dict[str, JaggedTensor] -> dict[str, JaggedTensor]` (TorchRec's
    `torchrec.modules.feature_processor.BaseFeatureProcessor`)."""


def _update_features(
    features: dict[str, JaggedTensor], weighted: dict[str, JaggedTensor]
) -> dict[str, JaggedTensor]:
    features.update(weighted)
    return features


torch.fx.wrap("_update_features")


class DictPositionWeightedModule(BaseFeatureProcessor):
    """Per-feature position weights over a dict of JaggedTensors (module docstring).

    Args:
        max_feature_lengths: feature name -> the longest bag it may have (positive int).
        device: where the weights live.

    State: `position_weights.<feature>` `(max_length,)`.
    """

    max_feature_lengths: dict[str, int]

    def __init__(
        self, max_feature_lengths: Mapping[str, int], device: torch.device | str | None = None
    ) -> None:
        super().__init__()
        init_position_weights(self, max_feature_lengths, device)

    def reset_parameters(self) -> None:
        with torch.no_grad():
            for weight in self.position_weights.values():
                weight.fill_(1.0)

    if TYPE_CHECKING:  # mypy only (set by init_position_weights; script reads annotations)
        position_weights: nn.ParameterDict

    @torch.jit.unused
    def _check(self, features: dict[str, JaggedTensor]) -> None:
        for name, length in self.max_feature_lengths.items():
            if name not in features:
                raise ValueError(
                    f"feature {name!r} has a position weight but is not in the input "
                    f"(features {sorted(features)}); pass it, or drop it from "
                    "max_feature_lengths"
                )
            _check_max_length(features[name].lengths(), length, name)

    def forward(self, features: dict[str, JaggedTensor]) -> dict[str, JaggedTensor]:
        # Nested ifs: TorchScript drops only the body of `if not is_scripting()`.
        if not torch._jit_internal.is_scripting():  # noqa: SIM102
            if not traced_input(features):
                self._check(features)
        weighted: dict[str, JaggedTensor] = {}
        for name, weight in self.position_weights.items():
            jt = features[name]
            values = jt.values()
            offsets = jt.offsets()
            weighted[name] = JaggedTensor(
                values=values,
                weights=weight.index_select(0, _positions(offsets, values.numel())),
                lengths=jt.lengths(),
                offsets=offsets,
            )
        return _update_features(features, weighted)


# TorchRec's name for it under `torchrec.modules.feature_processor` (the umbrella re-exports it).
PositionWeightedModule = DictPositionWeightedModule
