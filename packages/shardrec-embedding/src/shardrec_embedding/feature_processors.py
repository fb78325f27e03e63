"""Feature processors: learnable per-position id weights, and the EBC that applies them.

A position-weighted feature gives the id at position p of its bag the weight `w[p]`, a
learnable `(max_feature_length,)` Parameter initialized to 1:

```
bag [id_a, id_b, id_c]  ->  weights [w[0], w[1], w[2]]  ->  SUM pooling: sum_p w[p] * row(id_p)
```

The modules script with `torch.jit.script` and trace with `torch.fx` (their forwards use only
KJT methods and tensor ops; the per-key loop is one wrapped function, `_position_weights`). In
eager mode a bag longer than its maximum raises `ValueError`; scripted or traced, it raises
torch's index error.

No `from __future__ import annotations` here: TorchScript compiles `_position_weights` from
its source and reads its annotations.
"""

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

import torch
import torch.fx
from torch import nn

from shardrec_embedding._tables import traced_input
from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor, TorchScriptable

__all__ = [
    "BaseGroupedFeatureProcessor",
    "FeatureProcessedEmbeddingBagCollection",
    "FeatureProcessor",
    "FeatureProcessorDictWrapper",
    "FeatureProcessorsCollection",
    "PositionWeightedModule",
    "PositionWeightedModuleCollection",
    "PositionWeightedProcessor",
]


def _positions(offsets: torch.Tensor, num_ids: int) -> torch.Tensor:
    """`(N,)` position of each id within its bag. offsets: `(B + 1,)` (or `(F * B + 1,)`)."""
    offsets = offsets.long()
    starts = torch.repeat_interleave(offsets[:-1], offsets[1:] - offsets[:-1], output_size=num_ids)
    return torch.arange(num_ids, device=offsets.device) - starts


def _position_weights(
    positions: torch.Tensor,
    features: KeyedJaggedTensor,
    weights_by_key: dict[str, torch.Tensor],
) -> torch.Tensor:
    """Each id's weight: its feature's position weight at its position, 1 for features
    without one. positions: `(N,)`; returns `(N,)` float."""
    parts: list[torch.Tensor] = []
    per_key = torch.split(positions, features.length_per_key())
    for key, pos in zip(features.keys(), per_key):  # noqa: B905  # TorchScript has no strict
        if key in weights_by_key:
            parts.append(weights_by_key[key].index_select(0, pos))
        else:
            parts.append(torch.ones(pos.shape[0], device=positions.device))
    if len(parts) == 0:
        return torch.ones(0, device=positions.device)
    return torch.cat(parts)


torch.fx.wrap("_position_weights")


def _check_max_length(lengths: torch.Tensor, max_length: int, feature: str | None) -> None:
    if torch.compiler.is_compiling():  # torch.export / torch.compile: lengths are not readable
        return
    if lengths.numel() and int(lengths.max()) > max_length:
        which = f"feature {feature!r} has" if feature is not None else "the feature has"
        raise ValueError(
            f"{which} a bag of {int(lengths.max())} ids, longer than its "
            f"max_feature_length {max_length}; truncate the bags or raise the maximum"
        )


def _check_length(name: str, length: int) -> None:
    if isinstance(length, bool) or not isinstance(length, int) or length <= 0:
        raise ValueError(f"max_feature_length of {name!r} must be a positive int, got {length!r}")


def init_position_weights(
    module: nn.Module, max_feature_lengths: Mapping[str, int], device: torch.device | str | None
) -> None:
    """Give `module` `max_feature_lengths` (a dict) and `position_weights`, one `(max_length,)`
    Parameter per feature (each length checked), then call its `reset_parameters()`."""
    for name, length in max_feature_lengths.items():
        _check_length(name, length)
    weights = {
        k: nn.Parameter(torch.empty(n, device=device)) for k, n in max_feature_lengths.items()
    }
    setattr(module, "max_feature_lengths", dict(max_feature_lengths))  # noqa: B010  # any module
    module.position_weights = nn.ParameterDict(weights)
    module.reset_parameters()  # type: ignore[operator]  # both users define it


class FeatureProcessor(TorchScriptable, nn.Module):
    """Base of per-feature processors: `forward(JaggedTensor) -> JaggedTensor` with weights
    (TorchRec's `torchrec.modules.feature_processor_.FeatureProcessor`)."""


class FeatureProcessorsCollection(TorchScriptable, nn.Module):
    """Base of processors of a whole KJT: `forward(KJT) -> KJT` with weights (TorchRec's
    `FeatureProcessorsCollection`)."""


class PositionWeightedModule(FeatureProcessor):
    """Weights one feature's ids by their position in the bag (TorchRec's module of this name).

    forward(JaggedTensor) -> the same ids and lengths with `weights` `(N,)` = `position_weight`
    gathered at each id's position. `ValueError` for a bag longer than `max_feature_length`.
    State: `position_weight`.
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

    def forward(self, features: JaggedTensor) -> JaggedTensor:
        # Nested ifs: TorchScript drops only the body of `if not is_scripting()`.
        if not torch._jit_internal.is_scripting():  # noqa: SIM102
            if not traced_input(features):
                _check_max_length(features.lengths(), self.max_feature_length, None)
        values = features.values()
        offsets = features.offsets()
        pos = _positions(offsets, values.numel())
        return JaggedTensor(
            values=values,
            weights=self.position_weight.index_select(0, pos),
            lengths=features.lengths(),
            offsets=offsets,
        )


class _PositionWeightsDict(nn.Module):
    """`position_weights` (a ParameterDict) mirrored into the plain dict `position_weights_dict`
    (TorchScript cannot index a ParameterDict by a variable key), kept in step across
    `reset_parameters()`, `.to()` and `load_state_dict(assign=True)` (`_resync`)."""

    position_weights_dict: dict[str, torch.Tensor]
    if TYPE_CHECKING:  # for mypy only: torch.jit.script would read class annotations
        position_weights: nn.ParameterDict

    def _sync_dict(self) -> None:
        self.position_weights_dict = dict(self.position_weights.items())

    def reset_parameters(self) -> None:
        with torch.no_grad():
            for p in self.position_weights.values():
                p.fill_(1.0)
        self._sync_dict()

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> nn.Module:
        result: nn.Module = super()._apply(fn, recurse)  # type: ignore[no-untyped-call]  # untyped in torch
        self._sync_dict()
        return result


class PositionWeightedModuleCollection(FeatureProcessorsCollection, _PositionWeightsDict):
    """Position weights for several features of a KJT at once (TorchRec's module of this name).

    forward(KJT) -> the same KJT with `weights` set; features without a maximum length get
    weight 1. State: `position_weights.<feature>` `(max_length,)`; `position_weights_dict` is
    a plain dict of the same Parameters (TorchRec's attribute; kept in step across `.to()` and
    `load_state_dict(assign=True)`).
    """

    position_weights_dict: dict[str, torch.Tensor]
    if TYPE_CHECKING:  # for mypy only: torch.jit.script would read class annotations
        max_feature_lengths: dict[str, int]
        position_weights: nn.ParameterDict

    def __init__(
        self, max_feature_lengths: Mapping[str, int], device: torch.device | str | None = None
    ) -> None:
        super().__init__()
        init_position_weights(self, max_feature_lengths, device)
        self.register_load_state_dict_post_hook(_resync)  # type: ignore[no-untyped-call]  # untyped in torch

    def forward(self, features: KeyedJaggedTensor) -> KeyedJaggedTensor:
        # Nested ifs: TorchScript drops only the body of `if not is_scripting()`.
        if not torch._jit_internal.is_scripting():  # noqa: SIM102
            if not traced_input(features):
                self._check(features)
        values = features.values()
        offsets = features.offsets()
        pos = _positions(offsets, values.numel())
        return KeyedJaggedTensor(
            keys=features.keys(),
            values=values,
            weights=_position_weights(pos, features, self.position_weights_dict),
            lengths=features.lengths(),
            offsets=offsets,
            stride=features.stride(),
            length_per_key=features.length_per_key(),
        )

    @torch.jit.unused
    def _check(self, features: KeyedJaggedTensor) -> None:
        keys = features.keys()
        batch = features.stride()
        lengths = features.lengths()
        for k, key in enumerate(keys):
            if key in self.max_feature_lengths:
                rows = lengths[k * batch : (k + 1) * batch]
                _check_max_length(rows, self.max_feature_lengths[key], key)


def _resync(module: nn.Module, incompatible_keys: object) -> None:
    """After `load_state_dict` (which may assign new Parameters): refresh the plain dict."""
    assert isinstance(module, _PositionWeightsDict)
    module._sync_dict()


class BaseGroupedFeatureProcessor(TorchScriptable, nn.Module):
    """Base of processors of a whole KJT, `forward(KJT) -> KJT` (TorchRec's
    `torchrec.modules.feature_processor.BaseGroupedFeatureProcessor`)."""


class PositionWeightedProcessor(BaseGroupedFeatureProcessor, _PositionWeightsDict):
    """Position weights for the features of a KJT, keeping only those features (TorchRec's
    `torchrec.modules.feature_processor.PositionWeightedProcessor`).

    forward(KJT) -> a KJT whose weights are each id's `position_weights[feature]` at its
    position in the bag:
    - every key has a maximum length: the same keys, values, lengths and (variable) batch;
    - some keys have one: only those keys (a new KJT, in input order);
    - none has: the input itself.
    A KJT that already carries weights holds the positions in them (row-wise sharding sends
    them so), which are used instead of positions in the bag. Eagerly, a bag longer than its
    feature's maximum raises `ValueError` (TorchRec: an index error). State:
    `position_weights.<feature>` `(max_length,)`, initialized to 1; no buffers.
    """

    position_weights_dict: dict[str, torch.Tensor]
    if TYPE_CHECKING:  # for mypy only: torch.jit.script would read class annotations
        max_feature_lengths: dict[str, int]
        position_weights: nn.ParameterDict

    def __init__(
        self, max_feature_lengths: Mapping[str, int], device: torch.device | str | None = None
    ) -> None:
        super().__init__()
        init_position_weights(self, max_feature_lengths, device)
        self.register_load_state_dict_post_hook(_resync)  # type: ignore[no-untyped-call]  # untyped in torch

    def forward(self, features: KeyedJaggedTensor) -> KeyedJaggedTensor:
        # Nested ifs: TorchScript drops only the body of `if not is_scripting()`.
        if not torch._jit_internal.is_scripting():
            if traced_input(features):
                return self._traced(features)
            self._check(features)
        keys = features.keys()
        picked: list[int] = []
        for k, key in enumerate(keys):
            if key in self.max_feature_lengths:
                picked.append(k)
        if len(picked) == 0:
            return features
        values = features.values()
        given = features.weights_or_none()
        if given is None:
            positions = _positions(features.offsets(), values.numel())
        else:
            positions = given.long()  # row-wise sharding: the positions, sent as weights
        length_per_key = features.length_per_key()
        per_key = torch.split(positions, length_per_key)
        weights: list[torch.Tensor] = []
        for k in picked:
            weights.append(self.position_weights_dict[keys[k]].index_select(0, per_key[k]))
        spkpr = features.stride_per_key_per_rank()
        vbe = features.variable_stride_per_key()
        if len(picked) == len(keys):
            return KeyedJaggedTensor(
                keys=keys,
                values=values,
                weights=torch.cat(weights),
                lengths=features.lengths(),
                offsets=features.offsets(),
                stride=features.stride(),
                stride_per_key_per_rank=spkpr if vbe else None,
                length_per_key=length_per_key,
                offset_per_key=features.offset_per_key(),
            )
        values_per_key = torch.split(values, length_per_key)
        lengths_per_key = torch.split(features.lengths(), features.stride_per_key())
        return KeyedJaggedTensor.from_lengths_sync(
            keys=[keys[k] for k in picked],
            values=torch.cat([values_per_key[k] for k in picked]),
            lengths=torch.cat([lengths_per_key[k] for k in picked]),
            weights=torch.cat(weights),
            stride_per_key_per_rank=[spkpr[k] for k in picked] if vbe else None,
        )

    @torch.jit.unused
    def _check(self, features: KeyedJaggedTensor) -> None:
        bags = torch.split(features.lengths(), features.stride_per_key())
        for key, lengths in zip(features.keys(), bags, strict=True):
            if key in self.max_feature_lengths:
                _check_max_length(lengths, self.max_feature_lengths[key], key)

    @torch.jit.unused
    def _traced(self, features: KeyedJaggedTensor) -> KeyedJaggedTensor:
        """Under torch.fx the keys are not known: as TorchRec's graph, every feature with a
        maximum length is read from the input (they must all be there) and the result holds
        exactly those."""
        jts = features.to_dict()
        names = list(self.max_feature_lengths)
        values: list[torch.Tensor] = []
        lengths: list[torch.Tensor] = []
        weights: list[torch.Tensor] = []
        for name in names:
            jt = jts[name]
            pos = _positions(jt.offsets(), jt.values().numel())
            values.append(jt.values())
            lengths.append(jt.lengths())
            weights.append(self.position_weights_dict[name].index_select(0, pos))
        return KeyedJaggedTensor.from_lengths_sync(
            keys=names,
            values=torch.cat(values),
            lengths=torch.cat(lengths),
            weights=torch.cat(weights),
        )

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """None (TorchRec's: the plain dict's tensors are never buffers)."""
        yield from ()


class FeatureProcessorDictWrapper(FeatureProcessorsCollection):
    """`{feature: FeatureProcessor}` applied to a KJT: features without a processor get
    weight 1 (what `FeatureProcessedEmbeddingBagCollection.split()` returns for a dict)."""

    def __init__(self, feature_processors: nn.ModuleDict) -> None:
        super().__init__()
        self._feature_processors = feature_processors

    def forward(self, features: KeyedJaggedTensor) -> KeyedJaggedTensor:
        jts = features.to_dict()
        weights: list[torch.Tensor] = []
        for key in features.keys():  # noqa: SIM118  # a KJT, not a dict
            jt = jts[key]
            if key in self._feature_processors:
                weights.append(self._feature_processors[key](jt).weights())
            else:
                weights.append(torch.ones(jt.values().numel(), device=jt.values().device))
        return KeyedJaggedTensor(
            keys=features.keys(),
            values=features.values(),
            weights=torch.cat(weights) if weights else torch.ones(0),
            lengths=features.lengths(),
            stride=features.stride(),
        )


class FeatureProcessedEmbeddingBagCollection(TorchScriptable, nn.Module):
    """A weighted `EmbeddingBagCollection` fed by feature processors (TorchRec's module).

    Args:
        embedding_bag_collection: must be built with `is_weighted=True`.
        feature_processors: `{feature: PositionWeightedModule}` covering exactly the features
            the tables read, or one `FeatureProcessorsCollection`.
    forward(KJT without weights; extra features ignored) -> the EBC's `KeyedTensor`; gradients
    reach the position weights as well as the tables. `split()` returns the two halves.
    """

    def __init__(
        self,
        embedding_bag_collection: EmbeddingBagCollection,
        feature_processors: Mapping[str, FeatureProcessor] | FeatureProcessorsCollection,
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
        if isinstance(feature_processors, FeatureProcessorsCollection):
            self._feature_processors = feature_processors
        else:
            if set(feature_processors) != set(features):
                raise ValueError(
                    f"feature_processors cover {sorted(feature_processors)} but the tables read "
                    f"{sorted(features)}; give exactly one processor per feature"
                )
            # In the tables' feature order: the scripted forward walks it with .items().
            self._feature_processors = nn.ModuleDict({f: feature_processors[f] for f in features})

    def is_weighted(self) -> bool:
        return True

    def split(self) -> tuple[FeatureProcessorsCollection, EmbeddingBagCollection]:
        """`(processors as a KJT -> KJT module, the EBC)`: applied in turn they give forward."""
        processors = self._feature_processors
        if isinstance(processors, nn.ModuleDict):
            return FeatureProcessorDictWrapper(processors), self._embedding_bag_collection
        assert isinstance(processors, FeatureProcessorsCollection)
        return processors, self._embedding_bag_collection

    def forward(self, features: KeyedJaggedTensor) -> KeyedTensor:
        # Nested ifs: TorchScript drops only the body of `if not is_scripting()`.
        if not torch._jit_internal.is_scripting():  # noqa: SIM102
            if not traced_input(features):
                self._check(features)
        processors = self._feature_processors
        if isinstance(processors, FeatureProcessorsCollection):
            processed_kjt = processors(features)
        else:
            jts = features.to_dict()
            values: list[torch.Tensor] = []
            lengths: list[torch.Tensor] = []
            weights: list[torch.Tensor] = []
            for name, processor in processors.items():  # type: ignore[operator]  # a ModuleDict here
                jt: JaggedTensor = processor(jts[name])
                values.append(jt.values())
                lengths.append(jt.lengths())
                weights.append(jt.weights())
            processed_kjt = KeyedJaggedTensor(
                keys=self._feature_names,
                values=torch.cat(values),
                weights=torch.cat(weights),
                lengths=torch.cat(lengths),
                stride=features.stride(),
            )
        out: KeyedTensor = self._embedding_bag_collection(processed_kjt)
        return out

    @torch.jit.unused
    def _check(self, features: KeyedJaggedTensor) -> None:
        if isinstance(self._feature_processors, FeatureProcessorsCollection):
            return
        keys = set(features.keys())
        missing = [f for f in self._feature_names if f not in keys]
        if missing:
            raise ValueError(
                f"the KeyedJaggedTensor lacks feature(s) {missing}; it has keys {features.keys()}"
            )
