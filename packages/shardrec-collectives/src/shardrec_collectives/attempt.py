"""One name per attempt of a job, agreed through the c10d store before the process group exists.

torchrun keeps its store across restarts, so the keys of a dead attempt (gloo's peer addresses)
are still there when the next attempt joins, and a rank that reads them fails to connect. Each
attempt's keys therefore go under a prefix of their own. `TORCHELASTIC_RESTART_COUNT` cannot
be that prefix across several machines: it counts one agent's restarts, so a node whose
launcher was replaced (or an agent that restarted its workers for a membership change, which
does not count) disagrees with the others, and the ranks join different groups until the
timeout. Instead, rank 0 of the attempt names it:

    rank r > 0                              rank 0
    set  join/<r> = <fresh token of r>      name = <fresh token>
    wait ack/<token of r>                   loop until every got/<name>/<r> exists:
                                              for each join/<r> value v not answered yet:
                                                set ack/<v> = name
    set  got/<name>/<r>                     return name
    return name

A rank's token is new in every process, so only a live rank 0 can answer it, and every rank
of one attempt gets the name of that attempt's rank 0. Stale `join` values of a dead attempt are
answered too, harmlessly: nobody waits for them. This relies on what torchrun guarantees: every
worker of the previous attempt is stopped before the next attempt starts.
"""

from __future__ import annotations

import datetime
import time
import uuid

from torch.distributed.distributed_c10d import Store

__all__ = ["agree_on_attempt"]

_POLL_S = 0.02


def agree_on_attempt(
    store: Store, *, rank: int, world_size: int, timeout: datetime.timedelta
) -> str:
    """The name of this attempt (module docstring), the same on every rank of the attempt.

    Every rank of the attempt must call it; it returns once every rank has the name, or raises
    `TimeoutError` naming the ranks that did not arrive within `timeout`.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside the world of {world_size} ranks")
    if rank == 0:
        return _name_attempt(store, world_size, timeout)
    token = uuid.uuid4().hex
    store.set(f"join/{rank}", token)
    key = f"ack/{token}"
    try:
        store.wait([key], timeout)
    except RuntimeError as err:
        raise TimeoutError(
            f"rank {rank}: rank 0 did not name this attempt within {timeout} ({err}); rank 0 "
            "never started, or the store was restarted under it"
        ) from None
    name = store.get(key).decode()
    store.set(f"got/{name}/{rank}", "1")
    return name


def _name_attempt(store: Store, world_size: int, timeout: datetime.timedelta) -> str:
    name = uuid.uuid4().hex
    got = [f"got/{name}/{r}" for r in range(1, world_size)]
    answered: set[str] = set()
    deadline = time.monotonic() + timeout.total_seconds()
    while got and not store.check(got):
        for r in range(1, world_size):
            key = f"join/{r}"
            if store.check([key]):
                token = store.get(key).decode()
                if token not in answered:
                    store.set(f"ack/{token}", name)
                    answered.add(token)
        if time.monotonic() > deadline:
            missing = [
                r for r, k in zip(range(1, world_size), got, strict=True) if not store.check([k])
            ]
            raise TimeoutError(
                f"rank 0: ranks {missing} did not join this attempt within {timeout}; they never "
                "started or are stuck before joining"
            )
        time.sleep(_POLL_S)
    return name
