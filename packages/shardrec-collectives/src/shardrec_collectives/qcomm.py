"""Quantized communication: TorchRec's `fbgemm_qcomm_codec` API with codecs in plain torch.

A `QCommsConfig` names a precision for each direction of a collective (`forward_precision` for
the pooled embeddings, `backward_precision` for their gradients); `get_qcomm_codecs_registry`
turns it into `{CommOp name: QuantizedCommCodecs}`, which the embedding sharders take as
`qcomm_codecs_registry=` (as TorchRec's do). A codec `encode`s a float tensor into what goes on
the wire and `decode`s it back to float32; `linked_all_to_all` is the all-to-all that does both
around the exchange, forward and backward (the pooled and the sequence all-to-all use it), and
`linked_reduce_scatter` the reduce-scatter (encoded chunks exchanged, decoded, summed in
float32). No fbgemm-gpu: every codec is a few torch ops.

Modules: `_qformats` (the wire formats), `_qcodecs` (`CommType` and the codecs), this one (the
config, the registry, the quantized all-to-all and reduce-scatter, and every public name).

Precisions (the wire dtype; the error of one decoded element, round to nearest):

- FP32: exact (no codec runs).
- FP16: float16, values clamped to +-65504; |error| <= 2^-11 |x| for |x| >= 2^-14, <= 2^-25
  below.
- BF16: bfloat16, clamped to its finite range; |error| <= 2^-8 |x| (2^-133 absolute below
  2^-126).
- FP8 with `fp8_quantize_dim` (row-wise): groups of that many consecutive values share one
  float32 scale (largest |x| of the group -> the format's largest value); forward e4m3
  (|error| <= 2^-4 |x| + amax * 2^-17), backward e5m2 (2^-3 |x| + amax * 2^-32; e4m3 with
  `fp8_bwd_uses_143`). uint8 on the wire: per group the values (padded to 4 bytes) + 8 bytes.
- FP8 without a row dim: TorchRec's fixed "hfp8" format (1 sign, 4 exponent bits with bias 15,
  3 mantissa bits): values clamped to +-0.9375, |error| <= 2^-4 |x| for |x| >= 2^-14, <= 2^-18
  below. For values of unknown range prefer the row-wise form.
- INT8: groups of `row_dim` values (32) stored as uint8 steps between the group's min and max
  with a float32 scale and bias: |error| <= (max - min) / 510 of the group + 1e-8 (fbgemm's
  epsilon in the step) + float32 rounding.
  The wire holds `ceil(row_dim / 4) * 4 + 8` bytes per group.
- MX4 (OCP MX FP4): groups of `mx4_quantize_dim` values (32) share a power-of-two scale
  `2^s` (s = floor(log2(amax)) - 2, one more when amax's mantissa rounds up past 1.75); each
  value is the nearest of +-{0, 0.5, 1, 1.5, 2, 3, 4, 6} x 2^s (saturating at 6):
  |error| <= |x| / 4 + amax / 16. Half a byte per value plus one byte per group (uint8).

Loss scales (`forward_loss_scale`, `backward_loss_scale`; FP16 and BF16 only, as TorchRec):
encode multiplies by the scale before the cast, decode divides after it (so small gradients
stay above float16's subnormal range).

Differences from TorchRec 1.8 (docs/porting.md): `output_dtype`, and MX4 rounding modes other
than `even`, are refused with a message (not implemented); BF16 is kept on CPU/gloo (TorchRec
falls back to FP16 there: its gloo lacked bfloat16); a tensor whose length is not a multiple
of the row dim is padded (TorchRec refuses it); `QCommsConfig` is frozen and keyword-only.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Mapping, Sequence

import torch

from shardrec_collectives import _primitives as prim
from shardrec_collectives._qcodecs import (
    Codec,
    CommType,
    NoOpQuantizedCommCodec,
    QuantizationContext,
    QuantizedCommCodec,
    QuantizedCommCodecs,
    _comm_type,
)
from shardrec_collectives.env import ShardingEnv

__all__ = [
    "CommOp",
    "CommType",
    "NoOpQuantizedCommCodec",
    "QCommsConfig",
    "QuantizationContext",
    "QuantizedCommCodec",
    "QuantizedCommCodecs",
    "checked_codecs",
    "codecs_for",
    "get_qcomm_codecs",
    "get_qcomm_codecs_registry",
    "linked_all_to_all",
    "linked_reduce_scatter",
]


class CommOp(enum.Enum):
    """The collectives a codec registry may name (TorchRec's `CommOp`)."""

    POOLED_EMBEDDINGS_ALL_TO_ALL = "pooled_embeddings_all_to_all"
    POOLED_EMBEDDINGS_REDUCE_SCATTER = "pooled_embeddings_reduce_scatter"
    SEQUENCE_EMBEDDINGS_ALL_TO_ALL = "sequence_embeddings_all_to_all"


@dataclasses.dataclass(frozen=True, kw_only=True)
class QCommsConfig:
    """Precisions of the quantized collectives (TorchRec's `QCommsConfig`).

    forward_precision / backward_precision: of the pooled embeddings / of their gradients.
    forward_loss_scale / backward_loss_scale: FP16 and BF16 only; ignored otherwise (logged).
    fp8_quantize_dim: values per FP8 scale group (row-wise FP8; None: the fixed format).
    fp8_quantize_dim_bwd: the same for the backward (default: fp8_quantize_dim).
    fp8_bwd_uses_143: FP8 gradients as e4m3 instead of e5m2.
    """

    forward_precision: CommType = CommType.FP32
    backward_precision: CommType = CommType.FP32
    forward_loss_scale: float | None = None
    backward_loss_scale: float | None = None
    fp8_quantize_dim: int | None = None
    fp8_quantize_dim_bwd: int | None = None
    fp8_bwd_uses_143: bool | None = False
    fp8_output_dtype: object = None
    mx4_quantize_dim: int | None = None
    mx4_quantize_dim_bwd: int | None = None
    mx4_rounding_mode: object = None
    output_dtype: object = None

    def __post_init__(self) -> None:
        forward = _comm_type("forward_precision", self.forward_precision)
        backward = _comm_type("backward_precision", self.backward_precision)
        object.__setattr__(self, "forward_precision", forward)
        object.__setattr__(self, "backward_precision", backward)
        rounding = self.mx4_rounding_mode
        if rounding is not None and getattr(rounding, "name", rounding) not in ("even", 2):
            raise ValueError(
                f"QCommsConfig: mx4_rounding_mode={rounding!r}: shardrec's MX4 codec rounds the "
                "shared exponent as RoundingMode.even only; leave it None"
            )
        for name in ("output_dtype", "fp8_output_dtype"):
            if getattr(self, name) is not None:
                raise ValueError(
                    f"QCommsConfig: {name}={getattr(self, name)!r} is not supported by shardrec "
                    "(decoded values are float32, cast to the sender's dtype); leave it None"
                )
        for name in (
            "fp8_quantize_dim",
            "fp8_quantize_dim_bwd",
            "mx4_quantize_dim",
            "mx4_quantize_dim_bwd",
        ):
            dim = getattr(self, name)
            if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
                raise ValueError(
                    f"QCommsConfig: {name}={dim!r} must be a positive int (values per shared "
                    "scale) or None"
                )
        for name in ("forward_loss_scale", "backward_loss_scale"):
            scale = getattr(self, name)
            if scale is not None and not (math.isfinite(scale) and scale > 0):
                raise ValueError(f"QCommsConfig: {name}={scale!r} must be a finite number > 0")
        if backward is CommType.FP8 and self.fp8_quantize_dim_bwd is None:
            object.__setattr__(self, "fp8_quantize_dim_bwd", self.fp8_quantize_dim)
        if backward is CommType.MX4 and self.mx4_quantize_dim_bwd is None:
            object.__setattr__(self, "mx4_quantize_dim_bwd", self.mx4_quantize_dim)


def get_qcomm_codecs(qcomms_config: QCommsConfig | None) -> QuantizedCommCodecs:
    """The forward and backward codecs of `qcomms_config` (no-op codecs for None)."""
    codecs = QuantizedCommCodecs()
    if qcomms_config is None:
        return codecs
    c = qcomms_config
    dims = {
        CommType.FP8: (c.fp8_quantize_dim, c.fp8_quantize_dim_bwd),
        CommType.MX4: (c.mx4_quantize_dim, c.mx4_quantize_dim_bwd),
    }
    fwd_dim = dims.get(c.forward_precision, (None, None))[0]
    bwd_dim = dims.get(c.backward_precision, (None, None))[1]
    codecs.forward = QuantizedCommCodec(
        c.forward_precision, c.forward_loss_scale, row_dim=fwd_dim, is_fwd=True
    )
    codecs.backward = QuantizedCommCodec(
        c.backward_precision,
        c.backward_loss_scale,
        row_dim=bwd_dim,
        is_fwd=bool(c.fp8_bwd_uses_143),
    )
    return codecs


def get_qcomm_codecs_registry(
    qcomms_config: QCommsConfig,
    comm_ops: Sequence[CommOp] | None = None,
    device: torch.device | None = None,
) -> dict[str, QuantizedCommCodecs] | None:
    """`{CommOp name: QuantizedCommCodecs}` for `comm_ops` (default: the pooled all-to-all,
    the pooled reduce-scatter and the sequence all-to-all), or None when both precisions are
    FP32. As TorchRec: the reduce-scatter falls back from FP8 and MX4 to FP16 (forward) / BF16
    (backward). The sharded collections apply each entry to its collective (docs/qcomm.md);
    `device` is accepted for TorchRec's signature (shardrec keeps BF16 on CPU)."""
    if not isinstance(qcomms_config, QCommsConfig):
        raise TypeError(
            f"get_qcomm_codecs_registry: expected a QCommsConfig, got {qcomms_config!r}"
        )
    if (
        qcomms_config.forward_precision is CommType.FP32
        and qcomms_config.backward_precision is CommType.FP32
    ):
        return None
    ops = list(comm_ops) if comm_ops is not None else list(CommOp)
    registry: dict[str, QuantizedCommCodecs] = {}
    for op in ops:
        config = qcomms_config
        if op is CommOp.POOLED_EMBEDDINGS_REDUCE_SCATTER:
            if config.forward_precision in (CommType.FP8, CommType.MX4):
                config = dataclasses.replace(config, forward_precision=CommType.FP16)
            if config.backward_precision in (CommType.FP8, CommType.MX4):
                config = dataclasses.replace(config, backward_precision=CommType.BF16)
        registry[CommOp(op).name] = get_qcomm_codecs(config)
    return registry


def codecs_for(
    registry: Mapping[str, object] | None, op: CommOp = CommOp.POOLED_EMBEDDINGS_ALL_TO_ALL
) -> QuantizedCommCodecs | None:
    """The codecs `registry` gives `op`, or None when it quantizes nothing there. Raises for a
    registry that is not `{CommOp name: QuantizedCommCodecs}`."""
    if not registry:
        return None
    if not isinstance(registry, Mapping):
        raise TypeError(
            f"qcomm_codecs_registry must map CommOp names to QuantizedCommCodecs "
            f"(get_qcomm_codecs_registry builds one), got {registry!r}"
        )
    names = {o.name for o in CommOp}
    for key, value in registry.items():
        if key not in names:
            raise ValueError(
                f"qcomm_codecs_registry: unknown key {key!r}; keys are CommOp names "
                f"({', '.join(sorted(names))})"
            )
        if not isinstance(value, QuantizedCommCodecs):
            raise TypeError(
                f"qcomm_codecs_registry[{key!r}] = {value!r}: expected QuantizedCommCodecs"
            )
    found = registry.get(op.name)
    assert found is None or isinstance(found, QuantizedCommCodecs)
    if found is None or (
        isinstance(found.forward, NoOpQuantizedCommCodec)
        and isinstance(found.backward, NoOpQuantizedCommCodec)
    ):
        return None
    return found


def checked_codecs(codecs: object, owner: str) -> QuantizedCommCodecs | None:
    """`codecs` as a collective's codecs (None when it quantizes nothing); raises TypeError
    naming `owner` for anything but a `QuantizedCommCodecs` or None."""
    if codecs is None:
        return None
    if not isinstance(codecs, QuantizedCommCodecs):
        raise TypeError(
            f"{owner}(codecs={codecs!r}): expected QuantizedCommCodecs (get_qcomm_codecs "
            "builds one from a QCommsConfig) or None"
        )
    return codecs_for({CommOp.POOLED_EMBEDDINGS_ALL_TO_ALL.name: codecs})


# -- the quantized all-to-all -----------------------------------------------------------------


def _is_noop(codec: Codec) -> bool:
    return isinstance(codec, NoOpQuantizedCommCodec) or (
        isinstance(codec, QuantizedCommCodec) and codec.comm_precision is CommType.FP32
    )


def _encode(
    codec: Codec, send: torch.Tensor, splits: Sequence[int]
) -> tuple[torch.Tensor, list[int]]:
    """`send` (flat, one segment per rank of `splits` values) encoded segment by segment (each
    decodable alone); the wire tensor and its splits."""
    if _is_noop(codec):
        return send, list(splits)
    ctx = codec.create_context()
    sizes = [codec.calc_quantized_size(n, ctx) for n in splits]
    if sizes == list(splits):  # element-wise codecs: one encode for all segments
        return codec.encode(send, ctx), sizes
    parts = [codec.encode(seg, ctx) for seg in torch.split(send, list(splits)) if seg.numel()]
    wire = torch.cat(parts) if parts else send.new_empty((0,), dtype=codec.quantized_dtype)
    return wire, sizes


def _decode(
    codec: Codec,
    wire: torch.Tensor,
    wire_splits: Sequence[int],
    splits: Sequence[int],
    dtype: torch.dtype,
) -> torch.Tensor:
    """The inverse of `_encode` on received segments: `sum(splits)` values of `dtype`."""
    if _is_noop(codec):
        return wire
    ctx = codec.create_context()
    if list(wire_splits) == list(splits):
        return codec.decode(wire, ctx).to(dtype)
    parts = [
        codec.decode(seg, ctx)[:n]
        for seg, n in zip(torch.split(wire, list(wire_splits)), splits, strict=True)
        if n
    ]
    out = torch.cat(parts) if parts else wire.new_empty((0,), dtype=torch.float32)
    return out.to(dtype)


def linked_all_to_all(
    env: ShardingEnv,
    send: torch.Tensor,
    in_splits: Sequence[int],
    out_splits: Sequence[int],
    codecs: QuantizedCommCodecs,
) -> Callable[[], torch.Tensor]:
    """`_primitives.linked_all_to_all` of a flat float tensor with `codecs`: the forward codec
    encodes each destination's segment before the exchange and decodes each received one
    after it; the backward does the same to the gradient with the backward codec. The result
    has `send`'s dtype. Every rank must pass the same codecs."""
    fwd, bwd = codecs.forward, codecs.backward
    wire, wire_in = _encode(fwd, send.detach(), in_splits)
    wire_out = [fwd.calc_quantized_size(n, fwd.create_context()) for n in out_splits]
    pending = prim.all_to_all(env, wire, wire_in, wire_out)
    grad = prim.needs_grad(env, send)

    def reverse(g: torch.Tensor) -> torch.Tensor:
        g_wire, g_in = _encode(bwd, g.contiguous(), out_splits)
        g_out = [bwd.calc_quantized_size(n, bwd.create_context()) for n in in_splits]
        got = prim.all_to_all_sync(env, g_wire, g_in, g_out)
        return _decode(bwd, got, g_out, in_splits, g.dtype)

    def finish() -> torch.Tensor:
        received = _decode(fwd, pending.wait(), wire_out, out_splits, send.dtype)
        return prim.link(send, received, reverse, grad)

    return finish


def _wire_size(codec: Codec, n: int) -> int:
    return n if _is_noop(codec) else codec.calc_quantized_size(n, codec.create_context())


def linked_reduce_scatter(
    env: ShardingEnv, send: torch.Tensor, counts: Sequence[int], codecs: QuantizedCommCodecs
) -> Callable[[], torch.Tensor]:
    """`_primitives.linked_reduce_scatter_v` of a flat float tensor with `codecs`.

    Forward: the chunk of `counts[r]` values for rank r is encoded on its own by the forward
    codec and sent to r (an all-to-all of the encoded chunks, on every backend: a sum on the
    wire in the codec's format would round every partial sum again and cannot add group-wise
    bytes); each received chunk is decoded to float32 and the chunks are summed in float32, in
    rank order, then cast to `send`'s dtype (an FP32 forward codec sends and sums the chunks as
    they are). So the rounding is one codec round trip per partial sum, none in the sum.
    Backward: this rank's gradient chunk is encoded once by the backward codec, the encoded
    chunks are all-gathered, each rank's part decoded. Every rank must pass the same codecs."""
    fwd, bwd = codecs.forward, codecs.backward
    world, mine = env.world_size, counts[env.rank]
    wire, wire_in = _encode(fwd, send.detach(), counts)
    wire_mine = _wire_size(fwd, mine)
    pending = prim.all_to_all(env, wire, wire_in, [wire_mine] * world)
    grad = prim.needs_grad(env, send)

    def reverse(g: torch.Tensor) -> torch.Tensor:
        g_wire, _ = _encode(bwd, g.contiguous(), [mine])
        g_counts = [_wire_size(bwd, c) for c in counts]
        got = prim.all_gather_v(env, g_wire, g_counts).wait()
        return _decode(bwd, got, g_counts, counts, g.dtype)

    def finish() -> torch.Tensor:
        got = pending.wait()
        chunks = _decode(fwd, got, [wire_mine] * world, [mine] * world, torch.float32)
        rows = chunks.view(world, mine)
        total = rows[0].clone() if world == 1 else torch.add(rows[0], rows[1])
        for row in rows[2:]:
            total.add_(row)
        return prim.link(send, total.to(send.dtype), reverse, grad)

    return finish
