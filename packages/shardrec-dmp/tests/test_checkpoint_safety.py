"""Checkpoints that cannot run code and cannot rot silently.

Every crafted file below would run code under a plain unpickle (each test first proves that
with `pickle.loads` or `torch.load(weights_only=False)` writing a marker file); `load` must
refuse it with a `CheckpointError` that names the checkpoint and the file, and the marker must
not appear. One flipped byte anywhere in a data file must fail verification before anything
is loaded. One rank (the shared one-rank pool: checkpoints need a process group), and two
ranks at the end.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import random

import pytest
import torch
from torch import nn

from shardrec_collectives import ShardingEnv, barrier
from shardrec_dmp import (
    CheckpointError,
    DistributedModelParallel,
    load,
    read_metadata,
    save,
    saved_shapes,
    verify,
)
from shardrec_dmp.checkpoint_files import record_of
from shardrec_dmp.checkpoint_io import read_dcp_metadata
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_planner import ShardingPlan, construct_module_sharding_plan, row_wise, table_wise
from shardrec_testing import RankContext, seeded_generator


class Payload:
    """Unpickling it writes `marker` (what an attacker's code would do, harmlessly)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sparse = EmbeddingBagCollection(
            [
                EmbeddingBagConfig(
                    name="t0", num_embeddings=13, embedding_dim=4, feature_names=["f"]
                ),
                EmbeddingBagConfig(
                    name="t1", num_embeddings=6, embedding_dim=8, feature_names=["g"]
                ),
            ]
        )
        self.head = nn.Linear(12, 1)


def wrap(env: ShardingEnv, seed: str) -> tuple[DistributedModelParallel, torch.optim.Optimizer]:
    model = Model()
    g = seeded_generator("ckpt-safety", seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    gens = {"t0": row_wise(), "t1": table_wise(rank=env.world_size - 1)}
    sub = construct_module_sharding_plan(model.sparse, gens, world_size=env.world_size)
    dmp = DistributedModelParallel(model, env=env, plan=ShardingPlan(plan={"sparse": sub}))
    return dmp, torch.optim.SGD(dmp.parameters(), lr=0.1, momentum=0.9)


def weights(dmp: DistributedModelParallel) -> dict[str, torch.Tensor]:
    return {k: p.detach().clone() for k, p in dmp.named_parameters()}


def env_of(ctx: RankContext) -> ShardingEnv:
    return ShardingEnv.from_process_group(ctx.pg)


def saved(ctx: RankContext, tmp: str, seed: str = "a") -> tuple[str, DistributedModelParallel]:
    """A checkpoint of a model with seeded weights, and a fresh model with other weights."""
    path = f"{tmp}/ck"
    dmp, opt = wrap(env_of(ctx), seed)
    save(path, dmp, {"opt": opt})
    other, _ = wrap(env_of(ctx), seed + "-other")
    return path, other


def data_files(path: str) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(".distcp"))


def rewrite_manifest(path: str, names: list[str]) -> None:
    """Record the current size and CRC-32 of `names`: what someone crafting the checkpoint
    would do, so that the load gets past verification to the crafted content."""
    file = f"{path}/shardrec.json"
    with open(file) as f:
        meta = json.load(f)
    for name in names:
        meta["files"][name] = record_of(f"{path}/{name}")
    with open(file, "w") as f:
        json.dump(meta, f)


def _round_trip_is_bit_exact_and_every_file_is_recorded(ctx: RankContext, tmp: str) -> bool:
    path = f"{tmp}/ck"
    a, opt_a = wrap(env_of(ctx), "a")
    save(path, a, {"opt": opt_a})
    files = read_metadata(path)["files"]
    assert isinstance(files, dict)
    on_disk = sorted(set(os.listdir(path)) - {"shardrec.json"})
    assert sorted(files) == on_disk and ".metadata" in on_disk and data_files(path)
    for name in on_disk:
        assert files[name] == record_of(f"{path}/{name}")
    assert verify(path) == sum(os.path.getsize(f"{path}/{n}") for n in on_disk)
    b, opt_b = wrap(env_of(ctx), "b")
    load(path, b, {"opt": opt_b})
    want, got = weights(a), weights(b)
    assert all(torch.equal(got[k], want[k]) for k in want)
    shapes = saved_shapes(path)
    assert shapes["model.sparse.embedding_bags.t0.weight"] == (13, 4)
    assert shapes["model.head.weight"] == (1, 12)
    return True


def on_one_rank(pool_factory: object, fn: object, tmp_path: object, *args: object) -> None:
    """Run `fn(ctx, str(tmp_path), *args)` on the shared one-rank pool; it returns True."""
    assert pool_factory(1).run(fn, str(tmp_path), *args) == [True]  # type: ignore[operator]


def _damaged_manifest_is_named(ctx: RankContext, tmp: str, text: str, message: str) -> bool:
    path, other = saved(ctx, tmp)
    with open(f"{path}/shardrec.json", "w", encoding="latin-1") as f:
        f.write(text)
    with pytest.raises(CheckpointError, match=rf"checkpoint '{path}': .*{message}"):
        load(path, other)
    return True


def _one_flipped_byte_fails_before_anything_loads(ctx: RankContext, tmp: str, seed: int) -> bool:
    path, other = saved(ctx, tmp)
    before = weights(other)
    rng = random.Random(seed)
    name = rng.choice(data_files(path))
    file = f"{path}/{name}"
    with open(file, "r+b") as f:
        size = f.seek(0, 2)
        at = rng.randrange(size)
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ (1 << rng.randrange(8))]))
    with pytest.raises(CheckpointError, match=rf"checkpoint '{path}': file '{name}' is damaged"):
        load(path, other, {"opt": torch.optim.SGD(other.parameters(), lr=0.1)})
    after = weights(other)
    assert all(torch.equal(after[k], before[k]) for k in before), "load changed the model"
    with pytest.raises(CheckpointError, match="CRC-32"):
        verify(path)
    assert os.path.isfile(file), "the damaged file is kept for inspection"
    return True


@pytest.mark.parametrize("seed", range(4))
def test_one_flipped_byte_fails_before_anything_loads(
    pool_factory: object, tmp_path: object, seed: int
) -> None:
    on_one_rank(pool_factory, _one_flipped_byte_fails_before_anything_loads, tmp_path, seed)


def _truncated_and_missing_files_are_named(ctx: RankContext, tmp: str) -> bool:
    path, other = saved(ctx, tmp)
    name = data_files(path)[0]
    with open(f"{path}/{name}", "r+b") as f:
        f.truncate(10)
    with pytest.raises(CheckpointError, match=rf"file '{name}' is damaged: it has 10 bytes"):
        load(path, other)
    os.remove(f"{path}/{name}")
    with pytest.raises(CheckpointError, match=rf"file '{name}' is missing"):
        load(path, other)
    return True


def crafted_metadata(path: str, marker: str) -> None:
    with open(f"{path}/.metadata", "wb") as f:
        pickle.dump(Payload(marker), f)


def _crafted_metadata_runs_nothing(ctx: RankContext, tmp: str) -> bool:
    path, other = saved(ctx, tmp)
    proof = f"{tmp}/proof"
    pickle.loads(pickle.dumps(Payload(proof)))  # a plain unpickle runs it
    assert os.path.exists(proof)
    marker = f"{tmp}/marker"
    crafted_metadata(path, marker)
    # As written it fails verification; with the manifest rewritten, the unpickler refuses it.
    with pytest.raises(CheckpointError, match=rf"'{path}': file '.metadata' is damaged"):
        load(path, other)
    rewrite_manifest(path, [".metadata"])
    for attempt in (lambda: load(path, other), lambda: verify(path), lambda: saved_shapes(path)):
        with pytest.raises(
            CheckpointError, match=rf"'{path}': file '.metadata' refers to builtins.exec"
        ):
            attempt()
    assert not os.path.exists(marker)
    return True


def _metadata_pointing_outside_the_checkpoint_is_refused(ctx: RankContext, tmp: str) -> bool:
    path, other = saved(ctx, tmp)
    metadata = read_dcp_metadata(path)
    info = next(iter(metadata.storage_data.values()))
    info.relative_path = "../elsewhere.distcp"
    with open(f"{path}/.metadata", "wb") as f:
        pickle.dump(metadata, f)
    rewrite_manifest(path, [".metadata"])
    with pytest.raises(CheckpointError, match=r"points at '\.\./elsewhere\.distcp'"):
        load(path, other)
    return True


def _crafted_non_tensor_value_runs_nothing(ctx: RankContext, tmp: str) -> bool:
    """A value DCP stores as bytes (an optimizer hyper-parameter here) holding a payload."""
    path = f"{tmp}/ck"
    marker = f"{tmp}/marker"
    dmp, opt = wrap(env_of(ctx), "a")
    opt.param_groups[0]["lr"] = Payload(marker)
    save(path, dmp, {"opt": opt})
    proof = f"{tmp}/proof"
    torch.load(io.BytesIO(_torch_bytes(Payload(proof))), weights_only=False)
    assert os.path.exists(proof)
    other, _ = wrap(env_of(ctx), "b")
    fresh = torch.optim.SGD(other.parameters(), lr=0.1, momentum=0.9)
    with pytest.raises(CheckpointError, match=r"file '__0_0\.distcp' cannot be read.*'optimizers"):
        load(path, other, {"opt": fresh})
    assert not os.path.exists(marker)
    return True


def _torch_bytes(obj: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _crafted_tensor_runs_nothing(ctx: RankContext, tmp: str) -> bool:
    """A tensor's byte range in a .distcp replaced by a torch.save payload, the offsets in
    `.metadata` and the manifest rewritten to match."""
    path, other = saved(ctx, tmp)
    marker = f"{tmp}/marker"
    metadata = read_dcp_metadata(path)
    key = next(k for k in metadata.storage_data if k.fqn == "model.head.weight")
    target = metadata.storage_data[key]
    name = target.relative_path
    with open(f"{path}/{name}", "rb") as f:
        data = f.read()
    evil = _torch_bytes(Payload(marker))
    start, end = target.offset, target.offset + target.length
    with open(f"{path}/{name}", "wb") as f:
        f.write(data[:start] + evil + data[end:])
    for info in metadata.storage_data.values():
        if info.relative_path == name and info.offset > start:
            info.offset += len(evil) - target.length
    target.length = len(evil)
    with open(f"{path}/.metadata", "wb") as f:
        pickle.dump(metadata, f)
    rewrite_manifest(path, [".metadata", name])
    with pytest.raises(CheckpointError, match=rf"'{path}': file '{name}' cannot be read"):
        load(path, other)
    assert not os.path.exists(marker)
    return True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"format_version": 1, "optim', r"shardrec\.json is not valid JSON .*earlier checkpoint"),
        ("\xff\xfe", r"shardrec\.json is not valid JSON"),
        ("[1, 2]", r"holds a JSON list, expected an object"),
        ('{"format_version": 1, "optimizers": 3}', r"'optimizers' 3, expected a list"),
        (
            '{"format_version": 1, "files": {"../x": {"bytes": 1, "crc32": "00000000"}}}',
            r"'\.\./x'",
        ),
        ('{"format_version": 1, "files": {"a": {"bytes": "1"}}}', r"malformed 'files' table"),
    ],
)
def test_damaged_manifest_is_named(
    pool_factory: object, tmp_path: object, text: str, message: str
) -> None:
    on_one_rank(pool_factory, _damaged_manifest_is_named, tmp_path, text, message)


def _checkpoint_without_checksums_loads_with_a_warning(ctx: RankContext, tmp: str) -> bool:
    path = f"{tmp}/ck"
    a, opt_a = wrap(env_of(ctx), "a")
    save(path, a, {"opt": opt_a})
    with open(f"{path}/shardrec.json") as f:
        meta = json.load(f)
    del meta["files"]  # as written before checksums existed
    with open(f"{path}/shardrec.json", "w") as f:
        json.dump(meta, f)
    b, opt_b = wrap(env_of(ctx), "b")
    with pytest.warns(UserWarning, match=rf"'{path}' has no checksums .* unverified"):
        load(path, b, {"opt": opt_b})
    want, got = weights(a), weights(b)
    assert all(torch.equal(got[k], want[k]) for k in want)
    with pytest.warns(UserWarning, match="unverified"):
        assert verify(path) == 0
    return True


def flipped_on_every_rank(ctx: RankContext, path: str) -> str:
    """Rank 1's data file damaged: every rank raises the same error, the model untouched."""
    dmp, opt = wrap(ShardingEnv.from_process_group(ctx.pg), "a")
    save(path, dmp, {"opt": opt})
    if ctx.rank == 0:
        with open(f"{path}/__1_0.distcp", "r+b") as f:
            f.seek(7)
            byte = f.read(1)[0]
            f.seek(7)
            f.write(bytes([byte ^ 0x10]))
    barrier(ShardingEnv.from_process_group(ctx.pg))
    other, opt_o = wrap(ShardingEnv.from_process_group(ctx.pg), "b")
    before = weights(other)
    with pytest.raises(CheckpointError) as err:
        load(path, other, {"opt": opt_o})
    after = weights(other)
    assert all(torch.equal(after[k], before[k]) for k in before)
    return str(err.value)


def test_every_rank_reports_the_damaged_file(pool_factory: object, tmp_path: object) -> None:
    path = f"{tmp_path}/ck"
    messages = pool_factory(2).run(flipped_on_every_rank, path)  # type: ignore[operator]
    assert messages[0] == messages[1]
    assert f"checkpoint '{path}': file '__1_0.distcp' is damaged" in messages[0]


# One-rank cases without parameters: each function runs on the shared one-rank pool and
# returns True (the test id is the case's name).
_ONE_RANK_CASES = [
    _round_trip_is_bit_exact_and_every_file_is_recorded,
    _truncated_and_missing_files_are_named,
    _crafted_metadata_runs_nothing,
    _metadata_pointing_outside_the_checkpoint_is_refused,
    _crafted_non_tensor_value_runs_nothing,
    _crafted_tensor_runs_nothing,
    _checkpoint_without_checksums_loads_with_a_warning,
]


@pytest.mark.parametrize("case", _ONE_RANK_CASES, ids=lambda fn: fn.__name__.lstrip("_"))
def test_one_rank_case(pool_factory: object, tmp_path: object, case: object) -> None:
    on_one_rank(pool_factory, case, tmp_path)
