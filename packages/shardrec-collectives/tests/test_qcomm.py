"""Quantized communication (`shardrec_collectives.qcomm`, TorchRec's fbgemm_qcomm_codec API).

- each codec's round trip against the exact values, within the error bound the module
  documents (seeded random tensors of many shapes, with zeros, constant groups, big values);
- against fbgemm's own codecs where fbgemm-gpu-cpu is installed (marker `fbgemm`);
- the quantized pooled all-to-all on 2 gloo ranks: forward output and backward gradient equal
  the exact exchange with each sent segment passed through the codec (the reference is the
  codec applied locally), FP32 is the exact exchange;
- every refusal of a bad config or registry.
"""

from __future__ import annotations

import math

import pytest
import torch
from _qcomm_cases import PRECISIONS, bound, through

from shardrec_collectives import ShardingEnv, pooled_all_to_all
from shardrec_collectives.dist_data import PooledEmbeddingsAllToAll
from shardrec_collectives.qcomm import (
    CommOp,
    CommType,
    NoOpQuantizedCommCodec,
    QCommsConfig,
    QuantizedCommCodec,
    QuantizedCommCodecs,
    checked_codecs,
    codecs_for,
    get_qcomm_codecs,
    get_qcomm_codecs_registry,
)
from shardrec_testing import RankContext, RankPool, seeded_generator

SHAPES = [(1,), (31,), (32,), (4, 8), (7, 33), (64, 96), (0,)]


def sample(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """Normal values of a random scale, with a zero group and a constant group mixed in."""
    g = seeded_generator("qcomm", shape, seed)
    x = torch.randn(shape, generator=g) * 10 ** torch.empty(()).uniform_(-3, 3, generator=g)
    flat = x.view(-1)
    if flat.numel() >= 96:
        flat[:32] = 0.0
        flat[32:64] = 0.5
    return x


def clamp_for(precision: CommType, row_dim: int | None, x: torch.Tensor) -> torch.Tensor:
    """What a codec with a fixed range represents at best (FP8 without row dim: +-0.9375)."""
    if precision is CommType.FP8 and not row_dim:
        return x.clamp(-0.9375, 0.9375)
    return x


CASES = [
    (CommType.FP16, None, True),
    (CommType.BF16, None, True),
    (CommType.INT8, None, True),
    (CommType.FP8, None, True),
    (CommType.FP8, 16, True),
    (CommType.FP8, 8, False),
    (CommType.MX4, None, True),
    (CommType.MX4, 16, True),
]


@pytest.mark.parametrize(("precision", "row_dim", "is_fwd"), CASES)
@pytest.mark.parametrize("shape", SHAPES)
def test_round_trip_within_the_documented_bound(
    precision: CommType, row_dim: int | None, is_fwd: bool, shape: tuple[int, ...]
) -> None:
    codec = QuantizedCommCodec(precision, row_dim=row_dim, is_fwd=is_fwd)
    for seed in range(3):
        x = sample(shape, seed)
        if precision is CommType.FP8 and not row_dim:
            x = x / (x.abs().amax() + 1) if x.numel() else x  # its range: |x| < 1
        ctx = codec.create_context()
        wire = codec.encode(x, ctx)
        assert wire.dtype == codec.quantized_dtype
        values = x.numel()
        if precision is CommType.MX4 and x.ndim == 2:  # each row padded to whole groups
            values = x.shape[0] * -(-x.shape[1] // ctx.mx_group_size) * ctx.mx_group_size
        assert wire.numel() == codec.calc_quantized_size(values, ctx)
        got = codec.decode(wire, ctx)
        assert got.dtype == torch.float32
        got = (
            got.view(-1)[: x.numel()].view(x.shape)
            if x.ndim == 1 or precision not in (CommType.MX4,)
            else got.view(x.shape[0], -1)[:, : x.shape[-1]]
        )
        target = clamp_for(precision, row_dim, x)
        err = (got - target).abs()
        if precision is CommType.MX4 and x.ndim == 2:  # groups never straddle rows
            padded = torch.nn.functional.pad(target, (0, -x.shape[1] % ctx.mx_group_size))
            limit = bound(precision, padded, row_dim, is_fwd)[:, : x.shape[1]]
        else:
            limit = bound(precision, target, row_dim, is_fwd)
        assert bool((err <= limit).all()), (err - limit).max()


def test_fixed_fp8_clamps_to_its_range_and_loss_scale_round_trips() -> None:
    codec = QuantizedCommCodec(CommType.FP8)
    x = torch.tensor([-5.0, -0.9375, 0.0, 0.5, 2.0])
    assert codec.decode(codec.encode(x)).tolist() == [-0.9375, -0.9375, 0.0, 0.5, 0.9375]
    scaled = QuantizedCommCodec(CommType.FP16, loss_scale=65536.0)
    tiny = torch.tensor([1e-9, -3e-8, 2e-6])
    assert torch.allclose(scaled.decode(scaled.encode(tiny)), tiny, rtol=2.0**-10, atol=0)
    plain = QuantizedCommCodec(CommType.FP16)
    assert plain.decode(plain.encode(tiny))[0] == 0  # below float16's range without the scale
    big = torch.tensor([1e6, -1e6])
    assert plain.decode(plain.encode(big)).tolist() == [65504.0, -65504.0]
    # a loss scale only applies to FP16/BF16 (TorchRec: ignored, logged)
    int8 = QuantizedCommCodec(CommType.INT8, loss_scale=8.0)
    x = torch.randn(64)
    assert torch.equal(int8.decode(int8.encode(x)), QuantizedCommCodec(CommType.INT8).decode(
        QuantizedCommCodec(CommType.INT8).encode(x)))  # fmt: skip


def test_mx4_padded_size_pads_each_rank_to_whole_groups() -> None:
    codec = get_qcomm_codecs(QCommsConfig(forward_precision=CommType.MX4)).forward
    ctx = codec.create_context()
    x = torch.randn(5, 40, generator=seeded_generator("mx4 padded"))
    assert codec.padded_size(x, [40, 7, 64], 0, ctx) == (64, 24)
    assert ctx.padded_dim_sum_per_rank == [64, 32, 64]
    out = codec.decode(codec.encode(x, ctx), ctx).view(5, 64)
    limit = bound(CommType.MX4, torch.nn.functional.pad(x, (0, 24)), 32, True)[:, :40]
    assert bool(((out[:, :40] - x).abs() <= limit).all())
    assert not out[:, 40:].any()  # the padding decodes to zeros
    other = get_qcomm_codecs(QCommsConfig(forward_precision=CommType.INT8)).forward
    assert other.padded_size(x, [40], 0, other.create_context()) == (40, 0)


@pytest.mark.fbgemm
def test_codecs_agree_with_fbgemm() -> None:
    """MX4 bytes and the fixed FP8 format equal fbgemm's; INT8 within float32 rounding."""
    qu = pytest.importorskip("fbgemm_gpu.quantize_utils")
    ours = QuantizedCommCodec(CommType.MX4)
    fixed = QuantizedCommCodec(CommType.FP8)
    int8 = QuantizedCommCodec(CommType.INT8)
    for seed in range(4):
        g = seeded_generator("fbgemm", seed)
        x = torch.randn(512, generator=g) * (seed + 0.1)
        assert torch.equal(qu.fp32_to_mx4(x, 32).view(-1), ours.encode(x))
        y = x / (x.abs().max() + 1)
        ref = qu.hfp8_to_fp32(qu.fp32_to_hfp8_with_clamp(y.view(1, -1), 4, 3, 15), 4, 15)
        assert torch.equal(ref.view(-1), fixed.decode(fixed.encode(y)))
        ops = torch.ops.fbgemm
        ref = ops.Fused8BitRowwiseQuantizedToFloat(
            ops.FloatToFused8BitRowwiseQuantized(x.view(-1, 32))
        )
        torch.testing.assert_close(int8.decode(int8.encode(x)), ref.view(-1), rtol=0, atol=1e-6)


# -- configs and registries -------------------------------------------------------------------


def test_registry_follows_torchrec() -> None:
    assert get_qcomm_codecs_registry(QCommsConfig()) is None  # FP32 both ways: no codecs
    config = QCommsConfig(forward_precision=CommType.FP8, backward_precision="bf16")
    assert config.backward_precision is CommType.BF16  # TorchRec's string values accepted
    registry = get_qcomm_codecs_registry(config, device=torch.device("cpu"))
    assert registry is not None
    assert sorted(registry) == sorted(op.name for op in CommOp)
    a2a = registry["POOLED_EMBEDDINGS_ALL_TO_ALL"]
    assert (a2a.forward.comm_precision, a2a.backward.comm_precision) == (
        CommType.FP8,
        CommType.BF16,
    )
    rs = registry["POOLED_EMBEDDINGS_REDUCE_SCATTER"]  # no FP8 there: FP16 forward
    assert (rs.forward.comm_precision, rs.backward.comm_precision) == (CommType.FP16, CommType.BF16)
    only = get_qcomm_codecs_registry(config, [CommOp.POOLED_EMBEDDINGS_ALL_TO_ALL])
    assert only is not None and list(only) == ["POOLED_EMBEDDINGS_ALL_TO_ALL"]
    assert codecs_for(only) is only["POOLED_EMBEDDINGS_ALL_TO_ALL"]
    assert codecs_for(None) is None and codecs_for({}) is None
    assert codecs_for({"POOLED_EMBEDDINGS_ALL_TO_ALL": QuantizedCommCodecs()}) is None
    assert isinstance(get_qcomm_codecs(None).forward, NoOpQuantizedCommCodec)
    fp8 = get_qcomm_codecs(QCommsConfig(backward_precision=CommType.FP8, fp8_quantize_dim=8))
    assert fp8.backward.create_context().row_dim == 8  # fp8_quantize_dim_bwd defaults to it
    assert str(CommType.INT8) == "int8"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"forward_precision": "fp7"}, ValueError, r"forward_precision='fp7' is not a CommType"),
        ({"output_dtype": torch.float16}, ValueError, r"output_dtype=torch.float16 is not supp"),
        ({"mx4_rounding_mode": "floor"}, ValueError, r"mx4_rounding_mode='floor': shardrec's"),
        ({"fp8_quantize_dim": 0}, ValueError, r"fp8_quantize_dim=0 must be a positive int"),
        ({"forward_loss_scale": -1.0}, ValueError, r"forward_loss_scale=-1.0 must be a finite"),
        ({"backward_loss_scale": math.inf}, ValueError, r"backward_loss_scale=inf must be"),
    ],
)
def test_bad_configs_are_refused(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        QCommsConfig(**kwargs)  # type: ignore[arg-type]


def test_bad_registries_and_codecs_are_refused() -> None:
    with pytest.raises(TypeError, match="expected a QCommsConfig"):
        get_qcomm_codecs_registry({"forward_precision": "fp16"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unknown key 'pooled'; keys are CommOp names"):
        codecs_for({"pooled": QuantizedCommCodecs()})
    with pytest.raises(TypeError, match=r"\['POOLED_EMBEDDINGS_ALL_TO_ALL'\] = 'fp16': expected"):
        codecs_for({"POOLED_EMBEDDINGS_ALL_TO_ALL": "fp16"})
    with pytest.raises(TypeError, match="must map CommOp names"):
        codecs_for([1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^X\(codecs=3\): expected QuantizedCommCodecs"):
        checked_codecs(3, "X")


# -- the quantized all-to-all on real gloo ranks ----------------------------------------------


def check_quantized_pooled_all_to_all(ctx: RankContext) -> int:
    env, world, me = ShardingEnv.from_process_group(ctx.pg), ctx.world_size, ctx.rank
    cases = 0
    for k, config in enumerate(PRECISIONS):
        codecs = get_qcomm_codecs(config)
        for case, (b, d) in enumerate([([3, 5], [6, 10]), ([0, 4], [3, 0]), ([2, 2], [33, 1])]):

            def emb(
                r: int, b: list[int] = b, d: list[int] = d, key: tuple[int, int] = (k, case)
            ) -> torch.Tensor:
                g = seeded_generator("a2a", *key, r)
                return torch.randn(sum(b), d[r], generator=g) * 3

            local = emb(me).requires_grad_(True)
            module = PooledEmbeddingsAllToAll(ctx.pg, d, codecs=codecs)
            out = (
                module(local, b).wait()
                if k % 2
                else pooled_all_to_all(env, local, b, d, codecs).wait()
            )
            start = sum(b[:me])
            expected = torch.cat(
                [through(codecs.forward, emb(r)[start : start + b[me]]) for r in range(world)], 1
            )
            torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
            grads = [
                torch.randn(b[s], sum(d), generator=seeded_generator("g", k, case, s))
                for s in range(world)
            ]
            (out * grads[me]).sum().backward()
            col = sum(d[:me])
            expected_grad = torch.cat(
                [through(codecs.backward, g[:, col : col + d[me]]) for g in grads], 0
            )
            assert local.grad is not None
            torch.testing.assert_close(local.grad, expected_grad, rtol=0, atol=1e-6)
            cases += 1
    # FP32 both ways is the exact exchange (no codec runs)
    local = torch.randn(4, 3, generator=seeded_generator("exact", me))
    exact = pooled_all_to_all(env, local, [2, 2], [3, 3]).wait()
    noop = pooled_all_to_all(env, local, [2, 2], [3, 3], get_qcomm_codecs(QCommsConfig())).wait()
    assert torch.equal(exact, noop)
    return cases


def test_quantized_pooled_all_to_all_on_two_ranks(pool_factory) -> None:  # type: ignore[no-untyped-def]
    pool: RankPool = pool_factory(2)
    assert pool.run(check_quantized_pooled_all_to_all) == [len(PRECISIONS) * 3] * 2
