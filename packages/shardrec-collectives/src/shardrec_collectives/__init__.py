"""Awaitables, ShardingEnv and differentiable collectives for sharded embeddings."""

__all__: list[str] = []
