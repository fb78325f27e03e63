"""The plan for a whole model: module path -> table name -> ParameterSharding.

A plan is plain data: it prints as readable tables and round-trips through JSON, which is what a
production job saves and reuses instead of planning again.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

from shardrec_planner.parameter_sharding import ParameterSharding
from shardrec_planner.stats import PlanStats

JSON_FORMAT = "shardrec-plan/1"

EmbeddingModuleShardingPlan = dict[str, ParameterSharding]
"""One module's plan: table name -> ParameterSharding."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShardingPlan:
    """The plan of every sharded module of a model, keyed by module path (`""` is the root).

    `stats` holds the planner's estimates (per-rank memory and cost, per-table reasons); it is None
    for a hand-written plan, and equality ignores it.
    """

    # positional too: TorchRec's users write ShardingPlan({path: module_plan})
    plan: dict[str, EmbeddingModuleShardingPlan] = dataclasses.field(kw_only=False)
    # Not part of a plan's identity: two plans placing every shard alike are equal, whatever
    # the planner estimated or how long it took.
    stats: PlanStats | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        for path, tables in self.plan.items():
            for name, sharding in tables.items():
                if not isinstance(sharding, ParameterSharding):
                    raise TypeError(
                        f"plan[{path!r}][{name!r}] must be a ParameterSharding, "
                        f"got {type(sharding).__name__}"
                    )

    def get_plan_for_module(self, module_path: str) -> EmbeddingModuleShardingPlan | None:
        """The plan of the module at `module_path`, or None if it is not sharded."""
        return self.plan.get(module_path)

    def to_json(self, *, indent: int | None = 1) -> str:
        """The plan (and its stats) as JSON text; `ShardingPlan.from_json` reads it back."""
        payload: dict[str, object] = {
            "format": JSON_FORMAT,
            "plan": {
                path: {name: ps.to_dict() for name, ps in tables.items()}
                for path, tables in self.plan.items()
            },
            "stats": None if self.stats is None else self.stats.to_dict(),
        }
        return json.dumps(payload, indent=indent)

    @staticmethod
    def from_json(text: str) -> ShardingPlan:
        """Read a plan written by `to_json`."""
        data = json.loads(text)
        if not isinstance(data, Mapping) or data.get("format") != JSON_FORMAT:
            found = data.get("format") if isinstance(data, Mapping) else type(data).__name__
            raise ValueError(f"not a shardrec plan: expected format {JSON_FORMAT!r}, got {found!r}")
        plan = {
            str(path): {
                str(name): ParameterSharding.from_dict(dict(entry))
                for name, entry in dict(tables).items()
            }
            for path, tables in dict(data["plan"]).items()
        }
        stats = data.get("stats")
        return ShardingPlan(plan=plan, stats=None if stats is None else PlanStats.from_dict(stats))

    def report(self) -> str:
        """Readable report: the per-rank table, the per-table decisions and the lower bound."""
        from shardrec_planner.report import format_report

        return format_report(self)

    def __str__(self) -> str:
        from shardrec_planner.report import format_plan

        return format_plan(self)
