"""`FusedTableSpec`: what a fused lookup needs to know about one table (or one local shard).

Deliberately smaller than `EmbeddingBagConfig`: a sharded lookup builds one spec per *local
shard* (some rows and/or columns of a table) with its own row count, width and initial weight,
without knowing about features or the global table.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from shardrec_embedding.configs import DataType, EmbeddingBagConfig, PoolingType


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class FusedTableSpec:
    """One table (or local shard) of a `BatchedFusedEmbeddingBag`.

    Args:
        name: table name; keys the optimizer state (`<name>.momentum1`) and `<name>.weight`.
        num_rows: rows held here (a row-wise shard holds a block of the table's rows).
        dim: columns held here (a column-wise shard holds some of the table's columns).
        pooling: SUM or MEAN.
        weight: initial `(num_rows, dim)` values, copied in (e.g. the local shard of a table).
        init_range: `(low, high)` of a uniform init.
        init_fn: called in place on the `(num_rows, dim)` weight.

    At most one of `weight`, `init_range`, `init_fn`; none means uniform
    `+/- sqrt(1 / num_rows)` (TorchRec's default for a whole table).
    """

    name: str
    num_rows: int
    dim: int
    pooling: PoolingType = PoolingType.SUM
    weight: torch.Tensor | None = None
    init_range: tuple[float, float] | None = None
    init_fn: Callable[[torch.Tensor], object] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "." in self.name:
            raise ValueError(f"table name {self.name!r} must be a non-empty str without '.'")
        for field in ("num_rows", "dim"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"table {self.name!r}: {field} must be an int >= 1, got {value!r}")
        try:
            pooling = PoolingType(self.pooling)
        except ValueError:
            raise ValueError(
                f"table {self.name!r}: pooling {self.pooling!r} is not SUM or MEAN"
            ) from None
        if pooling is PoolingType.NONE:
            raise ValueError(f"table {self.name!r}: fused bags need SUM or MEAN pooling, got NONE")
        object.__setattr__(self, "pooling", pooling)
        given = [f for f in ("weight", "init_range", "init_fn") if getattr(self, f) is not None]
        if len(given) > 1:
            raise ValueError(f"table {self.name!r}: give at most one of {given}")
        if self.weight is not None and tuple(self.weight.shape) != (self.num_rows, self.dim):
            raise ValueError(
                f"table {self.name!r}: weight has shape {tuple(self.weight.shape)}, "
                f"expected ({self.num_rows}, {self.dim})"
            )
        if self.init_range is not None and not self.init_range[0] <= self.init_range[1]:
            raise ValueError(f"table {self.name!r}: init_range {self.init_range} has low > high")

    @classmethod
    def from_config(cls, config: EmbeddingBagConfig) -> FusedTableSpec:
        """The spec of a whole table described by an `EmbeddingBagConfig` (FP32 only)."""
        if config.data_type is not DataType.FP32:
            raise ValueError(
                f"table {config.name!r}: fused training keeps FP32 weights, got data_type "
                f"{config.data_type.value}"
            )
        return cls(
            name=config.name,
            num_rows=config.num_embeddings,
            dim=config.embedding_dim,
            pooling=config.pooling,
            init_fn=config.init_weight_,
        )

    def init_(self, weight: torch.Tensor) -> None:
        """Fill `weight` (`(num_rows, dim)`) with this spec's initial values, in place."""
        with torch.no_grad():
            if self.weight is not None:
                weight.copy_(self.weight)
            elif self.init_fn is not None:
                self.init_fn(weight)
            else:
                low, high = self.init_range or (
                    -math.sqrt(1 / self.num_rows),
                    math.sqrt(1 / self.num_rows),
                )
                weight.uniform_(low, high)
