"""The sharding scenario suite on 3 and 4 gloo ranks (worlds 1 and 2 run in the package tests).

The scenarios are data in the shardrec-sharding package tests; this file loads those modules
from their files and runs the same rank functions on the larger worlds: every sharding type x
SUM/MEAN x weighted x uneven tables x empty bags x batch size per rank x variable batch per
feature (forward equals the unsharded module), fused training with several optimizers against
a single-process fused module, and the sharded EmbeddingCollection.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

TESTS = Path(__file__).resolve().parents[1] / "packages" / "shardrec-sharding" / "tests"
# The loaded modules import their folder's helpers (_sharding_placements), as in their conftest.
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


def _load(name: str) -> ModuleType:
    module_name = f"shardrec_sharding_scenarios_{name}"
    found = sys.modules.get(module_name)
    if found is not None:
        return found
    spec = importlib.util.spec_from_file_location(module_name, TESTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # the rank pool finds functions by module name and file
    spec.loader.exec_module(module)
    return module


forward = _load("test_forward")
training = _load("test_training")
sequence = _load("test_sequence")


@pytest.mark.parametrize("world", [3, 4])
def test_forward_scenarios(pool_factory, world):  # type: ignore[no-untyped-def]
    done = pool_factory(world).run(forward.forward_cases, forward.CASES)
    assert done == [len(forward.CASES)] * world
    done = pool_factory(world).run(forward.variable_batch_cases, forward.VBE_CASES)
    assert done == [len(forward.VBE_CASES)] * world


@pytest.mark.parametrize("world", [3, 4])
def test_fused_training_scenarios(pool_factory, world):  # type: ignore[no-untyped-def]
    per_rank = pool_factory(world).run(training.train_sharded, training.CASES)
    for c, case in enumerate(training.CASES):
        expected = training.reference_tables(case, world)
        for name, full in expected.items():
            got = torch.full_like(full, float("nan"))
            for rank_result in per_rank:
                for (r0, c0), (nr, nc), tensor in rank_result[c][name]:
                    got[r0 : r0 + nr, c0 : c0 + nc] = tensor
            assert not torch.isnan(got).any(), (str(case), name)
            torch.testing.assert_close(got, full, rtol=1.3e-4, atol=1e-4, msg=f"{case} {name}")


@pytest.mark.parametrize("world", [3, 4])
def test_embedding_collection_scenarios(pool_factory, world):  # type: ignore[no-untyped-def]
    sequence.test_sharded_embedding_collection(pool_factory, world)
