"""`data_parallel_wrapper=` and `init_data_parallel()`: TorchRec's wrapper arguments reach DDP,
dense gradients are averaged over ranks (reference: the mean of every rank's local gradient),
custom wrappers are called, and bad arguments fail clearly."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from shardrec_collectives import ShardingEnv
from shardrec_dmp import (
    DataParallelWrapper,
    DefaultDataParallelWrapper,
    DistributedModelParallel,
    get_module,
    get_unwrapped_module,
)
from shardrec_embedding import EmbeddingBagCollection, EmbeddingBagConfig
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import RankContext, assert_close, random_lengths, seeded_generator


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.ebc = EmbeddingBagCollection(
            tables=[
                EmbeddingBagConfig(
                    name="t", embedding_dim=4, num_embeddings=10, feature_names=["f"]
                )
            ]
        )
        self.dense = nn.Linear(3, 4)
        self.extra = nn.Linear(4, 1)

    def forward(self, x: Tensor, kjt: KeyedJaggedTensor) -> Tensor:
        pooled: Tensor = self.ebc(kjt)["f"]
        out: Tensor = self.extra(self.dense(x) + pooled).sum()
        return out


def batch(rank: int) -> tuple[Tensor, KeyedJaggedTensor]:
    g = seeded_generator("dpw", rank)
    lengths = random_lengths(4, 3, g)
    ids = torch.randint(0, 10, (int(lengths.sum()),), generator=g)
    return torch.randn(4, 3, generator=g), KeyedJaggedTensor(["f"], ids, lengths=lengths)


def local_dense_grads(rank: int) -> dict[str, Tensor]:
    """The reference: this rank's dense gradients in one process, without communication."""
    model = Model()
    model(*batch(rank)).backward()
    return {
        n: p.grad.clone()
        for n, p in model.named_parameters()
        if not n.startswith("ebc") and p.grad is not None
    }


def check_default_wrapper(ctx: RankContext) -> bool:
    env = ShardingEnv.from_process_group(ctx.pg)
    wrapper = DefaultDataParallelWrapper(
        static_graph=True, bucket_cap_mb=5, params_to_ignore=["extra.weight", "extra.bias"]
    )
    dmp = DistributedModelParallel(Model(), env=env, data_parallel_wrapper=wrapper)
    inner = dmp._dmp_wrapped_module
    assert isinstance(inner, DistributedDataParallel)
    assert inner.static_graph and inner.gradient_as_bucket_view and not inner.broadcast_buffers
    dmp(*batch(ctx.rank)).backward()
    refs = [local_dense_grads(r) for r in range(ctx.world_size)]
    grads = dict(dmp.named_parameters())
    for name in ("dense.weight", "dense.bias"):  # averaged by DDP
        mean = torch.stack([ref[name] for ref in refs]).mean(0)
        got = grads[name].grad
        assert got is not None
        assert_close(got, mean)
    for name in ("extra.weight", "extra.bias"):  # ignored: this rank's own gradient
        got = grads[name].grad
        assert got is not None
        assert_close(got, refs[ctx.rank][name])
    dmp.init_data_parallel()  # already wrapped: unchanged
    assert get_module(dmp) is inner and get_unwrapped_module(dmp) is dmp.module
    assert get_unwrapped_module(inner) is inner.module
    return dmp._dmp_wrapped_module is inner


def test_default_wrapper_arguments_reach_ddp(rank_pool: object) -> None:
    assert rank_pool.run(check_default_wrapper) == [True, True]  # type: ignore[attr-defined]


def check_dmp_default_ddp(ctx: RankContext) -> bool:
    """Without a wrapper: no static graph, buffers broadcast, gradients as bucket views; the
    dense gradients are the mean of the ranks' own over several steps, whichever way they are
    zeroed (views of the buckets survive `zero_grad(set_to_none=False)`)."""
    env = ShardingEnv.from_process_group(ctx.pg)
    dmp = DistributedModelParallel(Model(), env=env)
    inner = dmp._dmp_wrapped_module
    assert isinstance(inner, DistributedDataParallel)
    assert not inner.static_graph and inner.gradient_as_bucket_view and inner.broadcast_buffers
    refs = [local_dense_grads(r) for r in range(ctx.world_size)]
    params = dict(dmp.named_parameters())
    for set_to_none in (True, False, True):
        for p in params.values():
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()
        dmp(*batch(ctx.rank)).backward()
        for name in ("dense.weight", "dense.bias"):  # independent of the tables' init
            got = params[name].grad
            assert got is not None
            assert_close(got, torch.stack([ref[name] for ref in refs]).mean(0))
    return True


def test_dmp_default_ddp_settings(rank_pool: object) -> None:
    assert rank_pool.run(check_dmp_default_ddp) == [True, True]  # type: ignore[attr-defined]


def check_bucket_layout_numerics(ctx: RankContext) -> bool:
    """One DDP bucket (the default wrapper's 25 MiB) or one bucket per parameter: the dense
    gradients, and the weights trained with them, are the same bits over several steps (each
    element's all-reduce sums the same ranks' values whatever the bucket layout)."""
    env = ShardingEnv.from_process_group(ctx.pg)
    per_param = DefaultDataParallelWrapper(
        static_graph=False,
        ddp_kwargs={
            "gradient_as_bucket_view": True,
            "broadcast_buffers": True,
            "bucket_cap_mb": 1e-6,  # every parameter in a bucket of its own
        },
    )
    models = [
        DistributedModelParallel(Model(), env=env),
        DistributedModelParallel(Model(), env=env, data_parallel_wrapper=per_param),
    ]
    for step in range(3):
        grads = []
        for dmp in models:
            dense = {n: p for n, p in dmp.named_parameters() if not n.startswith("ebc")}
            for p in dense.values():
                p.grad = None
            x, kjt = batch(ctx.rank + 10 * step)
            dmp(x, kjt).backward()
            with torch.no_grad():
                for p in dense.values():
                    assert p.grad is not None
                    p -= 0.1 * p.grad
            grads.append({n: p.grad.clone() for n, p in dense.items() if p.grad is not None})
        assert (
            grads[0].keys()
            == grads[1].keys()
            == {"dense.weight", "dense.bias", "extra.weight", "extra.bias"}
        )
        for name, grad in grads[0].items():
            assert torch.equal(grad, grads[1][name]), (step, name)
    # The layouts compared: one bucket of all 21 dense values vs one per parameter.
    buckets = [m._dmp_wrapped_module.reducer._get_zeros_like_grad_buckets() for m in models]
    assert [len(b) for b in buckets] == [1, 4], [[x.buffer().numel() for x in b] for b in buckets]
    weights = [dict(m.named_parameters()) for m in models]
    return all(torch.equal(weights[0][n], weights[1][n]) for n in ("dense.weight", "extra.weight"))


def test_bucket_layout_keeps_numerics(rank_pool: object) -> None:
    assert rank_pool.run(check_bucket_layout_numerics) == [True, True]  # type: ignore[attr-defined]


class Recording(DataParallelWrapper):
    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []

    def wrap(self, dmp: DistributedModelParallel, env: ShardingEnv, device: torch.device) -> None:
        self.calls.append((env.world_size, device.type))
        dmp._dmp_wrapped_module = nn.Sequential()  # a custom wrapper may replace it entirely


def check_custom_wrapper_deferred(ctx: RankContext) -> list[tuple[int, str]]:
    env = ShardingEnv.from_process_group(ctx.pg)
    rec = Recording()
    dmp = DistributedModelParallel(
        Model(), env=env, init_data_parallel=False, data_parallel_wrapper=rec
    )
    assert rec.calls == [] and not isinstance(dmp._dmp_wrapped_module, nn.Sequential)
    dmp.init_data_parallel()
    assert isinstance(dmp._dmp_wrapped_module, nn.Sequential)
    return rec.calls


def test_custom_wrapper_runs_on_init_data_parallel(rank_pool: object) -> None:
    assert rank_pool.run(check_custom_wrapper_deferred) == [[(2, "cpu")]] * 2  # type: ignore[attr-defined]


def test_bad_wrapper_arguments() -> None:
    with pytest.raises(ValueError, match="allreduce_comm_precision='fp8'"):
        DefaultDataParallelWrapper(allreduce_comm_precision="fp8")
    with pytest.raises(ValueError, match="bucket_cap_mb=0"):
        DefaultDataParallelWrapper(bucket_cap_mb=0)
    with pytest.raises(TypeError, match="wrap"):
        DistributedModelParallel(
            Model(),
            env=ShardingEnv.from_local(1, 0),
            data_parallel_wrapper=object(),  # type: ignore[arg-type]  # the error under test
        )


def test_local_env_is_left_unwrapped() -> None:
    dmp = DistributedModelParallel(
        Model(),
        env=ShardingEnv.from_local(1, 0),
        data_parallel_wrapper=DefaultDataParallelWrapper(),
    )
    assert not isinstance(dmp._dmp_wrapped_module, DistributedDataParallel)
    assert get_module(dmp) is get_unwrapped_module(dmp) is dmp.module
    plain = nn.Linear(1, 1)
    assert get_module(plain) is get_unwrapped_module(plain) is plain
