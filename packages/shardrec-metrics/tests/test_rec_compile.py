"""torch.compile of a sample-window RecMetric's update: a few compiles in all (the window's
Python list of batches stays out of the graph), and the same values as the eager metric."""

from __future__ import annotations

from unittest.mock import patch

import torch
from _reference import naive_auc

from shardrec_metrics.rec import AUCMetric, RecTaskInfo

TASK = RecTaskInfo(name="DefaultTask")


def _metric() -> AUCMetric:
    return AUCMetric(world_size=4, my_rank=0, batch_size=10, tasks=[TASK], window_size=200)


def test_compiled_auc_update_does_not_recompile_per_step() -> None:
    torch._dynamo.reset()
    compiled, eager = _metric(), _metric()
    update = torch.compile(compiled.update, backend="eager")
    g = torch.Generator().manual_seed(7)
    batches = []
    with (
        patch.object(torch._dynamo.config, "recompile_limit", 2),
        patch.object(torch._dynamo.config, "fail_on_recompile_limit_hit", True),
    ):
        for size in [5] * 6 + [3] * 6:  # 48 samples: all in the window of 50; then a new batch size
            p, y = torch.rand(size, generator=g), (torch.rand(size, generator=g) > 0.5).float()
            w = torch.rand(size, generator=g)
            batches.append((p, y, w))
            kwargs = {"predictions": {TASK.name: p}, "labels": {TASK.name: y}}
            update(**kwargs, weights={TASK.name: w})
            eager.update(**kwargs, weights={TASK.name: w})
    got, want = compiled.compute(), eager.compute()
    assert got.keys() == want.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key])
    p, y, w = (torch.cat(t) for t in zip(*batches, strict=True))
    reference = naive_auc(p.tolist(), y.tolist(), w.tolist())
    assert abs(float(got["auc-DefaultTask|window_auc"]) - reference) < 1e-5
