"""Feature processors: learnable per-position id weights, and the EBC that applies them.

A position-weighted feature gives the id at position p of its bag the weight `w[p]`, a
learnable `(max_feature_length,)` Parameter initialized to 1:

```
bag [id_a, id_b, id_c]  ->  weights [w[0], w[1], w[2]]  ->  SUM pooling: sum_p w[p] * row(id_p)
```
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor

__all__ = [
    "FeatureProcessedEmbeddingBagCollection",
    "PositionWeightedModule",
    "PositionWeightedModuleCollection",
]


def _positions(offsets: torch.Tensor, lengths: torch.Tensor, num_ids: int) -> torch.Tensor:
    """`(N,)` position of each id within its bag. offsets: `(B + 1,)`, lengths: `(B,)`."""
    starts = torch.repeat_interleave(offsets[:-1].long(), lengths.long(), output_size=num_ids)
    return torch.arange(num_ids, device=offsets.device) - starts


def _check_max_length(lengths: torch.Tensor, max_length: int, feature: str) -> None:
    if lengths.numel() and int(lengths.max()) > max_length:
        raise ValueError(
            f"feature {feature!r} has a bag of {int(lengths.max())} ids, longer than its "
            f"max_feature_length {max_length}; truncate the bags or raise the maximum"
        )


def _check_length(name: str, length: int) -> None:
    if isinstance(length, bool) or not isinstance(length, int) or length <= 0:
        raise ValueError(f"max_feature_length of {name!r} must be a positive int, got {length!r}")


class PositionWeightedModule(nn.Module):
    """Weights one feature's ids by their position in the bag (TorchRec's module of this name).

    forward(JaggedTensor) -> the same ids and lengths with `weights` `(N,)` = `position_weight`
    gathered at each id's position. `ValueError` for a bag longer than `max_feature_length`.
    """

    def __init__(self, max_feature_length: int, device: torch.device | str | None = None) -> None:
        super().__init__()
        _check_length("max_feature_length", max_feature_length)
        self.max_feature_length = max_feature_length
        self.position_weight = nn.Parameter(torch.empty(max_feature_length, device=device))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.position_weight.fill_(1.0)

    def forward(self, features: JaggedTensor, feature: str = "feature") -> JaggedTensor:
        lengths, offsets, values = features.lengths(), features.offsets(), features.values()
        _check_max_length(lengths, self.max_feature_length, feature)
        pos = _positions(offsets, lengths, values.numel())
        return JaggedTensor(
            values=values,
            lengths=lengths,
            offsets=offsets,
            weights=self.position_weight.index_select(0, pos),
        )


class PositionWeightedModuleCollection(nn.Module):
    """Position weights for several features of a KJT at once (TorchRec's module of this name).

    forward(KJT) -> the same KJT with `weights` set; features without a maximum length get
    weight 1. `position_weights[feature]` holds each feature's `(max_length,)` Parameter.
    """

    def __init__(
        self, max_feature_lengths: Mapping[str, int], device: torch.device | str | None = None
    ) -> None:
        super().__init__()
        for name, length in max_feature_lengths.items():
            _check_length(name, length)
        self.max_feature_lengths = dict(max_feature_lengths)
        self.position_weights = nn.ParameterDict(
            {k: nn.Parameter(torch.empty(n, device=device)) for k, n in max_feature_lengths.items()}
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            for p in self.position_weights.values():
                p.fill_(1.0)

    def forward(self, features: KeyedJaggedTensor) -> KeyedJaggedTensor:
        keys = features.keys()
        missing = [k for k in self.max_feature_lengths if k not in keys]
        if missing:
            raise ValueError(
                f"PositionWeightedModuleCollection: the KeyedJaggedTensor lacks feature(s) "
                f"{missing}; it has keys {keys}"
            )
        values, lengths = features.values(), features.lengths()
        pos = _positions(features.offsets(), lengths, values.numel())
        offset_per_key = features.offset_per_key()
        batch = features.stride()
        parts: list[torch.Tensor] = []
        for k, key in enumerate(keys):
            start, end = offset_per_key[k], offset_per_key[k + 1]
            if key in self.max_feature_lengths:
                _check_max_length(
                    lengths[k * batch : (k + 1) * batch], self.max_feature_lengths[key], key
                )
                parts.append(self.position_weights[key].index_select(0, pos[start:end]))
            else:
                parts.append(torch.ones(end - start, device=values.device))
        return KeyedJaggedTensor(
            keys=keys,
            values=values,
            weights=torch.cat(parts) if parts else torch.ones(0, device=values.device),
            lengths=lengths,
            stride=batch,
        )


class FeatureProcessedEmbeddingBagCollection(nn.Module):
    """A weighted `EmbeddingBagCollection` fed by feature processors (TorchRec's module).

    Args:
        embedding_bag_collection: must be built with `is_weighted=True`.
        feature_processors: `{feature: PositionWeightedModule}` covering exactly the features
            the tables read, or one `PositionWeightedModuleCollection`.
    forward(KJT without weights) -> the EBC's `KeyedTensor`; gradients reach the position
    weights as well as the tables.
    """

    def __init__(
        self,
        embedding_bag_collection: EmbeddingBagCollection,
        feature_processors: Mapping[str, PositionWeightedModule] | PositionWeightedModuleCollection,
    ) -> None:
        super().__init__()
        if not embedding_bag_collection.is_weighted():
            raise ValueError(
                "FeatureProcessedEmbeddingBagCollection needs an EmbeddingBagCollection built "
                "with is_weighted=True"
            )
        self._embedding_bag_collection = embedding_bag_collection
        features = list(
            dict.fromkeys(
                f for t in embedding_bag_collection.embedding_bag_configs() for f in t.feature_names
            )
        )
        self._feature_names = features
        self._feature_processors: nn.Module
        if isinstance(feature_processors, PositionWeightedModuleCollection):
            self._feature_processors = feature_processors
        else:
            if set(feature_processors) != set(features):
                raise ValueError(
                    f"feature_processors cover {sorted(feature_processors)} but the tables read "
                    f"{sorted(features)}; give exactly one processor per feature"
                )
            self._feature_processors = nn.ModuleDict(dict(feature_processors))

    def is_weighted(self) -> bool:
        return True

    def forward(self, features: KeyedJaggedTensor) -> KeyedTensor:
        processors = self._feature_processors
        if isinstance(processors, PositionWeightedModuleCollection):
            pooled: KeyedTensor = self._embedding_bag_collection(processors(features))
            return pooled
        assert isinstance(processors, nn.ModuleDict)
        jts = features.to_dict()
        missing = [f for f in self._feature_names if f not in jts]
        if missing:
            raise ValueError(
                f"the KeyedJaggedTensor lacks feature(s) {missing}; it has keys {features.keys()}"
            )
        processed = [processors[f](jts[f], f) for f in self._feature_names]
        kjt = KeyedJaggedTensor(
            keys=self._feature_names,
            values=torch.cat([jt.values() for jt in processed]),
            lengths=torch.cat([jt.lengths() for jt in processed]),
            weights=torch.cat([jt.weights() for jt in processed]),
            stride=features.stride(),
        )
        out: KeyedTensor = self._embedding_bag_collection(kjt)
        return out
