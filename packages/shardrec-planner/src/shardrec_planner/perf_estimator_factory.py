"""TorchRec 1.8's perf-estimator registry (`torchrec.distributed.planner.estimator`).

`EmbeddingPerfEstimatorFactory.create(name, topology=..., constraints=..., is_inference=...)`
builds the perf estimator registered under `name`; `DEFAULT_PERF_ESTIMATOR` names TorchRec's
`EmbeddingPerfEstimator` (TorchRec's formulas, `shard_perf.py`). `register(name, cls)` adds a
user's estimator class (constructed with the same keyword arguments). Our own planner's cost model
is `shardrec_planner.estimator`; it is not in this registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from shardrec_planner.constraints import ParameterConstraints
from shardrec_planner.shard_perf import EmbeddingPerfEstimator
from shardrec_planner.topology import Topology

DEFAULT_PERF_ESTIMATOR = "default"
"""The registry name of TorchRec's `EmbeddingPerfEstimator`."""


class EmbeddingPerfEstimatorFactory:
    """Name -> perf estimator class; `create` instantiates one for a topology."""

    _registry: ClassVar[dict[str, type[Any]]] = {DEFAULT_PERF_ESTIMATOR: EmbeddingPerfEstimator}

    @classmethod
    def register(cls, name: str, estimator_class: type[Any]) -> None:
        """Make `estimator_class` available as `name` (replacing a class registered before)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"estimator name must be a non-empty str, got {name!r}")
        if not callable(getattr(estimator_class, "estimate", None)):
            raise TypeError(
                f"{estimator_class!r} has no estimate() method; a perf estimator sets the shards' "
                "perf in estimate(sharding_options, sharder_map)"
            )
        cls._registry[name] = estimator_class

    @classmethod
    def names(cls) -> list[str]:
        """The registered names."""
        return sorted(cls._registry)

    @classmethod
    def create(
        cls,
        name: str = DEFAULT_PERF_ESTIMATOR,
        *,
        topology: Topology,
        constraints: Mapping[str, ParameterConstraints] | None = None,
        is_inference: bool = False,
        **kwargs: Any,
    ) -> Any:
        """A new estimator of the class registered as `name`."""
        if name not in cls._registry:
            raise ValueError(
                f"no perf estimator registered as {name!r}; registered: {cls.names()} "
                "(add one with EmbeddingPerfEstimatorFactory.register)"
            )
        return cls._registry[name](
            topology=topology, constraints=constraints, is_inference=is_inference, **kwargs
        )
