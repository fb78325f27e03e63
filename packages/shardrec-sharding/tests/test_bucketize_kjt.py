"""`bucketize_kjt_before_all2all` against a naive loop of the documented rule, and against
fbgemm's `block_bucketize_sparse_features` (the op TorchRec 1.8 calls) where it is installed,
on random KJTs: negative and out-of-range ids, weights, empty bags, row bounds, variable batch."""

from __future__ import annotations

import pytest
import torch

from shardrec_jagged import KeyedJaggedTensor
from shardrec_sharding.bucketize import bucketize_kjt_before_all2all
from shardrec_testing import seeded_generator

U64 = 1 << 64


def _naive(
    lengths: list[int], ids: list[int], weights: list[float] | None, feature_of_bag: list[int],
    m: int, sizes: list[int], row_pos: list[list[int]] | None, keep: bool,
) -> tuple[list[int], list[int], list[float] | None, list[int], list[int]]:  # fmt: skip
    """Per bucket, per bag, in order: the documented rule one id at a time."""
    out: list[list[list[tuple[int, float | None, int, int]]]] = [
        [[] for _ in lengths] for _ in range(m)
    ]
    i = 0
    for b, n in enumerate(lengths):
        t = feature_of_bag[b]
        for j in range(n):
            u = ids[i] % U64
            if row_pos is not None and u < row_pos[t][-1]:
                p = max(k for k in range(m) if row_pos[t][k] <= u)
                new = u - row_pos[t][p]
            elif row_pos is None and u < sizes[t] * m:
                p, new = divmod(u, sizes[t])
            else:
                p, new = u % m, u // m
            new = ids[i] if keep else (new - U64 if new >= 1 << 63 else new)
            out[p][b].append((new, None if weights is None else weights[i], j, i))
            i += 1
    flat = [x for bucket in out for bag in bucket for x in bag]
    permute = [0] * len(flat)
    for k, x in enumerate(flat):
        permute[x[3]] = k
    return (
        [len(bag) for bucket in out for bag in bucket],
        [x[0] for x in flat],
        None if weights is None else [float(x[1]) for x in flat],  # type: ignore[arg-type]
        [x[2] for x in flat],
        permute,
    )


def _random_kjt(seed: int, variable: bool) -> tuple[KeyedJaggedTensor, list[int]]:
    g = seeded_generator("bucketize", seed)
    keys = ["f0", "f1", "f2"][: 1 + seed % 3]
    strides = [int(torch.randint(0, 4, (1,), generator=g)) for _ in keys]
    stride = int(torch.randint(0, 4, (1,), generator=g))
    per_key = strides if variable else [stride] * len(keys)
    bags = sum(per_key)
    lengths = torch.randint(0, 4, (bags,), generator=g)
    n = int(lengths.sum())
    ids = torch.randint(-40, 200, (n,), generator=g)
    ids[torch.rand(n, generator=g) < 0.1] = -(2**63)  # the extreme
    weights = torch.rand(n, generator=g)
    feature_of_bag = [t for t, s in enumerate(per_key) for _ in range(s)]
    if variable:
        kjt = KeyedJaggedTensor(
            keys, ids, weights=weights, lengths=lengths,
            stride_per_key_per_rank=[[s] for s in strides],
        )  # fmt: skip
    else:
        kjt = KeyedJaggedTensor(keys, ids, weights=weights, lengths=lengths, stride=stride)
    return kjt, feature_of_bag


def _row_pos(seed: int, features: int, m: int) -> list[torch.Tensor]:
    g = seeded_generator("bucketize-pos", seed)
    return [
        torch.cat(
            [torch.zeros(1, dtype=torch.int64), torch.randint(0, 60, (m,), generator=g)]
        ).cumsum(0)
        for _ in range(features)
    ]


CASES = [
    (seed, m, variable, rows, keep)
    for seed in range(12)
    for m in (1, 2, 3, 5)
    for variable in (False, True)
    for rows in (False, True)
    for keep in (False, True)
    if (seed + m + variable + rows + keep) % 3 == 0
]


@pytest.mark.parametrize(("seed", "m", "variable", "rows", "keep"), CASES)
def test_matches_the_documented_rule(
    seed: int, m: int, variable: bool, rows: bool, keep: bool
) -> None:
    kjt, feature_of_bag = _random_kjt(seed, variable)
    features = len(kjt.keys())
    g = seeded_generator("bucketize-sizes", seed)
    sizes = torch.randint(1, 50, (features,), generator=g)
    row_pos = _row_pos(seed, features, m) if rows else None
    for pos in (False, True):
        out, permute = bucketize_kjt_before_all2all(
            kjt, m, sizes, output_permute=True, bucketize_pos=pos,
            block_bucketize_row_pos=row_pos, keep_original_indices=keep,
        )  # fmt: skip
        lengths, ids, weights, positions, perm = _naive(
            kjt.lengths().tolist(), kjt.values().tolist(), kjt.weights().tolist(),
            feature_of_bag, m, sizes.tolist(),
            None if row_pos is None else [p.tolist() for p in row_pos], keep,
        )  # fmt: skip
        assert out.keys() == list(kjt.keys()) * m
        assert out.lengths().tolist() == lengths
        assert out.values().tolist() == ids
        assert out.weights().tolist() == (positions if pos else weights)
        assert permute is not None and permute.tolist() == perm
        if variable:
            assert out.stride_per_key_per_rank() == kjt.stride_per_key_per_rank() * m
        else:
            assert out.stride() == kjt.stride()


@pytest.mark.parametrize("seed", range(6))
def test_matches_fbgemm(seed: int) -> None:
    pytest.importorskip("fbgemm_gpu")
    kjt, _ = _random_kjt(seed, variable=False)
    m = 2 + seed % 3
    sizes = torch.randint(1, 50, (len(kjt.keys()),), generator=seeded_generator("fb", seed))
    for row_pos in (None, _row_pos(seed, len(kjt.keys()), m)):
        lengths, ids, weights, pos, permute = torch.ops.fbgemm.block_bucketize_sparse_features(
            kjt.lengths(), kjt.values(), bucketize_pos=True, sequence=True, block_sizes=sizes,
            my_size=m, weights=kjt.weights(), block_bucketize_pos=row_pos,
        )  # fmt: skip
        out, ours = bucketize_kjt_before_all2all(
            kjt, m, sizes, output_permute=True, block_bucketize_row_pos=row_pos
        )
        assert torch.equal(out.lengths(), lengths)
        assert torch.equal(out.values(), ids)
        assert torch.equal(out.weights(), weights)
        assert ours is not None and torch.equal(ours, permute)
        with_pos, _ = bucketize_kjt_before_all2all(
            kjt, m, sizes, bucketize_pos=True, block_bucketize_row_pos=row_pos
        )
        assert torch.equal(with_pos.weights(), pos)


def test_empty_and_unweighted() -> None:
    kjt = KeyedJaggedTensor(
        ["a"], torch.zeros(0, dtype=torch.int64), lengths=torch.zeros(2, dtype=torch.int64)
    )
    out, permute = bucketize_kjt_before_all2all(kjt, 3, torch.tensor([4]))
    assert out.keys() == ["a"] * 3 and out.lengths().tolist() == [0] * 6
    assert out.weights_or_none() is None and permute is None


def test_bad_input_named() -> None:
    kjt = KeyedJaggedTensor(["a", "b"], torch.tensor([1, 2]), lengths=torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="block_sizes has 1 entries for 2 features"):
        bucketize_kjt_before_all2all(kjt, 2, torch.tensor([4]))
    with pytest.raises(ValueError, match="num_buckets must be an int >= 1, got 0"):
        bucketize_kjt_before_all2all(kjt, 0, torch.tensor([4, 4]))
    with pytest.raises(ValueError, match="block_sizes must be >= 1"):
        bucketize_kjt_before_all2all(kjt, 2, torch.tensor([4, 0]))
    with pytest.raises(ValueError, match="total_num_blocks"):
        bucketize_kjt_before_all2all(kjt, 2, torch.tensor([4, 4]), torch.tensor([2, 2]))
    with pytest.raises(ValueError, match=r"block_bucketize_row_pos\[1\] has 2 bounds"):
        bounds = [torch.tensor([0, 1, 2]), torch.tensor([0, 1])]
        bucketize_kjt_before_all2all(kjt, 2, torch.tensor([4, 4]), block_bucketize_row_pos=bounds)
    floats = KeyedJaggedTensor(["a"], torch.tensor([1.0]), lengths=torch.tensor([1]))
    with pytest.raises(ValueError, match="ids must be integers"):
        bucketize_kjt_before_all2all(floats, 2, torch.tensor([4]))
