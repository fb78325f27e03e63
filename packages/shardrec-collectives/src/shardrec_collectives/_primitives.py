"""Raw collectives behind the public ones: start now, finish on wait, reverse in backward.

Every public collective follows one pattern:

1. At call time, launch the communication asynchronously on the *detached* input. All ranks must
   issue collectives on a process group in the same order; launching at call time (never lazily
   inside `wait()`) makes that order the program order of the calls, which is the same on every
   rank.
2. At `wait()`, wait for the work and connect the received tensor to the input in the autograd
   graph with `link`, whose backward runs the reverse collective on the gradient (synchronously:
   backward of one collective is one blocking call; the autograd engine visits them in the same
   order on every rank because every rank builds the same graph). `linked_all_to_all` and
   `linked_reduce_scatter_v` (and the two-rank pair reduce-scatter of `reduce_scatter_pooled`)
   split that backward in two nodes (`split_linked`): the reverse collective is launched by the
   received tensor's backward and waited for by a node created at launch time, so the
   backward of what the forward computed between launch and wait overlaps it.

With one rank nothing is communicated: the input is its own output.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from shardrec_collectives._held import track
from shardrec_collectives.env import ShardingEnv

# torch 2.13 renamed reduce_scatter_tensor / all_gather_into_tensor to *_single (the old names
# warn); older torch has only the old names.
_REDUCE_SCATTER: Callable[..., dist.Work | None] = getattr(
    dist, "reduce_scatter_single", dist.reduce_scatter_tensor
)
_ALL_GATHER: Callable[..., dist.Work | None] = getattr(
    dist, "all_gather_single", dist.all_gather_into_tensor
)


class Pending:
    """A launched collective: `output` is valid once `work` (if any) has completed."""

    def __init__(self, output: torch.Tensor, work: dist.Work | None) -> None:
        self.output = output
        self.work = work

    def wait(self) -> torch.Tensor:
        if self.work is not None:
            self.work.wait()
            self.work = None
        return self.output


def all_to_all(
    env: ShardingEnv, input: torch.Tensor, in_splits: Sequence[int], out_splits: Sequence[int]
) -> Pending:
    """Rank r sends rows `input[sum(in_splits[:d]) : ...]` to each rank d; receives
    `out_splits[s]` rows from each rank s, concatenated in rank order.

    input: (sum(in_splits), *rest) -> output: (sum(out_splits), *rest)
    """
    if env.world_size == 1:
        return Pending(input, None)
    out = input.new_empty((sum(out_splits), *input.shape[1:]))
    send = input.contiguous()
    work = track(
        dist.all_to_all_single(
            out,
            send,
            output_split_sizes=list(out_splits),
            input_split_sizes=list(in_splits),
            group=env.require_pg(),
            async_op=True,
        )
    )
    return Pending(out, work)


def reduce_scatter_v(env: ShardingEnv, input: torch.Tensor, counts: Sequence[int]) -> Pending:
    """Sum `input` over ranks and give rank r the chunk of `counts[r]` elements at offset
    `sum(counts[:r])`. input: (sum(counts),) -> output: (counts[rank],) once waited.

    Uneven chunks are padded to the largest so that `reduce_scatter_single` (equal chunks, the
    form gloo implements) applies; `Pending.output` is then a view of the padded result.
    """
    if env.world_size == 1:
        return Pending(input, None)
    pg = env.require_pg()
    biggest = max(counts)
    if all(c == biggest for c in counts):
        padded = input.contiguous()
    else:
        # Copy rank by rank with slices: a boolean-mask scatter cost a third of a large
        # data_parallel gradient exchange (measured by the sharding benchmark).
        padded = input.new_zeros((env.world_size, biggest))
        for row, chunk in zip(padded, torch.split(input, list(counts)), strict=True):
            row[: chunk.numel()].copy_(chunk)
        padded = padded.view(-1)
    mine = counts[env.rank]
    if env.backend == "gloo":
        # gloo's reduce-scatter all-reduces the whole input and keeps one chunk: twice the
        # bytes of sending each rank its chunk, measured 2x slower (docs/bench/sharded.md,
        # s10-audit28). Exchange the chunks instead and sum them here on wait.
        received = padded.new_empty((env.world_size * biggest,))
        work = track(dist.all_to_all_single(received, padded, group=pg, async_op=True))
        return _Summed(received, work, env.world_size, mine)
    out = input.new_empty((biggest,))
    work = track(_REDUCE_SCATTER(out, padded, group=pg, async_op=True))
    return Pending(out if mine == biggest else out[:mine], work)


class _Summed(Pending):
    """Every rank's chunk for this rank, received side by side: their sum (in rank order) on
    wait, cut to `mine` elements."""

    def __init__(self, received: torch.Tensor, work: dist.Work, world: int, mine: int) -> None:
        super().__init__(received, work)
        self._world = world
        self._mine = mine

    def wait(self) -> torch.Tensor:
        if self.work is None:
            return self.output
        chunks = super().wait().view(self._world, -1)[:, : self._mine]
        out = torch.add(chunks[0], chunks[1])
        for chunk in chunks[2:]:
            out.add_(chunk)
        self.output = out
        return out


def all_gather_v(env: ShardingEnv, input: torch.Tensor, counts: Sequence[int]) -> Pending:
    """Rank r contributes `input` of `counts[r]` elements; every rank receives all contributions
    concatenated in rank order. input: (counts[rank],) -> output: (sum(counts),) once waited.
    """
    if env.world_size == 1:
        return Pending(input, None)
    pg = env.require_pg()
    biggest = max(counts)
    even = all(c == biggest for c in counts)
    src = (
        input.contiguous() if even else torch.nn.functional.pad(input, (0, biggest - input.numel()))
    )
    out = input.new_empty((env.world_size * biggest,))
    work = track(_ALL_GATHER(out, src, group=pg, async_op=True))
    if even:
        return Pending(out, work)
    return _Unpadded(out, work, counts, biggest)


class _Unpadded(Pending):
    def __init__(
        self, padded: torch.Tensor, work: dist.Work | None, counts: Sequence[int], biggest: int
    ) -> None:
        super().__init__(padded, work)
        self._counts = list(counts)
        self._biggest = biggest

    def wait(self) -> torch.Tensor:
        rows = super().wait().view(len(self._counts), self._biggest)
        return torch.cat([row[:count] for row, count in zip(rows, self._counts, strict=True)])


def all_gather_objects(env: ShardingEnv, obj: object) -> list[object]:
    """Every rank's picklable `obj`, in rank order: the pickled bytes through `all_gather_v`
    (tracked like every work: `_held`), sizes first."""
    if env.world_size == 1:
        return [obj]
    data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8).to(env.device)
    size = torch.tensor([data.numel()], dtype=torch.int64, device=env.device)
    sizes = [int(n) for n in all_gather_v(env, size, [1] * env.world_size).wait().tolist()]
    gathered = all_gather_v(env, data, sizes).wait().cpu()
    return [pickle.loads(chunk.numpy().tobytes()) for chunk in torch.split(gathered, sizes)]


def all_to_all_sync(
    env: ShardingEnv, input: torch.Tensor, in_splits: Sequence[int], out_splits: Sequence[int]
) -> torch.Tensor:
    return all_to_all(env, input, in_splits, out_splits).wait()


class _Link(torch.autograd.Function):
    """Identity from `received` in forward; `reverse(grad)` as the gradient of `source`.

    When `source` does not require grad, a zero-size dummy stands in for it, so that the
    reverse collective still runs in backward: every rank must take part in it, including a rank
    whose own input is a constant (e.g. a rank that owns no tables).
    """

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        source: torch.Tensor,
        received: list[torch.Tensor],
        reverse: Callable[[torch.Tensor], torch.Tensor],
        dummy: bool,
    ) -> torch.Tensor:
        ctx.reverse = reverse  # type: ignore[attr-defined]  # ctx is a free-form namespace
        ctx.dummy = dummy  # type: ignore[attr-defined]  # same
        # `received` arrives inside a list, not as a tensor argument: an output that is an input
        # (or a view of one) may not be modified in place, and callers do modify collective
        # outputs in place (e.g. dividing pooled sums for MEAN).
        return received[0]

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor
    ) -> tuple[torch.Tensor, None, None, None]:
        reverse: Callable[[torch.Tensor], torch.Tensor] = ctx.reverse  # type: ignore[attr-defined]  # set in forward
        source_grad = reverse(grad.contiguous())
        if ctx.dummy:  # type: ignore[attr-defined]  # set in forward
            source_grad = source_grad.new_zeros((0,))
        return source_grad, None, None, None


def needs_grad(env: ShardingEnv, t: torch.Tensor | None) -> bool:
    """Whether a collective on `t` joins the autograd graph (decided at launch).

    With several ranks this must be the same decision on every rank (backward runs the reverse
    collective), so it depends only on grad mode, never on whether this rank's own input
    requires grad. Without communication it follows `t`.
    """
    if not torch.is_grad_enabled() or t is None or not t.is_floating_point():
        return False
    return env.world_size > 1 or t.requires_grad


def link(
    source: torch.Tensor,
    received: torch.Tensor,
    reverse: Callable[[torch.Tensor], torch.Tensor],
    grad: bool,
) -> torch.Tensor:
    """`received`, with `reverse` as the backward from it to `source` when `grad`.

    The result never aliases `source` and, when linked, is not a view, so callers may modify it
    in place (e.g. divide pooled sums for MEAN).
    """
    if received.numel() and (
        received.untyped_storage().data_ptr() == source.untyped_storage().data_ptr()
    ):
        received = received.clone()  # one rank: the "received" tensor is the input itself
    if not grad:
        return received
    if received._base is not None:
        # The unpadded part of an uneven reduce-scatter: autograd forbids in-place changes to
        # a custom Function's output that is a view.
        received = received.clone()
    dummy = not source.requires_grad
    if dummy:
        source = torch.empty((0,), dtype=received.dtype, device=received.device, requires_grad=True)
    with torch.enable_grad():
        # torch.autograd.Function.apply is untyped in torch's stubs.
        out: torch.Tensor = _Link.apply(source, [received], reverse, dummy)  # type: ignore[no-untyped-call]
    return out


def _linked(
    env: ShardingEnv,
    send: torch.Tensor,
    pending: Pending,
    reverse: Callable[[torch.Tensor], torch.Tensor],
) -> Callable[[], torch.Tensor]:
    grad = needs_grad(env, send)

    def finish() -> torch.Tensor:
        return link(send, pending.wait(), reverse, grad)

    return finish


class _ReverseSlot:
    """The reverse collective of one split link, handed from its launching backward node
    (`_Arrived`) to its waiting one (`_Launched`)."""

    def __init__(self) -> None:
        self.pending: Pending | None = None


class _Launched(torch.autograd.Function):
    """Created when the forward collective is launched: a zero-size token from `source`.
    Backward waits for the reverse collective that `_Arrived`'s backward launched and returns
    its result as `source`'s gradient."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        source: torch.Tensor,
        slot: _ReverseSlot,
        dummy: bool,
    ) -> torch.Tensor:
        ctx.slot = slot  # type: ignore[attr-defined]  # ctx is a free-form namespace
        ctx.dummy = dummy  # type: ignore[attr-defined]  # same
        return source.new_empty((0,))

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, token_grad: torch.Tensor
    ) -> tuple[torch.Tensor, None, None]:
        slot: _ReverseSlot = ctx.slot  # type: ignore[attr-defined]  # set in forward
        if slot.pending is None:
            raise RuntimeError(
                "split_linked: the reverse collective was not launched before its wait; "
                "the received tensor's backward must run first (is it part of the loss?)"
            )
        source_grad = slot.pending.wait()
        slot.pending = None
        if ctx.dummy:  # type: ignore[attr-defined]  # set in forward
            source_grad = source_grad.new_zeros((0,))
        return source_grad, None, None


class _Arrived(torch.autograd.Function):
    """Identity from `received` in forward, created when the collective is waited for.
    Backward launches `reverse_async(grad)` and leaves it in the slot for `_Launched`."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        token: torch.Tensor,
        received: list[torch.Tensor],
        reverse_async: Callable[[torch.Tensor], Pending],
        slot: _ReverseSlot,
    ) -> torch.Tensor:
        ctx.reverse_async = reverse_async  # type: ignore[attr-defined]  # ctx is a free-form namespace
        ctx.slot = slot  # type: ignore[attr-defined]  # same
        return received[0]  # inside a list: see `_Link.forward`

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor
    ) -> tuple[torch.Tensor, None, None, None]:
        reverse_async: Callable[[torch.Tensor], Pending] = ctx.reverse_async  # type: ignore[attr-defined]  # set in forward
        slot: _ReverseSlot = ctx.slot  # type: ignore[attr-defined]  # set in forward
        slot.pending = reverse_async(grad.contiguous())
        return grad.new_empty((0,)), None, None, None


def split_linked(
    env: ShardingEnv,
    send: torch.Tensor,
    pending: Pending,
    reverse_async: Callable[[torch.Tensor], Pending],
) -> Callable[[], torch.Tensor]:
    """Like `_linked`, with the backward in two nodes: the reverse collective is launched by
    the received tensor's backward node and waited for by a node created at launch time.

    The autograd engine runs ready nodes newest first, so whatever the forward computed
    between the launch and the wait (a DLRM's dense arch, between the pooled all-to-all's
    launch and its wait) has its backward run while the reverse collective is in flight,
    instead of after a blocking one. The gradient is the same tensor either way. Launches stay
    in the same order on every rank: every rank builds the same graph.
    """
    grad = needs_grad(env, send)
    if not grad:
        return lambda: link(send, pending.wait(), lambda g: g, False)
    dummy = not send.requires_grad
    source = (
        torch.empty((0,), dtype=send.dtype, device=send.device, requires_grad=True)
        if dummy
        else send
    )
    slot = _ReverseSlot()
    with torch.enable_grad():
        token: torch.Tensor = _Launched.apply(source, slot, dummy)  # type: ignore[no-untyped-call]  # Function.apply is untyped in torch's stubs
    done: list[torch.Tensor] = []  # one `_Arrived` per launch: a second call returns the first

    def finish() -> torch.Tensor:
        if done:
            return done[0]
        received = pending.wait()
        if received.numel() and (
            received.untyped_storage().data_ptr() == send.untyped_storage().data_ptr()
        ):
            received = received.clone()  # one rank: the "received" tensor is the input itself
        elif received._base is not None:
            received = received.clone()  # a view (an uneven reduce-scatter's cut): see `link`
        with torch.enable_grad():
            out: torch.Tensor = _Arrived.apply(token, [received], reverse_async, slot)  # type: ignore[no-untyped-call]  # as above
        done.append(out)
        return out

    return finish


def linked_all_to_all(
    env: ShardingEnv, send: torch.Tensor, in_splits: Sequence[int], out_splits: Sequence[int]
) -> Callable[[], torch.Tensor]:
    """Launch `all_to_all` of `send` now; the returned function waits for it and links the
    result to `send` (backward: the reverse all-to-all of the gradient, launched by the
    result's backward and waited for by `send`'s: `split_linked`)."""
    pending = all_to_all(env, send.detach(), in_splits, out_splits)
    return split_linked(env, send, pending, lambda g: all_to_all(env, g, out_splits, in_splits))


def linked_reduce_scatter_v(
    env: ShardingEnv, send: torch.Tensor, counts: Sequence[int]
) -> Callable[[], torch.Tensor]:
    """`reduce_scatter_v` of `send` launched now, linked on wait (backward: `all_gather_v`,
    launched by the result's backward and waited for by `send`'s: `split_linked`)."""
    pending = reduce_scatter_v(env, send.detach(), counts)
    return split_linked(env, send, pending, lambda g: all_gather_v(env, g, counts))


def linked_all_gather_v(
    env: ShardingEnv, send: torch.Tensor, counts: Sequence[int]
) -> Callable[[], torch.Tensor]:
    """`all_gather_v` of `send` launched now, linked on wait (backward: `reduce_scatter_v`)."""
    pending = all_gather_v(env, send.detach(), counts)
    return _linked(env, send, pending, lambda g: reduce_scatter_v(env, g, counts).wait())


def exclusive_cumsum(xs: Sequence[int]) -> list[int]:
    out = [0] * len(xs)
    total = 0
    for i, x in enumerate(xs):
        out[i] = total
        total += x
    return out


def transpose_segments_index(
    sizes: Sequence[Sequence[int]], device: torch.device
) -> torch.Tensor | None:
    """Gather index that reorders segments from row-major to column-major order.

    `sizes[i][j]` is the length of segment (i, j); the input holds the segments in order
    (0,0), (0,1), ..., (1,0), ...; `x[index]` holds them in order (0,0), (1,0), ..., (0,1), ...
    Returns `None` when the order does not change (one row or one column).

    Example: sizes [[2, 1], [1, 0]] on x = [a a b | c] -> [a a c b].
    """
    rows = len(sizes)
    cols = len(sizes[0]) if rows else 0
    if rows <= 1 or cols <= 1:
        return None
    flat = torch.tensor([s for row in sizes for s in row], dtype=torch.int64)
    total = int(flat.sum())
    src_starts = (torch.cumsum(flat, 0) - flat).view(rows, cols).t().reshape(-1)
    new_sizes = flat.view(rows, cols).t().reshape(-1)
    dst_starts = torch.cumsum(new_sizes, 0) - new_sizes
    # One copy of the small per-segment table, without a host sync; the per-id index is built
    # on the device (`output_size` given: repeat_interleave needs no host read either).
    table = host_to_device(torch.stack([src_starts - dst_starts, new_sizes]), device)
    shift = torch.repeat_interleave(table[0], table[1], output_size=total)
    index: torch.Tensor = shift + torch.arange(total, device=device)
    return index


def host_to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CPU tensor copied to `device`. To a GPU through pinned memory without waiting: a
    pageable copy would synchronize the host with the stream."""
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


# Above this many segments one gather through an index beats splitting into views (measured: the
# per-view Python cost of split + cat overtakes the index's extra passes over the data).
_MAX_SPLIT_SEGMENTS = 2048


def transpose_segments(x: torch.Tensor, sizes: Sequence[Sequence[int]]) -> torch.Tensor:
    """Reorder the dim-0 segments of `x` from row-major to column-major (see
    `transpose_segments_index`); differentiable. One copy of `x` at most."""
    rows = len(sizes)
    cols = len(sizes[0]) if rows else 0
    if rows <= 1 or cols <= 1:
        return x
    if rows * cols > _MAX_SPLIT_SEGMENTS:
        index = transpose_segments_index(sizes, x.device)
        assert index is not None
        return x[index]
    pieces = torch.split(x, [s for row in sizes for s in row])
    return torch.cat([pieces[i * cols + j] for j in range(cols) for i in range(rows)])
