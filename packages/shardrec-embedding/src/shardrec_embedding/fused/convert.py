"""`fuse_embedding_optimizer`: swap a model's EmbeddingBagCollections for fused ones."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from shardrec_embedding.embedding_bag_collection import EmbeddingBagCollection
from shardrec_embedding.embedding_collection import EmbeddingCollection
from shardrec_embedding.fused.collection import FusedEmbeddingBagCollection, OptimizerType

__all__ = ["fuse_embedding_optimizer"]


def fuse_embedding_optimizer(
    model: nn.Module,
    optimizer_type: OptimizerType,
    optimizer_kwargs: Mapping[str, object],
    device: torch.device | str | None,
    location: object = None,
) -> nn.Module:
    """TorchRec's function: replace (in place) every `EmbeddingBagCollection` of `model` with a
    `FusedEmbeddingBagCollection` holding the same tables and weights, trained by
    `optimizer_type(**optimizer_kwargs)` in backward; returns `model` (the new module when
    `model` is itself a collection). State-dict, parameter and module names stay those of the
    float model. `location` (TorchRec's fbgemm `EmbeddingLocation`) must be None: tables live
    on `device`. An `EmbeddingCollection` raises `ValueError`: there is no fused unpooled
    collection (train it with `apply_optimizer_in_backward` or a dense optimizer).
    """
    if location is not None:
        raise ValueError(
            f"fuse_embedding_optimizer: location={location!r} is fbgemm's UVM placement, which "
            "shardrec does not have; leave it None (tables live on `device`)"
        )
    return _fuse(model, optimizer_type, optimizer_kwargs, device, "")


def _fuse(
    module: nn.Module,
    optimizer_type: OptimizerType,
    optimizer_kwargs: Mapping[str, object],
    device: torch.device | str | None,
    path: str,
) -> nn.Module:
    if isinstance(module, EmbeddingCollection):
        raise ValueError(
            f"fuse_embedding_optimizer: {path or 'the model'} is an EmbeddingCollection; "
            "shardrec has no fused EmbeddingCollection (use apply_optimizer_in_backward)"
        )
    if isinstance(module, EmbeddingBagCollection):
        fused = FusedEmbeddingBagCollection(
            module.embedding_bag_configs(),
            optimizer_type,
            optimizer_kwargs,
            is_weighted=module.is_weighted(),
            device=device,
            check_ids=module._check_ids,
        )
        fused.load_state_dict(module.state_dict())
        return fused
    for name, child in list(module.named_children()):
        new = _fuse(child, optimizer_type, optimizer_kwargs, device, f"{path}.{name}".lstrip("."))
        if new is not child:
            setattr(module, name, new)
    return module
