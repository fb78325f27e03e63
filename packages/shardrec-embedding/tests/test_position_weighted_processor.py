"""PositionWeightedProcessor (TorchRec's `torchrec.modules.feature_processor` class) against a
naive per-id loop: which keys come back, their ids, lengths and weights."""

from __future__ import annotations

import random

import pytest
import torch

from shardrec_embedding.feature_processors import (
    BaseGroupedFeatureProcessor,
    PositionWeightedProcessor,
)
from shardrec_jagged import KeyedJaggedTensor, Tracer

MAX = {"f1": 4, "f2": 5, "z": 2}


def _processor(seed: int) -> PositionWeightedProcessor:
    pw = PositionWeightedProcessor(MAX)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in pw.position_weights.values():
            p.copy_(torch.rand(p.shape, generator=g))
    pw._sync_dict()
    return pw


def _reference(
    pw: PositionWeightedProcessor,
    keys: list[str],
    bags: dict[str, list[list[int]]],
    positions: dict[str, list[list[int]]] | None,
) -> tuple[list[str], list[int], list[int], list[float]] | None:
    """Keys with a maximum length, in input order; weight of the id at position p of a bag:
    position_weights[key][p] (p read from `positions` when the input carried weights)."""
    picked = [k for k in keys if k in MAX]
    if not picked:
        return None
    values: list[int] = []
    lengths: list[int] = []
    weights: list[float] = []
    for k in picked:
        table = pw.position_weights[k].detach().tolist()
        for b, bag in enumerate(bags[k]):
            lengths.append(len(bag))
            for p, v in enumerate(bag):
                values.append(v)
                weights.append(table[positions[k][b][p] if positions else p])
    return picked, values, lengths, weights


def _kjt(
    keys: list[str], bags: dict[str, list[list[int]]], weights: torch.Tensor | None = None
) -> KeyedJaggedTensor:
    return KeyedJaggedTensor(
        keys=keys,
        values=torch.tensor([v for k in keys for bag in bags[k] for v in bag], dtype=torch.long),
        lengths=torch.tensor([len(bag) for k in keys for bag in bags[k]], dtype=torch.long),
        weights=weights,
        stride_per_key_per_rank=[[len(bags[k])] for k in keys]
        if len({len(bags[k]) for k in keys}) > 1
        else None,
    )


def _random_bags(
    rng: random.Random, keys: list[str], batch: list[int]
) -> dict[str, list[list[int]]]:
    return {
        k: [
            [rng.randrange(100) for _ in range(rng.randrange(0, MAX.get(k, 6) + 1))]
            for _ in range(b)
        ]
        for k, b in zip(keys, batch, strict=True)
    }


KEY_SETS = [["f1"], ["f1", "f2"], ["f2", "x", "f1"], ["x"], ["x", "y"], ["f1", "x"]]


@pytest.mark.parametrize("keys", KEY_SETS, ids=["+".join(k) for k in KEY_SETS])
@pytest.mark.parametrize("variable_batch", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_against_a_per_id_loop(keys: list[str], variable_batch: bool, weighted: bool) -> None:
    rng = random.Random(len(keys) * 7 + variable_batch * 3 + weighted)
    pw = _processor(rng.randrange(1000))
    batch = [rng.randrange(0, 4) if variable_batch else 3 for _ in keys]
    bags = _random_bags(rng, keys, batch)
    positions = None
    weights = None
    if weighted:  # row-wise sharding's input: each id's position travels as its weight
        positions = {
            k: [[rng.randrange(MAX.get(k, 1)) for _ in bag] for bag in bags[k]] for k in keys
        }
        weights = torch.tensor(
            [float(p) for k in keys for bag in positions[k] for p in bag], dtype=torch.float
        )
    kjt = _kjt(keys, bags, weights)
    out = pw(kjt)
    expected = _reference(pw, keys, bags, positions)
    if expected is None:
        assert out is kjt  # no feature with a maximum: the input itself
        return
    picked, values, lengths, want = expected
    assert out.keys() == picked
    assert out.values().tolist() == values and out.lengths().tolist() == lengths
    torch.testing.assert_close(out.weights(), torch.tensor(want), rtol=0, atol=0)
    assert out.stride_per_key() == [len(bags[k]) for k in picked]
    assert out.variable_stride_per_key() == kjt.variable_stride_per_key()


def test_zero_batch_and_empty_bags() -> None:
    pw = _processor(0)
    empty = KeyedJaggedTensor(
        keys=["f1", "f2"],
        values=torch.zeros(0, dtype=torch.long),
        lengths=torch.zeros(0, dtype=torch.long),
    )
    out = pw(empty)
    assert out.keys() == ["f1", "f2"] and out.weights().numel() == 0
    no_ids = KeyedJaggedTensor(
        keys=["f1", "x"],
        values=torch.zeros(0, dtype=torch.long),
        lengths=torch.zeros(4, dtype=torch.long),
    )
    out = pw(no_ids)
    assert out.keys() == ["f1"] and out.lengths().tolist() == [0, 0] and out.weights().numel() == 0


def test_gradients_reach_the_position_weights() -> None:
    pw = _processor(1)
    kjt = _kjt(["f1", "x"], {"f1": [[1, 2, 3], [4]], "x": [[5], []]})
    pw(kjt).weights().sum().backward()
    grad = pw.position_weights["f1"].grad
    assert grad is not None and grad.tolist() == [2.0, 1.0, 1.0, 0.0]
    assert pw.position_weights["z"].grad is None


def test_state_buffers_and_base_class() -> None:
    pw = PositionWeightedProcessor({"a": 3, "b": 1})
    assert isinstance(pw, BaseGroupedFeatureProcessor)
    assert list(pw.state_dict()) == ["position_weights.a", "position_weights.b"]
    assert list(pw.named_buffers()) == []
    assert all(
        p.tolist() == [1.0] * n for p, n in zip(pw.position_weights.values(), (3, 1), strict=True)
    )
    other = PositionWeightedProcessor({"a": 3, "b": 1})
    other.load_state_dict(
        {
            "position_weights.a": torch.tensor([1.0, 2.0, 3.0]),
            "position_weights.b": torch.tensor([5.0]),
        }
    )
    out = other(_kjt(["a"], {"a": [[7, 8, 9]]}))
    assert out.weights().tolist() == [1.0, 2.0, 3.0]  # the plain dict follows the load


def test_refusals_name_the_value() -> None:
    with pytest.raises(ValueError, match="max_feature_length of 'f' must be a positive int, got 0"):
        PositionWeightedProcessor({"f": 0})
    pw = _processor(2)
    with pytest.raises(
        ValueError, match=r"feature 'f2' has a bag of 6 ids, longer than its max_feature_length 5"
    ):
        pw(_kjt(["f1", "f2"], {"f1": [[1]], "f2": [[1, 2, 3, 4, 5, 6]]}))


def test_traced_and_scripted_forms_equal_eager() -> None:
    """TorchRec's own check: `GraphModule(pw, Tracer().trace(pw))` scripts; both forms (and
    the module scripted directly) give the eager result."""
    pw = _processor(3)
    kjt = _kjt(
        ["f1", "f2", "z"],
        {"f1": [[1, 2], [], [3]], "f2": [[4], [5], [6, 7, 8]], "z": [[], [9, 9], [1]]},
    )
    eager = pw(kjt)
    traced = torch.fx.GraphModule(pw, Tracer().trace(pw))
    for module in (traced, torch.jit.script(traced), torch.jit.script(pw)):
        got = module(kjt)
        assert got.keys() == eager.keys()
        assert torch.equal(got.values(), eager.values())
        assert torch.equal(got.lengths(), eager.lengths())
        torch.testing.assert_close(got.weights(), eager.weights(), rtol=0, atol=0)
    mixed = _kjt(["x", "f2"], {"x": [[1]], "f2": [[2, 3]]})
    torch.testing.assert_close(torch.jit.script(pw)(mixed).weights(), pw(mixed).weights())
