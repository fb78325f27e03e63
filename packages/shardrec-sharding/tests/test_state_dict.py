"""state_dict / load_state_dict / torch.distributed.checkpoint of a sharded collection, and
sharding a module that lives on `meta`."""

from __future__ import annotations

import torch
import torch.distributed.checkpoint as dcp

from shardrec_collectives import ShardingEnv
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import (
    column_wise,
    construct_module_sharding_plan,
    data_parallel,
    row_wise,
    table_row_wise,
    table_wise,
)
from shardrec_sharding import EmbeddingBagCollectionSharder
from shardrec_testing import RankContext, assert_close, random_lengths, seeded_generator

TABLES = [
    ("rw", 11, 4, ["a"]),
    ("cw", 7, 8, ["b"]),
    ("tw", 5, 4, ["c"]),
    ("dp", 3, 4, ["d"]),
    ("trw", 6, 4, ["a"]),
]


def configs() -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(name=n, num_embeddings=r, embedding_dim=d, feature_names=f)
        for n, r, d, f in TABLES
    ]


def make_ebc(device: str = "cpu") -> EmbeddingBagCollection:
    ebc = EmbeddingBagCollection(configs(), device=device)
    if device != "meta":
        g = seeded_generator("sd-weights")
        with torch.no_grad():
            for p in ebc.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
    return ebc


def plan(ebc: EmbeddingBagCollection, world: int) -> dict[str, object]:
    return dict(
        construct_module_sharding_plan(
            ebc,
            {
                "rw": row_wise(),
                # two column blocks per rank on small worlds: a merged local table
                "cw": column_wise(ranks=[0, world - 1, 0, world - 1]),
                "tw": table_wise(rank=world - 1),
                "dp": data_parallel(),
                "trw": table_row_wise(host_index=0),
            },
            world_size=world,
        )
    )


def batch(rank: int) -> KeyedJaggedTensor:
    g = seeded_generator("sd-batch", rank)
    size = 3
    lengths = random_lengths(4 * size, 3, g)
    per_key = lengths.view(4, size).sum(1).tolist()
    values = torch.cat([torch.randint(0, 3, (n,), generator=g) for n in per_key])
    return KeyedJaggedTensor(["a", "b", "c", "d"], values, lengths=lengths, stride=size)


def state_dict_round_trip(ctx: RankContext, path: str) -> list[str]:
    env = ShardingEnv.from_process_group(ctx.pg)
    ebc = make_ebc()
    sharded = EmbeddingBagCollectionSharder().shard(ebc, plan(ebc, ctx.world_size), env)  # type: ignore[arg-type]
    sd = sharded.state_dict()
    assert list(sd) == list(ebc.state_dict()), (list(sd), list(ebc.state_dict()))
    full = ebc.state_dict()
    for key, value in sd.items():
        if key == "embedding_bags.dp.weight":
            assert isinstance(value, torch.Tensor)
            assert_close(value, full[key])
            continue
        assert tuple(value.size()) == tuple(full[key].shape)
        covered = sum(m.shard_sizes[0] * m.shard_sizes[1] for m in value.metadata().shards_metadata)
        assert covered == full[key].numel(), key
        for s in value.local_shards():
            (r0, c0), (nr, nc) = s.metadata.shard_offsets, s.metadata.shard_sizes
            assert_close(s.tensor, full[key][r0 : r0 + nr, c0 : c0 + nc], msg=key)
    kjt = batch(ctx.rank)
    expected = ebc(kjt).values()

    def scramble() -> None:
        with torch.no_grad():
            for p in sharded.parameters():
                p.fill_(7.0)

    # load_state_dict from the unsharded module's full tensors
    scramble()
    sharded.load_state_dict(ebc.state_dict())
    assert_close(sharded(kjt).wait().values(), expected)
    # DCP save, scramble, DCP load, load_state_dict
    dcp.save(sharded.state_dict(), checkpoint_id=path)
    scramble()
    target = sharded.state_dict()
    dcp.load(target, checkpoint_id=path)
    sharded.load_state_dict(target)
    assert_close(sharded(kjt).wait().values(), expected)
    return sorted(sd)


def shard_meta(ctx: RankContext) -> dict[str, tuple[int, ...]]:
    env = ShardingEnv.from_process_group(ctx.pg)
    ebc = make_ebc("meta")
    sharded = EmbeddingBagCollectionSharder().shard(ebc, plan(ebc, ctx.world_size), env)  # type: ignore[arg-type]
    shapes = {}
    for name, p in sharded.named_parameters():
        assert p.device.type == "cpu"
        assert torch.isfinite(p).all()
        bound = (1 / dict((n, r) for n, r, *_ in TABLES)[name.split(".")[1]]) ** 0.5
        assert p.abs().max() <= bound + 1e-6, name  # the table config's default init range
        shapes[name] = tuple(p.shape)
    # data_parallel replicas start identical (initialized on rank 0, broadcast)
    dp = sharded.embedding_bags["dp"].weight.detach().clone()
    gathered = [torch.empty_like(dp) for _ in range(ctx.world_size)]
    torch.distributed.all_gather(gathered, dp)
    for g in gathered:
        assert torch.equal(g, dp)
    out = sharded(batch(ctx.rank)).wait()
    assert out.values().shape == (3, 24)
    return shapes


def test_state_dict_and_dcp_round_trip(pool_factory, tmp_path):  # type: ignore[no-untyped-def]
    keys = pool_factory(2).run(state_dict_round_trip, str(tmp_path / "ckpt"))
    expected = sorted(f"embedding_bags.{n}.weight" for n, *_ in TABLES)
    assert keys == [expected, expected]


def test_meta_module_is_initialized_shard_by_shard(pool_factory):  # type: ignore[no-untyped-def]
    shapes = pool_factory(2).run(shard_meta)
    # each rank holds only its shards: row blocks of ceil(rows / 2), column blocks of 2
    assert shapes[0]["embedding_bags.rw.weight"] == (6, 4)
    assert shapes[1]["embedding_bags.rw.weight"] == (5, 4)
    assert shapes[0]["embedding_bags.cw.weight"] == (7, 4)
    assert "embedding_bags.tw.weight" not in shapes[0]
    assert shapes[1]["embedding_bags.tw.weight"] == (5, 4)
    assert shapes[0]["embedding_bags.dp.weight"] == (3, 4)


def local_optimizer_state(sharded: object) -> dict[str, dict[str, torch.Tensor]]:
    from shardrec_optim import CombinedOptimizer

    raw = CombinedOptimizer.state_dict(sharded.fused_optimizer)["state"]  # type: ignore[attr-defined]
    return {k: {n: v.clone() for n, v in e.items()} for k, e in raw.items()}


def optimizer_round_trip(ctx: RankContext, path: str, optimizer: str) -> list[str]:
    env = ShardingEnv.from_process_group(ctx.pg)
    ebc = make_ebc()
    sharder = EmbeddingBagCollectionSharder({"optimizer": optimizer, "learning_rate": 0.1})
    sharded = sharder.shard(ebc, plan(ebc, ctx.world_size), env)  # type: ignore[arg-type]
    kjt = batch(ctx.rank)
    # column-dependent gradients, so that column blocks' row-wise states differ
    coefficients = torch.randn(3, 24, generator=seeded_generator("coefficients", ctx.rank))
    (sharded(kjt).wait().values() * coefficients).sum().backward()
    before = local_optimizer_state(sharded)
    state = sharded.fused_optimizer.state_dict()["state"]
    kinds = []
    for key, entry in state.items():  # type: ignore[attr-defined]
        for name, value in entry.items():
            kinds.append(f"{key}:{name}:{type(value).__name__}")
    dcp.save({"optim": sharded.fused_optimizer.state_dict()}, checkpoint_id=path)
    sharded(kjt).wait().values().sum().backward()  # moves the state away from the checkpoint
    target = {"optim": sharded.fused_optimizer.state_dict()}
    dcp.load(target, checkpoint_id=path)
    sharded.fused_optimizer.load_state_dict(target["optim"])
    after = local_optimizer_state(sharded)
    assert before.keys() == after.keys()
    for key, entry in before.items():
        for name, value in entry.items():
            assert torch.equal(after[key][name], value), (key, name)
    return sorted(kinds)


def test_fused_optimizer_state_dcp_round_trip(pool_factory, tmp_path):  # type: ignore[no-untyped-def]
    pool = pool_factory(2)
    kinds = pool.run(optimizer_round_trip, str(tmp_path / "adam"), "adam")
    assert "embedding_bags.rw.weight:rw.momentum1:ShardedTensor" in kinds[0]
    assert "embedding_bags.cw.weight:cw.momentum2:ShardedTensor" in kinds[1]
    kinds = pool.run(optimizer_round_trip, str(tmp_path / "rowwise"), "exact_row_wise_adagrad")
    assert "embedding_bags.trw.weight:trw.momentum1:ShardedTensor" in kinds[0]
    # row-wise state of a column-split table: one column per rank holding blocks of it
    assert "embedding_bags.cw.weight:cw.momentum1:ShardedTensor" in kinds[1]
