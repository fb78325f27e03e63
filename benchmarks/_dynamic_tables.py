"""The table configs of the raw-id benchmarks (benchmarks/dynamic.py, dynamic_sharded.py).

`tables` tables `t<i>`, each read by feature `f<i>`, `capacity` rows of `dim` columns; raw-id
(dynamic, LRU eviction) or static. Imported by both scripts from their folder (they run as
scripts: the folder is on `sys.path`, in their spawned rank processes too).
"""

from __future__ import annotations

from shardrec_embedding.configs import EmbeddingBagConfig
from shardrec_embedding.dynamic import DynamicTableConfig, EvictionPolicy


def table_configs(tables: int, capacity: int, dim: int, dynamic: bool) -> list[EmbeddingBagConfig]:
    """`tables` tables t<i> <- feature f<i>; `dynamic`: raw-id tables with LRU eviction."""
    cfg = DynamicTableConfig(eviction=EvictionPolicy.LRU) if dynamic else None
    return [
        EmbeddingBagConfig(
            name=f"t{i}",
            num_embeddings=capacity,
            embedding_dim=dim,
            feature_names=[f"f{i}"],
            dynamic=cfg,
        )
        for i in range(tables)
    ]
