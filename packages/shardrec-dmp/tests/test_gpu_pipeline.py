"""TrainPipelineSparseDist on a GPU: the side-stream copy gives the plain loop's results.

`tensors_of` (what the pipeline `record_stream`s) is checked everywhere; the pipeline test is
marked `gpu` and runs on a one-rank NCCL pool (`nox -s gpu`).
"""

from __future__ import annotations

import dataclasses
from types import ModuleType

import pytest
import torch

from shardrec_dmp import TrainPipelineSparseDist
from shardrec_dmp.train_pipeline import tensors_of
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import RankContext, assert_close, load_sibling_module, shared_pool


def _load(name: str) -> ModuleType:
    return load_sibling_module(__file__, name, "shardrec_dmp_gpu_")


@dataclasses.dataclass
class _Batch:
    dense: torch.Tensor
    sparse_features: KeyedJaggedTensor
    extra: dict[str, list[torch.Tensor]]


class _Plain:
    def __init__(self, labels: torch.Tensor, same: torch.Tensor) -> None:
        self.labels = labels
        self.again = same  # the same tensor twice: listed once


def test_tensors_of_finds_every_tensor_once() -> None:
    kjt = KeyedJaggedTensor(
        ["a"], torch.arange(3), weights=torch.ones(3), lengths=torch.tensor([1, 2]), stride=2
    )
    labels = torch.zeros(2)
    extra = [torch.ones(1), torch.ones(2)]
    batch = _Batch(torch.zeros(2, 3), kjt, {"x": extra})
    found = tensors_of((batch, _Plain(labels, labels)))
    expected = [batch.dense, kjt.values(), kjt.weights(), kjt.lengths(), labels, *extra]
    assert sorted(map(id, found)) == sorted(map(id, expected))


def pipeline_on_gpu(ctx: RankContext, types: tuple[str, ...]) -> bool:
    dmp_tests = _load("test_dmp")
    device = torch.device("cuda", torch.cuda.current_device())
    seed = f"gpu-pipe{types}"
    outputs: list[list[torch.Tensor]] = []
    for pipelined in (False, True):
        model = dmp_tests.wrap(ctx, seed, types)
        opt = dmp_tests.optimizer_of(model)
        batches = [dmp_tests.make_batch(seed, ctx.rank, s) for s in range(dmp_tests.STEPS + 1)]
        got: list[torch.Tensor] = []
        if pipelined:
            pipe = TrainPipelineSparseDist(model, opt, device)
            assert pipe._copy_stream is not None
            it = iter(batches)
            for _ in batches:
                got.append(pipe.progress(it).detach().cpu())  # type: ignore[attr-defined]
        else:
            for b in batches:
                opt.zero_grad()
                loss, logits = model(b.to(device))
                loss.backward()
                opt.step()
                got.append(logits.detach().cpu())
        outputs.append(got)
    for a, b in zip(*outputs, strict=True):
        assert_close(a, b, msg=str(types))  # CUDA atomics: equal up to rounding
    return True


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_pipeline_on_gpu_equals_plain_loop() -> None:
    for types in [("row_wise", "table_wise", "data_parallel"), ("column_wise",) * 3]:
        assert all(shared_pool(1, "nccl").run(pipeline_on_gpu, types))
