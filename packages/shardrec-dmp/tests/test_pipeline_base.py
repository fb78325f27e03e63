"""`TrainPipelineBase` against the plain loop (TorchRec 1.8's documented behaviour)."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
import torch
from torch import Tensor, nn

from shardrec_dmp import TrainPipeline, TrainPipelineBase, TrainPipelineSparseDist


class _Batch:
    def __init__(self, x: Tensor, y: Tensor) -> None:
        self.x, self.y = x, y

    def to(self, device: torch.device, non_blocking: bool = False) -> _Batch:
        return _Batch(self.x.to(device, non_blocking=non_blocking), self.y.to(device))


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 1)

    def forward(self, b: _Batch) -> tuple[Tensor, Tensor]:
        pred = self.lin(b.x).squeeze(1)
        return ((pred - b.y) ** 2).mean(), pred.detach()


def _batches(n: int) -> list[_Batch]:
    g = torch.Generator().manual_seed(n)
    return [_Batch(torch.randn(4, 3, generator=g), torch.randn(4, generator=g)) for _ in range(n)]


def _drain(pipe: TrainPipelineBase[_Batch, Tensor], it: Iterator[_Batch]) -> list[Tensor]:
    outs = []
    while True:
        try:
            outs.append(pipe.progress(it))
        except StopIteration:
            return outs


@pytest.mark.parametrize("n", [0, 1, 5])
def test_train_equals_plain_loop_and_runs_every_batch(n: int) -> None:
    torch.manual_seed(0)
    model = _Model()
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    batches = _batches(n)
    outs = _drain(TrainPipelineBase(model, opt, torch.device("cpu")), iter(batches))
    ref_outs = []
    for b in batches:
        ref_opt.zero_grad()
        loss, out = ref(b)
        loss.backward()
        ref_opt.step()
        ref_outs.append(out)
    assert len(outs) == n
    for a, r in zip(outs, ref_outs, strict=True):
        torch.testing.assert_close(a, r)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q)


def test_exhausted_until_reset_then_eval_is_forward_only() -> None:
    model = _Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pipe = TrainPipelineBase(model, opt, torch.device("cpu"))
    batches = _batches(3)
    assert len(_drain(pipe, iter(batches))) == 3
    with pytest.raises(StopIteration):  # TorchRec: stays exhausted until reset()
        pipe.progress(iter(batches))
    pipe.reset()
    model.eval()
    before = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():
        outs = _drain(pipe, iter(batches))
    assert len(outs) == 3
    for p, b in zip(model.parameters(), before, strict=True):
        assert torch.equal(p, b)
    with torch.no_grad():
        torch.testing.assert_close(outs[0], model(batches[0])[1])


def test_custom_model_fwd_and_summed_losses() -> None:
    model = _Model()
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: list[int] = []

    def fwd(b: _Batch) -> tuple[Tensor, Tensor]:
        seen.append(1)
        pred = model.lin(b.x).squeeze(1)
        return (pred - b.y) ** 2, pred  # per-sample losses: the pipeline sums over dim 0

    b = _batches(1)
    TrainPipelineBase(model, opt, torch.device("cpu"), custom_model_fwd=fwd).progress(iter(b))
    ((ref.lin(b[0].x).squeeze(1) - b[0].y) ** 2).sum().backward()
    assert seen == [1]
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q.detach() - 0.1 * q.grad)  # type: ignore[operator]


def test_batch_without_to_is_refused_with_the_fix() -> None:
    model = _Model()
    pipe = TrainPipelineBase(
        model, torch.optim.SGD(model.parameters(), lr=0.1), torch.device("cpu")
    )
    with pytest.raises(TypeError, match="without `to`"):
        pipe.progress(iter([(torch.zeros(1), torch.zeros(1))]))


def test_sparse_dist_pipeline_is_a_train_pipeline() -> None:
    assert issubclass(TrainPipelineSparseDist, TrainPipeline)
    assert issubclass(TrainPipelineBase, TrainPipeline)
