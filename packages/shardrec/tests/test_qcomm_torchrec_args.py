"""Quantized comms as a TorchRec 1.8 user writes them, through the umbrella paths.

Every argument TorchRec 1.8's `QCommsConfig` takes is accepted with TorchRec's default, applied
(the codecs it builds carry it) or refused with a `ValueError` naming it and the fix; the
sharders take the registry the way TorchRec's docs pass it; bad precisions are refused at the
config. No collective runs here: the quantized exchange itself is tested against the exact run
in shardrec-collectives' test_qcomm.py and shardrec-sharding's test_qcomm_sharded.py.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch

from shardrec.distributed.embedding import EmbeddingCollectionSharder
from shardrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from shardrec.distributed.fbgemm_qcomm_codec import (
    CommType,
    QCommsConfig,
    QuantizedCommCodec,
    get_qcomm_codecs,
    get_qcomm_codecs_registry,
)
from shardrec.distributed.types import CommOp, NoOpQuantizedCommCodec

# TorchRec 1.8's QCommsConfig fields and defaults (torchrec/distributed/fbgemm_qcomm_codec.py).
TORCHREC_FIELDS = {
    "forward_precision": CommType.FP32,
    "backward_precision": CommType.FP32,
    "forward_loss_scale": None,
    "backward_loss_scale": None,
    "fp8_quantize_dim": None,
    "fp8_quantize_dim_bwd": None,
    "fp8_bwd_uses_143": False,
    "fp8_output_dtype": None,
    "mx4_quantize_dim": None,
    "mx4_quantize_dim_bwd": None,
    "mx4_rounding_mode": None,
    "output_dtype": None,
}
TORCHREC_COMM_TYPES = {
    "FP32": "fp32",
    "FP16": "fp16",
    "BF16": "bf16",
    "FP8": "fp8",
    "INT8": "int8",
    "MX4": "mx4",
}


def test_config_has_torchrecs_fields_and_defaults() -> None:
    ours = {f.name: f.default for f in dataclasses.fields(QCommsConfig)}
    assert ours == TORCHREC_FIELDS
    assert {t.name: t.value for t in CommType} == TORCHREC_COMM_TYPES
    assert str(CommType.BF16) == "bf16"


@pytest.mark.parametrize(
    "sharder_type", [EmbeddingBagCollectionSharder, EmbeddingCollectionSharder]
)
def test_sharders_take_the_registry_as_torchrecs_docs_pass_it(sharder_type: type) -> None:
    registry = get_qcomm_codecs_registry(
        qcomms_config=QCommsConfig(
            forward_precision=CommType.FP16, backward_precision=CommType.BF16
        ),
        device=torch.device("cpu"),
    )
    assert registry is not None
    assert sorted(registry) == sorted(op.name for op in CommOp)
    sharder = sharder_type(qcomm_codecs_registry=registry)
    assert sharder.qcomm_codecs_registry == registry
    a2a = registry[CommOp.POOLED_EMBEDDINGS_ALL_TO_ALL.name]
    assert (a2a.forward.comm_precision, a2a.backward.comm_precision) == (
        CommType.FP16,
        CommType.BF16,  # kept on CPU (TorchRec falls back to FP16 there; docs/qcomm.md)
    )
    # Off by default: no registry, and an all-FP32 config builds none.
    assert sharder_type().qcomm_codecs_registry is None
    assert get_qcomm_codecs_registry(QCommsConfig()) is None


def test_fp8_and_mx4_arguments_reach_the_codecs() -> None:
    fp8 = get_qcomm_codecs(
        QCommsConfig(
            forward_precision=CommType.FP8,
            backward_precision=CommType.FP8,
            fp8_quantize_dim=16,
            fp8_bwd_uses_143=True,
        )
    )
    assert fp8.forward.create_context().row_dim == 16
    assert fp8.backward.create_context().row_dim == 16  # fp8_quantize_dim_bwd defaults to it
    x = torch.linspace(-3, 3, 64)
    # fp8_bwd_uses_143: the gradient goes as e4m3, as the forward does (same bytes)
    assert torch.equal(
        fp8.backward.encode(x, fp8.backward.create_context()),
        fp8.forward.encode(x, fp8.forward.create_context()),
    )
    e5m2 = get_qcomm_codecs(
        QCommsConfig(backward_precision=CommType.FP8, fp8_quantize_dim=16)
    ).backward
    assert not torch.equal(
        e5m2.encode(x, e5m2.create_context()), fp8.forward.encode(x, fp8.forward.create_context())
    )
    bwd_dim = QCommsConfig(
        backward_precision=CommType.FP8, fp8_quantize_dim=16, fp8_quantize_dim_bwd=8
    )
    assert get_qcomm_codecs(bwd_dim).backward.create_context().row_dim == 8
    mx4 = get_qcomm_codecs(
        QCommsConfig(
            forward_precision=CommType.MX4,
            backward_precision=CommType.MX4,
            mx4_quantize_dim=64,
            mx4_rounding_mode="even",
        )
    )
    assert mx4.forward.create_context().row_dim == 64
    assert mx4.backward.create_context().row_dim == 64
    assert get_qcomm_codecs(QCommsConfig(forward_precision=CommType.MX4)).forward.create_context(
    ).row_dim == 32  # fmt: skip  # TorchRec's (fbgemm's) default group


def test_fbgemm_rounding_mode_even_is_accepted_and_others_refused() -> None:
    quantize_utils = pytest.importorskip("fbgemm_gpu.quantize_utils")
    rounding = quantize_utils.RoundingMode
    QCommsConfig(forward_precision=CommType.MX4, mx4_rounding_mode=rounding.even)
    with pytest.raises(ValueError, match=r"mx4_rounding_mode=<RoundingMode.floor: 1>.*even only"):
        QCommsConfig(forward_precision=CommType.MX4, mx4_rounding_mode=rounding.floor)


def test_loss_scales_apply_to_fp16_and_bf16_and_are_ignored_elsewhere(
    caplog: pytest.LogCaptureFixture,
) -> None:
    scaled = get_qcomm_codecs(
        QCommsConfig(
            forward_precision=CommType.FP16,
            backward_precision=CommType.BF16,
            forward_loss_scale=1024.0,
            backward_loss_scale=8.0,
        )
    )
    x = torch.full((8,), 1e-7)  # below float16's normal range: the scale keeps its digits
    fwd = scaled.forward
    assert fwd.encode(x, fwd.create_context()).dtype == torch.float16
    back = fwd.decode(fwd.encode(x, fwd.create_context()), fwd.create_context())
    plain = get_qcomm_codecs(QCommsConfig(forward_precision=CommType.FP16)).forward
    unscaled = plain.decode(plain.encode(x, plain.create_context()), plain.create_context())
    assert (back - x).abs().max() < (unscaled - x).abs().max()
    with caplog.at_level(logging.INFO):
        int8 = get_qcomm_codecs(
            QCommsConfig(forward_precision=CommType.INT8, forward_loss_scale=4.0)
        ).forward
    assert "applies to FP16 and BF16 only" in caplog.text
    y = torch.linspace(-1, 1, 64)
    ref = get_qcomm_codecs(QCommsConfig(forward_precision=CommType.INT8)).forward
    assert torch.equal(int8.encode(y, int8.create_context()), ref.encode(y, ref.create_context()))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"forward_precision": "FP16"}, r"forward_precision='FP16' is not a CommType; pass one "
         r"of CommType.FP32 or 'fp32', CommType.FP16 or 'fp16'"),
        ({"backward_precision": "fp4"}, r"backward_precision='fp4' is not a CommType"),
        ({"forward_precision": 16}, r"forward_precision=16 is not a CommType"),
        ({"backward_precision": None}, r"backward_precision=None is not a CommType"),
        ({"output_dtype": "FP16"}, r"output_dtype='FP16' is not supported by shardrec"),
        ({"fp8_output_dtype": "FP16"}, r"fp8_output_dtype='FP16' is not supported"),
        ({"mx4_quantize_dim": 0}, r"mx4_quantize_dim=0 must be a positive int"),
        ({"fp8_quantize_dim_bwd": True}, r"fp8_quantize_dim_bwd=True must be a positive int"),
        ({"backward_loss_scale": 0.0}, r"backward_loss_scale=0.0 must be a finite number > 0"),
    ],
)  # fmt: skip
def test_bad_values_are_refused_naming_the_argument(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        QCommsConfig(**kwargs)  # type: ignore[arg-type]


def test_misspelt_or_positional_arguments_fail_at_the_call() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'loss_scale'"):
        QCommsConfig(loss_scale=2.0)  # type: ignore[call-arg]  # TorchRec: forward_loss_scale
    # keyword-only (docs/porting.md): TorchRec's positional form fails at the call, not later
    with pytest.raises(TypeError, match="positional argument"):
        QCommsConfig(CommType.FP16, CommType.BF16)  # type: ignore[misc]
    with pytest.raises(TypeError, match="expected a QCommsConfig"):
        get_qcomm_codecs_registry(qcomms_config={"forward_precision": "fp16"})  # type: ignore[arg-type]
    assert isinstance(get_qcomm_codecs(None).forward, NoOpQuantizedCommCodec)


def test_a_codec_takes_fbgemms_sparse_type_as_torchrecs_does() -> None:
    configs = pytest.importorskip("fbgemm_gpu.split_embedding_configs")
    sparse = configs.SparseType
    for name in ("FP32", "FP16", "BF16", "FP8", "INT8", "MX4"):
        assert QuantizedCommCodec(getattr(sparse, name)).comm_precision is CommType[name]
    assert QuantizedCommCodec("bf16").comm_precision is CommType.BF16
    with pytest.raises(ValueError, match=r"QuantizedCommCodec: comm_precision=<SparseType.INT4"):
        QuantizedCommCodec(sparse.INT4)
