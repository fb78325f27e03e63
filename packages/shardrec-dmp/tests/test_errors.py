"""Bad input to DistributedModelParallel and TrainPipelineSparseDist, in one process (a local
one-rank environment: no process group), plus the wrapper's transparent names."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch
from torch import nn

from shardrec_collectives import ShardingEnv
from shardrec_dmp import (
    FORMAT_VERSION,
    DistributedModelParallel,
    TrainPipelineSparseDist,
    read_metadata,
    save,
)
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_planner import ShardingPlan, construct_module_sharding_plan, table_wise

LOCAL = ShardingEnv.from_local(1, 0)


class Model(nn.Module):
    def __init__(self, mode: str = "ok") -> None:
        super().__init__()
        self.mode = mode
        self.sparse = EmbeddingBagCollection(
            [EmbeddingBagConfig(name="t", num_embeddings=5, embedding_dim=4, feature_names=["f"])]
        )
        self.head = nn.Linear(4, 1)

    def forward(self, batch: Batch) -> object:
        kjt = batch.sparse_features
        if self.mode == "copy":
            kjt = KeyedJaggedTensor(["f"], kjt.values().clone(), lengths=kjt.lengths(), stride=2)
        out = self.head(self.sparse(kjt).values()).sum()
        return out if self.mode == "no_tuple" else (out, out)


@dataclasses.dataclass
class Batch:
    sparse_features: KeyedJaggedTensor

    def to(self, device: torch.device, non_blocking: bool = False) -> Batch:
        return self


def batch() -> Batch:
    kjt = KeyedJaggedTensor(["f"], torch.tensor([0, 3, 4]), lengths=torch.tensor([2, 1]), stride=2)
    return Batch(kjt)


def plan_for(model: Model, path: str = "sparse") -> ShardingPlan:
    p = construct_module_sharding_plan(model.sparse, {"t": table_wise(rank=0)}, world_size=1)
    return ShardingPlan(plan={path: p})


def test_needs_an_environment() -> None:
    with pytest.raises(ValueError, match="init_process_group"):
        DistributedModelParallel(Model())


def test_rejects_non_module_and_double_wrap() -> None:
    with pytest.raises(TypeError, match="list"):
        DistributedModelParallel([], env=LOCAL)  # type: ignore[arg-type]
    dmp = DistributedModelParallel(Model(), env=LOCAL)
    with pytest.raises(TypeError, match="already a DistributedModelParallel"):
        DistributedModelParallel(dmp, env=LOCAL)


def test_plan_names_a_missing_module() -> None:
    model = Model()
    with pytest.raises(ValueError, match="'nope'"):
        DistributedModelParallel(model, env=LOCAL, plan=plan_for(model, "nope"))


def test_no_sharder_for_planned_module() -> None:
    model = Model()
    with pytest.raises(ValueError, match="EmbeddingBagCollection"):
        DistributedModelParallel(model, env=LOCAL, plan=plan_for(model), sharders=[])


def test_names_are_the_unsharded_models() -> None:
    # state_dict() needs a process group (ShardedTensor): checked in test_dmp / test_checkpoint.
    model = Model()
    want = {n for n, _ in model.named_parameters()}
    dmp = DistributedModelParallel(model, env=LOCAL)
    assert {n for n, _ in dmp.named_parameters()} == want
    assert set(dmp.fused_optimizer.params) == {"sparse.embedding_bags.t.weight"}
    assert dmp.plan.get_plan_for_module("sparse") is not None
    assert dmp.module is model


def test_meta_dense_part_is_materialized() -> None:
    model = Model()
    model.head = nn.Linear(4, 1, device="meta")
    dmp = DistributedModelParallel(model, env=LOCAL)
    assert all(not p.is_meta for p in dmp.parameters())


def pipeline(mode: str) -> tuple[TrainPipelineSparseDist, DistributedModelParallel]:
    dmp = DistributedModelParallel(Model(mode), env=LOCAL)
    opt = torch.optim.SGD(dmp.parameters(), lr=0.1)
    return TrainPipelineSparseDist(dmp, opt, "cpu"), dmp


def test_pipeline_needs_dmp() -> None:
    with pytest.raises(TypeError, match="Model"):
        TrainPipelineSparseDist(Model(), torch.optim.SGD(Model().parameters(), lr=0.1), "cpu")


def test_pipeline_batch_without_sparse_features() -> None:
    pipe, _ = pipeline("ok")
    with pytest.raises(TypeError, match="tuple"):
        pipe.progress(iter([(1, 2)]))  # type: ignore[list-item]


def test_pipeline_model_must_return_loss_and_output() -> None:
    pipe, _ = pipeline("no_tuple")
    with pytest.raises(TypeError, match="Tensor"):
        pipe.progress(iter([batch()]))


def test_pipeline_module_must_get_the_batch_kjt() -> None:
    pipe, dmp = pipeline("copy")
    with pytest.raises(ValueError, match="'sparse'"):
        pipe.progress(iter([batch()]))
    # The sharded module's own forward is back after the failed step.
    assert "forward" not in vars(dmp.sharded_modules["sparse"])


def test_pipeline_one_rank_matches_plain_loop() -> None:
    torch.manual_seed(1)
    a, b = Model(), Model()
    b.load_state_dict(a.state_dict())
    dmp_a = DistributedModelParallel(a, env=LOCAL)
    dmp_b = DistributedModelParallel(b, env=LOCAL)
    opt_a = torch.optim.SGD(dmp_a.parameters(), lr=0.1)
    pipe = TrainPipelineSparseDist(dmp_b, torch.optim.SGD(dmp_b.parameters(), lr=0.1), "cpu")
    it = iter([batch() for _ in range(3)])
    for _ in range(3):
        opt_a.zero_grad()
        loss, _ = dmp_a(batch())
        loss.backward()
        opt_a.step()
        assert torch.equal(pipe.progress(it), loss)  # type: ignore[arg-type]
    with pytest.raises(StopIteration):
        pipe.progress(it)


def test_read_metadata_rejects_non_checkpoints(tmp_path: object) -> None:
    path = f"{tmp_path}/empty"
    os.makedirs(path)
    with pytest.raises(FileNotFoundError, match="empty"):
        read_metadata(path)
    with open(f"{path}/shardrec.json", "w") as f:
        json.dump({"format_version": 99}, f)
    with pytest.raises(ValueError, match="99"):
        read_metadata(path)
    with open(f"{path}/shardrec.json", "w") as f:
        json.dump({"format_version": FORMAT_VERSION, "optimizers": []}, f)
    assert read_metadata(path)["format_version"] == FORMAT_VERSION


def test_save_needs_a_dmp(tmp_path: object) -> None:
    with pytest.raises(TypeError, match="Model"):
        save(f"{tmp_path}/x", Model())  # type: ignore[arg-type]
