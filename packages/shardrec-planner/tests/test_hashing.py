"""Planner-context hashes: equal inputs hash equal in any process, every real change shows."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from shardrec_planner import (
    CacheAlgorithm,
    CacheParams,
    KeyValueParams,
    ParameterConstraints,
    Shard,
    ShardingType,
    Storage,
    Topology,
)
from shardrec_planner.hashing import (
    canonical,
    hash_planner_context_inputs,
    hash_planner_context_inputs_str,
    hash_sha256_to_int,
    round_to_nearest,
)

GiB = 1024**3


def _context(topology: Topology, shards: list[Shard] | None = None) -> dict[str, object]:
    option = SimpleNamespace(
        fqn="ebc.t0",
        sharding_type="table_wise",
        compute_kernel="fused",
        shards=shards or [],
        cache_params=None,
    )
    return {
        "topology": topology,
        "batch_size": 128,
        "enumerator": SimpleNamespace(last_stored_search_space=[option]),
        "storage_reservation": SimpleNamespace(last_reserved_topology=copy.deepcopy(topology)),
    }


def test_hash_is_sha256_of_the_canonical_form() -> None:
    values = [1, "a", ShardingType.ROW_WISE, CacheAlgorithm.LFU, (2.5, None), {"b": 1, "a": [True]}]
    want = "(1, 'a', 'row_wise', 'CacheAlgorithm.LFU', (2.5, None), (('a', (True,)), ('b', 1)))"
    assert repr(canonical(values)) == want
    assert hash_sha256_to_int(values) == int(hashlib.sha256(want.encode()).hexdigest(), 16)


def test_round_to_nearest() -> None:
    assert [round_to_nearest(x, 100) for x in (0, 49, 51, 150, 249)] == [0, 0, 100, 200, 200]
    with pytest.raises(ValueError, match="unit must be > 0"):
        round_to_nearest(5, 0)


def test_context_hash_ignores_memory_noise_and_sees_machine_classes() -> None:
    base = Topology(
        world_size=8, local_world_size=2, hbm_cap=191_503_138_816, ddr_cap=304_243_365_376
    )
    noisy = dataclasses.replace(base, ddr_cap=base.ddr_cap - 9_472_512)  # type: ignore[operator]
    other = dataclasses.replace(base, ddr_cap=512 * GiB)
    h = hash_planner_context_inputs(constraints=None, **_context(base))  # type: ignore[arg-type]
    assert h == hash_planner_context_inputs(constraints=None, **_context(noisy))  # type: ignore[arg-type]
    assert h != hash_planner_context_inputs(constraints=None, **_context(other))  # type: ignore[arg-type]
    # Topology._hash keeps exact values
    assert base._hash() != noisy._hash()
    assert base._hash() == dataclasses.replace(base)._hash()
    assert base._hash() != dataclasses.replace(base, world_size=16)._hash()


def test_context_hash_sees_each_input() -> None:
    topo = Topology(world_size=2, hbm_cap=GiB)
    ctx = _context(topo, [Shard(size=[10, 4], offset=[0, 0], storage=Storage(hbm=160, ddr=0))])
    base = hash_planner_context_inputs_str(constraints=None, **ctx)  # type: ignore[arg-type]
    cache = CacheParams(algorithm=CacheAlgorithm.LRU, load_factor=0.5)
    with_cons = {"t0": ParameterConstraints(sharding_types=["table_wise"], cache_params=cache)}
    changed = [
        {**ctx, "batch_size": 256},
        {**ctx, "topology": Topology(world_size=4, hbm_cap=GiB)},
        _context(topo, [Shard(size=[10, 4], offset=[0, 0], storage=Storage(hbm=161, ddr=0))]),
    ]
    hashes = {base}
    for c in changed:
        hashes.add(hash_planner_context_inputs_str(constraints=None, **c))  # type: ignore[arg-type]
    hashes.add(hash_planner_context_inputs_str(constraints=with_cons, **ctx))  # type: ignore[arg-type]
    assert len(hashes) == 5


def test_context_hash_needs_an_enumerated_space_and_a_reservation() -> None:
    ctx = _context(Topology(world_size=2))
    ctx["enumerator"] = SimpleNamespace(last_stored_search_space=None)
    with pytest.raises(ValueError, match=r"no stored search space; call enumerator.enumerate"):
        hash_planner_context_inputs(constraints=None, **ctx)  # type: ignore[arg-type]
    ctx = _context(Topology(world_size=2))
    ctx["storage_reservation"] = SimpleNamespace(last_reserved_topology=None)
    with pytest.raises(AssertionError, match=r"no reserved topology"):  # also a ValueError
        hash_planner_context_inputs(constraints=None, **ctx)  # type: ignore[arg-type]


def test_constraint_hash_follows_its_fields() -> None:
    kv = KeyValueParams(ssd_storage_directory="/tmp/a")
    c = ParameterConstraints(
        sharding_types=["row_wise"], pooling_factors=[2.0], key_value_params=kv
    )
    same = copy.deepcopy(c)
    assert hash(c) == hash(same) and c == same
    # "row_wise" and ShardingType.ROW_WISE are the same constraint
    assert hash(c) == hash(dataclasses.replace(c, sharding_types=[ShardingType.ROW_WISE]))
    same.enforce_hbm = True
    assert hash(c) != hash(same)
    with pytest.raises(ValueError, match="equal lengths"):
        same.num_poolings = [1.0, 1.0]
    with pytest.raises(TypeError, match="cache_params must be a CacheParams"):
        same.cache_params = "lru"  # type: ignore[assignment]
    same = dataclasses.replace(same, pooling_factors=[1.0, 1.0], num_poolings=[1.0, 1.0])
    assert same.num_poolings == (1.0, 1.0)


def test_hashes_agree_across_processes() -> None:
    # Python salts str hashes per process: a hash built on hash() would differ here.
    code = textwrap.dedent(
        """
        from shardrec_planner import ParameterConstraints, Topology
        c = ParameterConstraints(sharding_types=["table_wise"], feature_names=["f"])
        print(hash(c), Topology(world_size=2, hbm_cap=1 << 30)._hash())
        """
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    c = ParameterConstraints(sharding_types=["table_wise"], feature_names=["f"])
    assert out == [str(hash(c)), str(Topology(world_size=2, hbm_cap=1 << 30)._hash())]
