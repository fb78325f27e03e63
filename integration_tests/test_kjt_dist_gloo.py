"""KeyedJaggedTensor's TorchRec all-to-all methods over real gloo all-to-alls.

Each rank sends its KJT the way TorchRec's ``KJTAllToAll`` does: ``dist_splits`` first (one
all-to-all of the row counts), then every ``dist_tensors`` entry with ``all_to_all_single``,
then ``dist_init`` with TorchRec's ``recat``. The reference is every rank's batch rebuilt from
its seed in one process: rank j must get, for each of its keys, every rank's bags in rank order.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import RankContext, RankPool, random_lengths, seeded_generator

KEYS = ["a", "b", "c", "d", "e"]


def batch_of(rank: int, mode: str, weighted: bool) -> KeyedJaggedTensor:
    """Rank ``rank``'s batch: batch 2 everywhere ("same"), rank + 1 ("per_rank"), or varying
    per key too ("variable")."""
    variable = mode == "variable"
    g = seeded_generator("kjt_dist", rank, mode, weighted)
    if variable:
        strides = [(rank + i) % 3 + 1 for i in range(len(KEYS))]
    else:
        strides = [2 if mode == "same" else rank + 1] * len(KEYS)
    lengths = random_lengths(sum(strides), 3, g)
    values = torch.randint(0, 100, (int(lengths.sum()),), generator=g)
    weights = torch.rand(values.numel(), generator=g) if weighted else None
    spkpr = [[s] for s in strides] if variable else None
    return KeyedJaggedTensor(KEYS, values, weights, lengths, stride_per_key_per_rank=spkpr)


def bags(kjt: KeyedJaggedTensor, data: torch.Tensor) -> list[list[list[float]]]:
    """Per key, per bag, the entries of ``data`` (values or weights)."""
    flat, lens = data.tolist(), kjt.lengths().tolist()
    out: list[list[list[float]]] = []
    pos = bag = 0
    for n_bags in kjt.stride_per_key():
        key = []
        for b in range(bag, bag + n_bags):
            key.append(flat[pos : pos + lens[b]])
            pos += lens[b]
        out.append(key)
        bag += n_bags
    return out


def exchange(ctx: RankContext, mode: str, weighted: bool) -> None:
    world, rank, variable = ctx.world_size, ctx.rank, mode == "variable"
    key_splits = [len(KEYS) // world + (1 if j < len(KEYS) % world else 0) for j in range(world)]
    kjt = batch_of(rank, mode, weighted)
    splits = kjt.dist_splits(key_splits)  # [tensor][destination]: rows to send
    incoming = torch.empty(world, len(splits), dtype=torch.int64)  # [sender][tensor]
    dist.all_to_all_single(incoming, torch.tensor(splits).T.contiguous())
    received = []
    for i, tensor in enumerate(kjt.dist_tensors()):
        piece = tensor.new_empty(int(incoming[:, i].sum()))
        dist.all_to_all_single(piece, tensor, incoming[:, i].tolist(), splits[i])
        received.append(piece)
    lo = sum(key_splits[:rank])
    mine = KEYS[lo : lo + key_splits[rank]]
    n = len(mine)
    everyone = [batch_of(r, mode, weighted) for r in range(world)]
    batches = [e.stride() for e in everyone]
    recat = None
    if n and (variable or len(set(batches)) == 1):
        recat = torch.tensor([r * n + k for k in range(n) for r in range(world)], dtype=torch.int32)
    elif n:  # batch differs per rank: one index per bag, segment (r, k) holds batches[r] bags
        starts = [sum(n * b for b in batches[:r]) for r in range(world)]
        per_bag = [s + k * batches[r] + i for k in range(n) for r, s in enumerate(starts)
                   for i in range(batches[r])]  # fmt: skip
        recat = torch.tensor(per_bag, dtype=torch.int32)
    per_rank = None if variable else batches
    out = KeyedJaggedTensor.dist_init(mine, received, variable, world, recat, per_rank)
    expected = [[b for e in everyone for b in bags(e, e.values())[lo + k]] for k in range(n)]
    assert out.keys() == mine
    assert bags(out, out.values()) == expected
    if weighted:
        w = [[b for e in everyone for b in bags(e, e.weights())[lo + k]] for k in range(n)]
        assert bags(out, out.weights()) == w
    if variable:
        spkpr = [[e.stride_per_key()[lo + k] for e in everyone] for k in range(n)]
        assert out.stride_per_key_per_rank() == spkpr
    else:
        assert out.stride() == sum(batches)


def run_all(ctx: RankContext) -> int:
    for mode in ("same", "per_rank", "variable"):
        for weighted in (False, True):
            exchange(ctx, mode, weighted)
    return ctx.rank


@pytest.mark.parametrize("world", [2, 3])
def test_dist_methods_over_gloo(pool_factory: object, world: int) -> None:
    pool: RankPool = pool_factory(world)  # type: ignore[operator]
    assert pool.run(run_all) == list(range(world))
