"""A pool of spawned rank processes sharing one process group, reused across test cases.

Spawning a rank costs an interpreter plus `import torch` (seconds on a loaded machine), so a test
session starts one pool per world size and sends it many small jobs:

    pool = RankPool(2)
    results = pool.run(my_fn, 3)     # my_fn(ctx, 3) on rank 0 and rank 1; results in rank order

`my_fn` must be a top-level function of an importable module or of a test module (loaded from its
file in the worker). An exception on any rank is re-raised here as the same exception, with a note
naming the rank and the remote traceback as its cause. A job that does not finish within the
timeout (a hang in a collective, a deadlock) kills the pool; the next job starts a fresh one.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import multiprocessing
import multiprocessing.connection
import pickle
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TypeVar

from shardrec_testing import _pickling
from shardrec_testing._ports import free_port
from shardrec_testing._worker import worker_main

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 120.0
# How long the other ranks may keep running once one rank has raised: a rank that raised before a
# collective leaves its peers blocked in it, and they would otherwise hold the test for the whole
# timeout.
ERROR_GRACE_S = 10.0


class RemoteTraceback(Exception):
    """Carries the formatted traceback of an exception raised on a pool rank."""

    def __init__(self, formatted: str) -> None:
        super().__init__(formatted)
        self.formatted = formatted

    def __str__(self) -> str:
        return "\n" + self.formatted


class RankError(RuntimeError):
    """A rank raised an exception that could not be sent back as itself (not picklable)."""

    def __init__(self, rank: int, description: str, formatted: str) -> None:
        super().__init__(f"rank {rank} raised {description}\n{formatted}")
        self.rank = rank


class RankTimeoutError(TimeoutError):
    """Some ranks did not finish a job in time; the pool was killed and will restart."""

    def __init__(self, ranks: list[int], timeout_s: float, qualname: str) -> None:
        super().__init__(
            f"ranks {ranks} did not finish {qualname} within {timeout_s:g} s; "
            "the pool was killed and restarts on the next job"
        )
        self.ranks = ranks


@dataclasses.dataclass(eq=False)
class RankPool:
    """`world_size` spawned processes, each a rank of one `backend` process group.

    Args:
        world_size: number of ranks (>= 1).
        backend: "gloo" (CPU) or "nccl" (one GPU per rank).
        timeout_s: default per-job timeout; also the process group's collective timeout, so a
            rank stuck in a collective eventually fails on its own.
        start_timeout_s: how long starting the processes and the rendezvous may take.
        error_grace_s: once a rank has raised, how long its peers may still take to finish
            (they may be blocked in a collective the raising rank never joined).
    """

    world_size: int
    _: dataclasses.KW_ONLY
    backend: str = "gloo"
    timeout_s: float = DEFAULT_TIMEOUT_S
    start_timeout_s: float = 300.0
    error_grace_s: float = ERROR_GRACE_S
    starts: int = dataclasses.field(default=0, init=False)  # how many times processes were started
    _procs: list[BaseProcess] = dataclasses.field(default_factory=list, init=False, repr=False)
    _conns: list[Connection] = dataclasses.field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {self.world_size}")
        if self.backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be 'gloo' or 'nccl', got {self.backend!r}")

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return bool(self._procs) and all(p.is_alive() for p in self._procs)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs if p.pid is not None]

    def start(self) -> None:
        """Spawn the ranks and wait for the process group; a no-op when already running."""
        if self.running:
            return
        self.close()
        last_error: BaseException | None = None
        for _attempt in range(3):  # a port taken between free_port() and bind: try another
            try:
                self._spawn(free_port())
                self.starts += 1
                return
            except _StartError as exc:
                last_error = exc
                self.close()
        assert last_error is not None
        raise last_error

    def _spawn(self, port: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        for rank in range(self.world_size):
            parent, child = ctx.Pipe(duplex=True)
            proc = ctx.Process(
                target=worker_main,
                args=(child, rank, self.world_size, port, self.backend, self.timeout_s),
                daemon=True,
                name=f"shardrec-rank-{rank}-of-{self.world_size}",
            )
            proc.start()
            child.close()
            self._procs.append(proc)
            self._conns.append(parent)
        deadline = time.monotonic() + self.start_timeout_s
        for rank, conn in enumerate(self._conns):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not conn.poll(remaining):
                raise _StartError(f"rank {rank} did not join the process group in time")
            try:
                reply = pickle.loads(conn.recv_bytes())
            except EOFError:
                raise _StartError(f"rank {rank} exited while starting") from None
            if reply[0] != "ready":
                raise _StartError(f"rank {rank} failed to start: {reply[2]}\n{reply[3]}")

    def close(self) -> None:
        """Stop every rank (politely, then by force) and forget them."""
        for conn in self._conns:
            with contextlib.suppress(OSError, ValueError):
                conn.send_bytes(pickle.dumps(("stop",)))
        deadline = time.monotonic() + 2.0
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()
                proc.join(5.0)
        for conn in self._conns:
            conn.close()
        self._procs = []
        self._conns = []

    def __enter__(self) -> RankPool:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- jobs ------------------------------------------------------------------------------

    def run(self, fn: Callable[..., T], *args: object, timeout_s: float | None = None) -> list[T]:
        """Run `fn(ctx, *args)` on every rank; return the results in rank order.

        Raises the exception of the lowest rank that raised (with a note naming the rank and the
        remote traceback as `__cause__`), or `RankTimeoutError` after `timeout_s`.
        """
        outcomes = self._run(fn, args, timeout_s)
        errors = [(rank, o) for rank, o in enumerate(outcomes) if isinstance(o, _Failure)]
        # Report a rank's own error first, not a peer that was stopped because of it.
        errors.sort(key=lambda item: (item[1].stopped, item[0]))
        if errors:
            rank, failure = errors[0]
            others = [r for r, _ in errors[1:]]
            raise failure.to_exception(rank, others)
        return [o for o in outcomes if not isinstance(o, _Failure)]

    def run_outcomes(
        self, fn: Callable[..., T], *args: object, timeout_s: float | None = None
    ) -> list[T | BaseException]:
        """Like `run`, but return each rank's exception in its slot instead of raising.

        For tests that check that every rank raised (error agreement across ranks).
        """
        outcomes = self._run(fn, args, timeout_s)
        return [
            o.to_exception(rank, []) if isinstance(o, _Failure) else o
            for rank, o in enumerate(outcomes)
        ]

    def _run(
        self, fn: Callable[..., T], args: tuple[object, ...], timeout_s: float | None
    ) -> list[T | _Failure]:
        module_name, module_file, qualname = _function_reference(fn)
        message = pickle.dumps(("run", module_name, module_file, qualname, _pickling.dumps(args)))
        timeout = self.timeout_s if timeout_s is None else timeout_s
        self.start()
        finished = False
        try:
            for conn in self._conns:
                conn.send_bytes(message)
            outcomes: list[T | _Failure] = self._collect(timeout, qualname)
            finished = True
            return outcomes
        finally:
            if not finished:
                # Timed out, interrupted (pytest-timeout, Ctrl-C) or a rank died: the ranks'
                # state is unknown, so the next job gets fresh processes.
                self.close()

    def _collect(self, timeout: float, qualname: str) -> list[T | _Failure]:
        results: dict[int, T | _Failure] = {}
        deadline = time.monotonic() + timeout
        conn_rank = {id(c): r for r, c in enumerate(self._conns)}
        sentinel_rank = {p.sentinel: r for r, p in enumerate(self._procs)}
        while len(results) < self.world_size:
            remaining = deadline - time.monotonic()
            pending = [r for r in range(self.world_size) if r not in results]
            if remaining <= 0:
                if any(isinstance(o, _Failure) for o in results.values()):
                    break  # the raising rank's peers are stuck; report the error, not a hang
                raise RankTimeoutError(pending, timeout, qualname)
            waitables: list[Connection | int] = [self._conns[r] for r in pending]
            waitables += [self._procs[r].sentinel for r in pending]
            ready = multiprocessing.connection.wait(waitables, timeout=remaining)
            for item in ready:
                if isinstance(item, int):
                    rank = sentinel_rank[item]
                    if rank in results or self._conns[rank].poll():
                        continue  # its reply is readable; take it from the pipe
                    code = self._procs[rank].exitcode
                    results[rank] = _Failure(None, f"process exit (code {code})", "", died=True)
                else:
                    assert isinstance(item, Connection)
                    rank = conn_rank[id(item)]
                    if rank in results:
                        continue
                    try:
                        reply = pickle.loads(item.recv_bytes())
                    except EOFError:
                        code = self._procs[rank].exitcode
                        results[rank] = _Failure(None, f"process exit (code {code})", "", True)
                        continue
                    if reply[0] == "ok":
                        # T is what fn returned; pickle cannot say so.
                        results[rank] = _pickling.loads(reply[1])  # type: ignore[assignment]
                    else:
                        results[rank] = _Failure(reply[1], reply[2], reply[3])
                        deadline = min(deadline, time.monotonic() + self.error_grace_s)
        if len(results) < self.world_size or any(
            isinstance(o, _Failure) and o.died for o in results.values()
        ):
            self.close()  # stuck or dead ranks: restart on the next job
            for rank in range(self.world_size):
                stopped = _Failure(
                    None, "no result (stopped after a peer's error)", "", stopped=True
                )
                results.setdefault(rank, stopped)
        return [results[r] for r in range(self.world_size)]


class _StartError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class _Failure:
    """A rank's outcome that is not a result: its pickled exception (None when it does not
    pickle, or when the process died or was stopped), a description, and the traceback."""

    payload: bytes | None
    description: str
    formatted: str
    died: bool = False
    stopped: bool = False

    def to_exception(self, rank: int, other_ranks: list[int]) -> BaseException:
        exc: BaseException
        if self.payload is not None:
            loaded = _pickling.loads(self.payload)
            assert isinstance(loaded, BaseException)
            exc = loaded
            exc.__cause__ = RemoteTraceback(self.formatted)
        else:
            exc = RankError(rank, self.description, self.formatted)
        exc.add_note(f"raised on rank {rank}")
        if other_ranks:
            exc.add_note(f"ranks {other_ranks} failed too")
        return exc


def _function_reference(fn: Callable[..., object]) -> tuple[str, str | None, str]:
    module_name = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module_name, str) or not isinstance(qualname, str) or "<" in qualname:
        raise TypeError(
            f"RankPool.run needs a top-level function of a module, got {fn!r} "
            "(lambdas, nested functions and bound methods cannot be sent to the ranks)"
        )
    module = sys.modules.get(module_name)
    module_file = getattr(module, "__file__", None)
    return module_name, module_file if isinstance(module_file, str) else None, qualname


_SHARED: dict[tuple[int, str], RankPool] = {}


def shared_pool(world_size: int, backend: str = "gloo") -> RankPool:
    """The process-wide pool for (`world_size`, `backend`), started on first use.

    Every test of a session that asks for the same world size gets the same processes; they are
    stopped when the interpreter exits.
    """
    key = (world_size, backend)
    pool = _SHARED.get(key)
    if pool is None:
        pool = RankPool(world_size, backend=backend)
        _SHARED[key] = pool
    pool.start()
    return pool


def close_shared_pools() -> None:
    """Stop every pool `shared_pool` started."""
    for pool in _SHARED.values():
        pool.close()
    _SHARED.clear()


atexit.register(close_shared_pools)
