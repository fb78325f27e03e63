"""Every work a collective of ours launches is dropped by Python, never by the backend's thread.

Why: since torch 2.13 a tensor that has a Python object keeps that object alive while C++ also
references the tensor, and the C++ reference that brings the count back to one releases the
Python object, which takes the GIL. A process group's backend (gloo's worker threads) holds
each work, and through it the work's tensors, until just after the work completes. If Python
let go of the work first (a `Pending` dropped unwaited, or a blocking call that returned while
the worker was still finishing), the worker's release is the last one and the worker takes the
GIL. While the interpreter shuts down, Python 3.11 ends a thread that asks for the GIL with
`pthread_exit`, whose unwinding through torch's C++ frames aborts the process ("terminate called
without an active exception", SIGABRT): a rank whose program had finished cleanly exits with -6.

So every work is `track`ed here from its launch, and released by Python (at a later launch) only
once it has been seen completed for at least 5 ms (the worker lets go within microseconds of
completing). The backend's own release is then never the last one. At
interpreter exit the works still tracked are left referenced for good (`_keep_at_exit`), and the
exit hook sleeps 20 ms with the GIL released, so that a worker finishing a blocking collective
run outside this package (metrics, checkpoints, a user's own) gets the GIL before shutdown
starts.
"""

from __future__ import annotations

import atexit
import ctypes
import time
from typing import TypeVar

import torch.distributed as dist

__all__ = ["blocking", "track", "tracked_count"]

W = TypeVar("W", bound="dist.Work | None")

_EXIT_GRACE_S = 0.02
_SETTLE_S = 0.005

# [work, when it was first seen completed (None: not yet)]
_tracked: list[list[object]] = []
_used = False


def _prune() -> None:
    now = time.monotonic()
    kept: list[list[object]] = []
    for entry in _tracked:
        work, done_at = entry
        assert isinstance(work, dist.Work)
        if done_at is None:
            if work.is_completed():
                entry[1] = now
        elif isinstance(done_at, float) and now - done_at >= _SETTLE_S:
            continue
        kept.append(entry)
    _tracked[:] = kept


def track(work: W) -> W:
    """Keep `work` referenced until it is safe for Python to release it (module docstring);
    returns it. Call right after every launch (`async_op=True`), blocking calls included."""
    global _used
    if work is None:
        return work
    _used = True
    _prune()
    _tracked.append([work, None])
    return work


def blocking(work: dist.Work | None) -> None:
    """A blocking collective: `track(work)`, then wait for it (`dist.X(..., async_op=True)`
    passed in, so that the work is tracked before it can complete)."""
    if work is not None:
        track(work).wait()


def tracked_count() -> int:
    """Works still referenced here (for tests)."""
    return len(_tracked)


def _keep_at_exit() -> None:
    if not _used:
        return
    if _tracked:
        # Leak them on purpose: the process is ending, and releasing a work is the one thing a
        # backend thread must not be left to do (module docstring).
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(list(_tracked)))
    time.sleep(_EXIT_GRACE_S)


atexit.register(_keep_at_exit)
