"""Agreeing on errors so that a rank that rejects its input makes every rank raise, not hang.

A rank that raises before a collective leaves its peers blocked in that collective until the
process group's timeout. Code that validates input right before communicating therefore catches
the error, agrees on it with all ranks, and only then raises:

    error = None
    try:
        check_ids(kjt)
    except ValueError as e:
        error = e
    agree_on_error(env, error)   # raises on every rank if any rank had an error
    ... the data all-to-all ...

`kjt_all_to_all(..., error=e)` does the same for free inside its split-size exchange.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from shardrec_collectives import _primitives as prim
from shardrec_collectives._held import blocking
from shardrec_collectives.env import ShardingEnv

__all__ = ["PeerError", "agree_on_error"]


class PeerError(RuntimeError):
    """Raised on the ranks that had no error of their own when other ranks reported one.

    `ranks` lists the ranks that failed; `messages` their errors as `"Type: message"`.
    """

    def __init__(self, ranks: list[int], messages: list[str]) -> None:
        details = "; ".join(f"rank {r}: {m}" for r, m in zip(ranks, messages, strict=True))
        super().__init__(f"ranks {ranks} rejected their input, so every rank stops: {details}")
        self.ranks = ranks
        self.messages = messages

    def __reduce__(self) -> tuple[type[PeerError], tuple[list[int], list[str]]]:
        return (PeerError, (self.ranks, self.messages))


def _describe(error: BaseException | None) -> str:
    return "" if error is None else f"{type(error).__name__}: {error}"


def raise_agreed(env: ShardingEnv, error: BaseException | None, failed: list[int]) -> None:
    """Raise on every rank once all ranks know that `failed` (non-empty) had errors.

    Every rank calls this with the same `failed`, so the message exchange below is a collective
    that all of them join: the failing ranks re-raise their own error, the others a `PeerError`
    that quotes them.
    """
    if env.world_size > 1:
        messages = prim.all_gather_objects(env, _describe(error))
    else:
        messages = [_describe(error)]
    if error is not None:
        raise error
    raise PeerError(failed, [str(messages[r]) for r in failed])


def agree_on_error(env: ShardingEnv, error: BaseException | None) -> None:
    """Every rank passes its own error (or None); if any rank had one, every rank raises.

    Sends: one flag per rank, all-reduced (a `(world_size,)` int32 tensor on `env.device`).
    Then, only when some rank failed, the error messages are all-gathered. The failing ranks
    raise their own error; the others raise `PeerError` naming the failing ranks and messages.
    """
    flags = torch.zeros(env.world_size, dtype=torch.int32, device=env.device)
    if error is not None:
        flags[env.rank] = 1
    if env.world_size > 1:
        blocking(dist.all_reduce(flags, group=env.require_pg(), async_op=True))
    failed = [r for r, f in enumerate(flags.tolist()) if f]
    if failed:
        raise_agreed(env, error, failed)
