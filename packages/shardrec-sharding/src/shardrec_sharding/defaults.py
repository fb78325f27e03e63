"""The sharders shardrec offers by default, and TorchRec's `apply_to_all` plan helper
(TorchRec path `torchrec.distributed.sharding_plan`)."""

from __future__ import annotations

from torch import nn

from shardrec_embedding import FusedEmbeddingBagCollection
from shardrec_planner import ParameterShardingGenerator, PlannerSharder
from shardrec_sharding.embedding import EmbeddingCollectionSharder
from shardrec_sharding.embeddingbag import EmbeddingBagCollectionSharder
from shardrec_sharding.quant import (
    QuantEmbeddingBagCollectionSharder,
    QuantEmbeddingCollectionSharder,
)

__all__ = ["apply_to_all", "get_default_sharders", "get_module_to_default_sharders"]


def get_default_sharders() -> list[PlannerSharder]:
    """One new sharder per module type shardrec shards: EmbeddingBagCollection (also fused),
    EmbeddingCollection and their quantized forms."""
    return [
        EmbeddingBagCollectionSharder(),
        EmbeddingCollectionSharder(),
        QuantEmbeddingBagCollectionSharder(),
        QuantEmbeddingCollectionSharder(),
    ]


def get_module_to_default_sharders() -> dict[type[nn.Module], PlannerSharder]:
    """Module type -> its default sharder (`FusedEmbeddingBagCollection` shares the EBC's)."""
    out = {s.module_type: s for s in get_default_sharders()}
    out[FusedEmbeddingBagCollection] = out[EmbeddingBagCollectionSharder().module_type]
    return out


def apply_to_all(
    module: nn.Module,
    parameter_sharding_generator: ParameterShardingGenerator,
    sharder: PlannerSharder | None = None,
) -> dict[str, ParameterShardingGenerator]:
    """`{table: parameter_sharding_generator}` for every table of `module`, the
    `per_param_sharding` argument of `construct_module_sharding_plan`.

    `sharder` defaults to the module type's default sharder; a sharder for another module type
    raises `TypeError`, a module type without one `ValueError`.
    """
    if sharder is None:
        sharder = get_module_to_default_sharders().get(type(module))
        if sharder is None:
            known = sorted(t.__name__ for t in get_module_to_default_sharders())
            raise ValueError(
                f"no default sharder for {type(module).__name__} (default sharders handle "
                f"{known}); pass sharder=..."
            )
    elif not isinstance(module, sharder.module_type):
        raise TypeError(
            f"{type(sharder).__name__} shards {sharder.module_type.__name__}, not "
            f"{type(module).__name__}"
        )
    return dict.fromkeys(sharder.shardable_parameters(module), parameter_sharding_generator)
