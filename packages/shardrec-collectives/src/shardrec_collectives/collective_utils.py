"""Collective control flow: run a function on one rank and give every rank its result.

TorchRec's `torchrec.distributed.collective_utils`: `is_leader`,
`invoke_on_rank_and_broadcast_result`, `run_on_leader`, `create_on_rank_and_share_result`
(CPU tensors handed to the other ranks of one host through shared memory) and the
collective-validation switch (`init_collective_validation`, `validate_collectives_enabled`).

Differences from TorchRec, all of them refusals instead of hangs:

- a `rank` outside the group raises `ValueError` on every rank (TorchRec's broadcast fails or
  hangs);
- an exception raised by `func` on the chosen rank is raised there as itself and on every other
  rank as a `PeerError` quoting it (TorchRec's other ranks wait in the broadcast until the
  timeout);
- `create_on_rank_and_share_result` ends with a barrier, so that the creator cannot free its
  tensors (and their shared-memory files) before a slower rank has mapped them.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch
import torch.distributed as dist

from shardrec_collectives._held import blocking
from shardrec_collectives.errors import PeerError

__all__ = [
    "create_on_rank_and_share_result",
    "init_collective_validation",
    "invoke_on_rank_and_broadcast_result",
    "is_leader",
    "run_on_leader",
    "validate_collectives_enabled",
]

T = TypeVar("T")

logger = logging.getLogger(__name__)

# The environment variable that switches collective validation on ("1") or off ("0").
VALIDATE_ENV = "TORCHREC_VALIDATE_COLLECTIVES"

_USE_COLLECTIVE_VALIDATION = False
_INITIALIZED = False


def _rank_and_size(pg: dist.ProcessGroup | None) -> tuple[int, int]:
    return (0, 1) if pg is None else (pg.rank(), pg.size())


def is_leader(pg: dist.ProcessGroup | None, leader_rank: int = 0) -> bool:
    """True on the process whose rank in `pg` is `leader_rank` (`pg=None`: one process)."""
    return _rank_and_size(pg)[0] == leader_rank


def _check_rank(pg: dist.ProcessGroup | None, rank: int) -> None:
    size = _rank_and_size(pg)[1]
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < size:
        raise ValueError(
            f"rank {rank!r} is not a rank of the process group of {size} ranks "
            f"(valid: 0..{size - 1}); pass the rank, within the group, that runs the function"
        )


def _broadcast_object(pg: dist.ProcessGroup, obj: object, src: int) -> object:
    """`obj` of global rank `src` on every rank of `pg`: its pickled size, then its bytes, each
    work tracked (`_held`)."""
    device = torch.device("cuda", torch.cuda.current_device()) if _uses_nccl(pg) else None
    mine = dist.get_rank() == src
    data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8) if mine else None
    size = torch.tensor([0 if data is None else data.numel()], dtype=torch.int64, device=device)
    blocking(dist.broadcast(size, src=src, group=pg, async_op=True))
    if data is None:
        data = torch.empty(int(size.item()), dtype=torch.uint8)
    data = data.to(device) if device is not None else data
    blocking(dist.broadcast(data, src=src, group=pg, async_op=True))
    return pickle.loads(data.cpu().numpy().tobytes())


def _uses_nccl(pg: dist.ProcessGroup) -> bool:
    return dist.get_backend(pg) == "nccl"


def invoke_on_rank_and_broadcast_result(
    pg: dist.ProcessGroup | None,
    rank: int,
    func: Callable[..., T],
    *args: Any,
    **kwargs: Any,
) -> T:
    """Call `func(*args, **kwargs)` on `rank` of `pg` only; every rank returns its result.

    The result travels pickled (`broadcast_object_list`), so it must be picklable. A collective:
    every rank of `pg` calls it with the same `rank`.
    """
    _check_rank(pg, rank)
    me, size = _rank_and_size(pg)
    if pg is None or size == 1:
        return func(*args, **kwargs)
    error: BaseException | None = None
    payload: list[object] = [None]
    if me == rank:
        try:
            payload = [(True, func(*args, **kwargs))]
        except Exception as e:  # every rank must learn of it, or the others hang below
            error = e
            payload = [(False, f"{type(e).__name__}: {e}")]
    ok, value = cast(
        tuple[bool, object], _broadcast_object(pg, payload[0], dist.get_global_rank(pg, rank))
    )
    if error is not None:
        raise error
    if not ok:
        raise PeerError([rank], [cast(str, value)])
    return cast(T, value)


def run_on_leader(
    pg: dist.ProcessGroup | None, rank: int
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorator: the function runs on `rank` of `pg`; every rank returns its result."""

    def decorate(func: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(func)
        def wrapped(*args: Any, **kwargs: Any) -> T:
            return invoke_on_rank_and_broadcast_result(pg, rank, func, *args, **kwargs)

        return wrapped

    return decorate


_ShmMeta = tuple[bytes, bytes, int, torch.Size, tuple[int, ...], int, torch.dtype]


def _share(t: torch.Tensor | None) -> _ShmMeta | None:
    if t is None:
        return None
    if t.device.type != "cpu":
        raise ValueError(
            f"create_on_rank_and_share_result shares CPU tensors only, got one on {t.device}; "
            "move it to the CPU in the creator"
        )
    manager, handle, size = t.untyped_storage()._share_filename_cpu_()
    return (
        bytes(manager),
        bytes(handle),
        int(size),
        t.shape,
        tuple(t.stride()),
        int(t.storage_offset()),
        t.dtype,
    )


def _map(meta: _ShmMeta | None) -> torch.Tensor | None:
    if meta is None:
        return None
    manager, handle, size, shape, stride, offset, dtype = meta
    storage = torch.UntypedStorage._new_shared_filename_cpu(manager, handle, size)
    return torch.empty([], dtype=dtype).set_(storage, offset, shape, stride)


def create_on_rank_and_share_result(
    pg: dist.ProcessGroup | None,
    rank: int,
    creator: Callable[..., T],
    extractor: Callable[[T], list[torch.Tensor | None]],
    constructor: Callable[[list[torch.Tensor | None]], T],
    *args: Any,
    **kwargs: Any,
) -> T:
    """`creator(*args, **kwargs)` on `rank` only; its CPU tensors (`extractor(result)`) move to
    shared memory and every other rank rebuilds the result with `constructor(tensors)` over the
    same memory (no copy). `pg` must hold ranks of one host (shared memory is host-local)."""

    _check_rank(pg, rank)
    me, size = _rank_and_size(pg)
    if size == 1:
        return creator(*args, **kwargs)
    kept: list[T] = []

    def create_and_keep() -> list[_ShmMeta | None]:
        res = creator(*args, **kwargs)
        kept.append(res)
        return [_share(t) for t in extractor(res)]

    metas = invoke_on_rank_and_broadcast_result(pg, rank, create_and_keep)
    mapped = None if me == rank else [_map(m) for m in metas]
    # The creator keeps its tensors alive until every rank has mapped them (freed earlier, the
    # shared-memory files are gone before a slow rank opens them).
    blocking(dist.barrier(group=pg, async_op=True))
    return kept[0] if mapped is None else constructor(mapped)


def _resolve_enablement_on_leader() -> bool:
    """Collective validation on or off: `TORCHREC_VALIDATE_COLLECTIVES` "1"/"0", else TorchRec's
    JustKnobs switch (off when it cannot be read)."""
    setting = os.environ.get(VALIDATE_ENV, "")
    if setting in ("0", "1"):
        return setting == "1"
    try:
        return bool(
            torch._utils_internal.justknobs_check(
                "pytorch/torchrec:enable_collective_validation", default=False
            )
        )
    except Exception:
        logger.warning("could not read the collective-validation switch; validation stays off")
        return False


def init_collective_validation(pg: dist.ProcessGroup | None) -> None:
    """Decide once, on rank 0, whether collectives validate their tags; all ranks of `pg` agree."""
    global _USE_COLLECTIVE_VALIDATION, _INITIALIZED
    if _INITIALIZED:
        return
    _USE_COLLECTIVE_VALIDATION = invoke_on_rank_and_broadcast_result(
        pg, 0, _resolve_enablement_on_leader
    )
    _INITIALIZED = True


def validate_collectives_enabled() -> bool:
    """Whether `init_collective_validation` switched validation on (False before it ran)."""
    return _USE_COLLECTIVE_VALIDATION
