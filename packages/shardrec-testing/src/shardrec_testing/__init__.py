"""Test helpers for shardrec: spawned rank pools, free ports, seeded inputs, tolerances."""

from shardrec_testing._ports import free_port
from shardrec_testing._ports import free_port as get_free_port  # TorchRec's name
from shardrec_testing.artifacts import assert_scripted_reloads_without_shardrec, load_sibling_module
from shardrec_testing.context import RankContext
from shardrec_testing.multi_process import MultiProcessContext, MultiProcessTestBase
from shardrec_testing.pool import (
    RankError,
    RankPool,
    RankTimeoutError,
    RemoteTraceback,
    close_shared_pools,
    shared_pool,
)
from shardrec_testing.reference import bce_step_per_rank
from shardrec_testing.sanitizers import sanitizer_active, skip_if_asan, skip_if_asan_class
from shardrec_testing.seeding import (
    random_lengths,
    seed_and_log,
    seed_everything,
    seed_from,
    seeded_generator,
)
from shardrec_testing.tolerance import assert_close, tolerance

__all__ = [
    "MultiProcessContext",
    "MultiProcessTestBase",
    "RankContext",
    "RankError",
    "RankPool",
    "RankTimeoutError",
    "RemoteTraceback",
    "assert_close",
    "assert_scripted_reloads_without_shardrec",
    "bce_step_per_rank",
    "close_shared_pools",
    "free_port",
    "get_free_port",
    "load_sibling_module",
    "random_lengths",
    "sanitizer_active",
    "seed_and_log",
    "seed_everything",
    "seed_from",
    "seeded_generator",
    "shared_pool",
    "skip_if_asan",
    "skip_if_asan_class",
    "tolerance",
]
