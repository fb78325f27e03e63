"""Awaitables, ShardingEnv and differentiable collectives for sharded embeddings."""

from shardrec_collectives.awaitable import Awaitable, LazyAwaitable, NoWait
from shardrec_collectives.env import ShardingEnv
from shardrec_collectives.errors import PeerError, agree_on_error
from shardrec_collectives.gather import all_gather_pooled
from shardrec_collectives.kjt_all_to_all import (
    KeySelection,
    KJTAllToAllAwaitable,
    KJTAllToAllLayout,
    kjt_all_to_all,
)
from shardrec_collectives.misc import (
    HostGroups,
    all_gather_object,
    all_reduce_sum,
    barrier,
    broadcast_,
    split_by_host,
    timed_all_to_all,
)
from shardrec_collectives.pooled import pooled_all_to_all, variable_batch_pooled_all_to_all
from shardrec_collectives.reduce_scatter import (
    reduce_scatter_pooled,
    variable_batch_reduce_scatter_pooled,
)
from shardrec_collectives.sequence import sequence_all_to_all

__all__ = [
    "Awaitable",
    "HostGroups",
    "KJTAllToAllAwaitable",
    "KJTAllToAllLayout",
    "KeySelection",
    "LazyAwaitable",
    "NoWait",
    "PeerError",
    "ShardingEnv",
    "agree_on_error",
    "all_gather_object",
    "all_gather_pooled",
    "all_reduce_sum",
    "barrier",
    "broadcast_",
    "kjt_all_to_all",
    "pooled_all_to_all",
    "reduce_scatter_pooled",
    "sequence_all_to_all",
    "split_by_host",
    "timed_all_to_all",
    "variable_batch_pooled_all_to_all",
    "variable_batch_reduce_scatter_pooled",
]
