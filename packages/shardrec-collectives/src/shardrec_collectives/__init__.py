"""Awaitables, ShardingEnv and differentiable collectives for sharded embeddings."""

from shardrec_collectives import dist_data
from shardrec_collectives.attempt import agree_on_attempt
from shardrec_collectives.awaitable import (
    Awaitable,
    GetItemLazyAwaitable,
    LazyAwaitable,
    LazyGetItemMixin,
    LazyNoWait,
    NoWait,
)
from shardrec_collectives.comm import (
    get_group_rank,
    get_local_rank,
    get_local_size,
    get_num_groups,
    intra_and_cross_node_pg,
)
from shardrec_collectives.dist_data import *  # noqa: F403
from shardrec_collectives.dist_data_vb import (
    VariableBatchPooledEmbeddingsAllToAll,
    VariableBatchPooledEmbeddingsReduceScatter,
)
from shardrec_collectives.env import ShardingEnv
from shardrec_collectives.errors import PeerError, agree_on_error
from shardrec_collectives.gather import all_gather_pooled
from shardrec_collectives.ids import all_gather_ids, all_to_all_ids, return_ids
from shardrec_collectives.kjt_all_to_all import (
    ExchangeCapacity,
    KeySelection,
    KJTAllToAllAwaitable,
    KJTAllToAllLayout,
    kjt_all_to_all,
)
from shardrec_collectives.misc import (
    HostGroups,
    all_gather_ints,
    all_gather_object,
    all_reduce_sum,
    barrier,
    broadcast_,
    split_by_host,
    timed_all_to_all,
)
from shardrec_collectives.pooled import (
    pooled_all_to_all,
    pooled_all_to_all_flat,
    variable_batch_pooled_all_to_all,
)
from shardrec_collectives.reduce_scatter import (
    reduce_scatter_pooled,
    variable_batch_reduce_scatter_pooled,
)
from shardrec_collectives.sequence import sequence_all_to_all, sequence_all_to_all_by_counts
from shardrec_collectives.watchdog import EXIT_STATUS, Watchdog

__all__ = [
    "EXIT_STATUS",
    "Awaitable",
    "ExchangeCapacity",
    "GetItemLazyAwaitable",
    "HostGroups",
    "KJTAllToAllAwaitable",
    "KJTAllToAllLayout",
    "KeySelection",
    "LazyAwaitable",
    "LazyGetItemMixin",
    "LazyNoWait",
    "NoWait",
    "PeerError",
    "ShardingEnv",
    "VariableBatchPooledEmbeddingsAllToAll",
    "VariableBatchPooledEmbeddingsReduceScatter",
    "Watchdog",
    "agree_on_attempt",
    "agree_on_error",
    "all_gather_ids",
    "all_gather_ints",
    "all_gather_object",
    "all_gather_pooled",
    "all_reduce_sum",
    "all_to_all_ids",
    "barrier",
    "broadcast_",
    "get_group_rank",
    "get_local_rank",
    "get_local_size",
    "get_num_groups",
    "intra_and_cross_node_pg",
    "kjt_all_to_all",
    "pooled_all_to_all",
    "pooled_all_to_all_flat",
    "reduce_scatter_pooled",
    "return_ids",
    "sequence_all_to_all",
    "sequence_all_to_all_by_counts",
    "split_by_host",
    "timed_all_to_all",
    "variable_batch_pooled_all_to_all",
    "variable_batch_reduce_scatter_pooled",
]
# The communication modules, listed once in their own module.
__all__ += dist_data.__all__
