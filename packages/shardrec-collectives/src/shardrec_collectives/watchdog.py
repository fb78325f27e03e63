"""A heartbeat watchdog: a rank that stops answering stops the whole job, with its name.

A rank that is stopped (SIGSTOP, a swapped-out machine, a frozen VM) leaves its peers blocked
in their next collective until the process group's timeout, with an error that does not say
who is missing. The watchdog does not need the stuck rank's help to notice: every rank runs a
background thread that talks to the c10d store (torchrun's agent hosts it, so a stopped rank
does not take it down) over its own connection:

    every `interval` seconds, rank r
      sets   hb/<r>        = "<beat number> <progress>"      (its heartbeat)
      reads  verdict                                         (did anybody give up?)
      reads  hb/<s>        for s = the next rank after r that has not finished, in a ring

Rank r watches rank s: when s's heartbeat has not changed for `silence_limit` seconds (half the
collective timeout, so the watchdog speaks before the collectives' own timeout fires), r writes
one verdict naming s (`compare_set`: the first verdict wins), SIGKILLs s when it runs on the
same host (a stopped process would otherwise keep torchrun waiting 30 s before its SIGKILL),
prints the verdict and exits with `EXIT_STATUS`. Every other rank reads the verdict within one
interval, prints it and exits too, so every rank is gone within about `silence_limit + 2 *
interval`. torchrun then fails the job, or with `--max-restarts` starts it again.

Only a rank whose every thread stopped is caught here: a rank stuck in one call while its
Python threads run (a hung file read in the main thread) keeps beating; its peers' collectives
then fail at the process group's timeout instead.

The store traffic is three small requests per rank per interval (one ring neighbour each),
independent of the world size.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import socket
import sys
import threading
import time
from typing import NoReturn

from torch.distributed.distributed_c10d import Store

__all__ = ["EXIT_STATUS", "Watchdog"]

EXIT_STATUS = 75
"""Exit status of a rank that the watchdog stops (EX_TEMPFAIL: a restart may succeed)."""

_VERDICT = "watchdog/verdict"
_DONE = "done"
_MAX_INTERVAL_S = 1.0


def _hb_key(rank: int) -> str:
    return f"watchdog/hb/{rank}"


def _who_key(rank: int) -> str:
    return f"watchdog/who/{rank}"


class Watchdog:
    """The heartbeat thread of one rank (module docstring). Start it once the process group
    exists (every rank has joined), stop it before destroying the group.

    Args:
        store: the c10d store every rank of the job shares (the one the process group was
            made with, including its per-attempt prefix); the thread uses its own clone.
        rank, world_size: this rank and the job's size.
        timeout: the collective timeout given to `init_process_group`; a rank silent for half
            of it is declared stopped.
    """

    def __init__(
        self,
        store: Store,
        *,
        rank: int,
        world_size: int,
        timeout: datetime.timedelta,
    ) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside the world of {world_size} ranks")
        seconds = timeout.total_seconds()
        if not seconds > 0:
            raise ValueError(f"timeout must be positive, got {timeout}; e.g. timedelta(minutes=5)")
        self.rank = rank
        self.world_size = world_size
        self.timeout_s = seconds
        self.silence_limit_s = seconds / 2
        self.interval_s = min(_MAX_INTERVAL_S, self.silence_limit_s / 10)
        self.progress = 0
        """What this rank last finished (the training step); shown in the verdict."""
        self._store = store
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False
        self._host = socket.gethostname()

    def start(self) -> Watchdog:
        """Publish who this rank is and start beating; returns self."""
        if self._started:
            raise RuntimeError(f"the watchdog of rank {self.rank} is already started")
        self._started = True
        # Its own connection: the main thread may sit in a blocking store call (a barrier).
        store = self._store.clone()  # type: ignore[attr-defined]  # missing from the stubs
        store.set_timeout(datetime.timedelta(seconds=self.silence_limit_s))
        store.set(_who_key(self.rank), f"{os.getpid()} {self._host}")
        store.set(_hb_key(self.rank), f"0 {self.progress}")
        if self.world_size > 1:
            self._thread = threading.Thread(
                target=self._run, args=(store,), name=f"shardrec-watchdog-{self.rank}", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating and mark this rank finished, so that its watcher does not report it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with contextlib.suppress(RuntimeError):  # a store that is gone: the job is over
            self._store.set(_hb_key(self.rank), _DONE)

    def verdict(self) -> str | None:
        """The verdict of any rank's watchdog, if one was given (None otherwise, also when the
        store cannot be reached). A rank whose collective failed asks this before reporting
        the collective's own error: a peer that stopped on a verdict closes its sockets."""
        try:
            if self._store.check([_VERDICT]):
                return self._store.get(_VERDICT).decode()
        except RuntimeError:
            return None
        return None

    def _run(self, store: Store) -> None:
        beat = 0
        started = time.monotonic()
        last_ok = started
        watched = -1
        seen = ""
        seen_at = started
        while not self._stop.wait(self.interval_s):
            now = time.monotonic()
            beat += 1
            try:
                store.set(_hb_key(self.rank), f"{beat} {self.progress}")
                if store.check([_VERDICT]):
                    self._exit(store.get(_VERDICT).decode())
                target, value = self._next_running(store)
                last_ok = now
                if target is None:
                    continue
                if target != watched or value != seen:
                    watched, seen, seen_at = target, value, now
                elif now - seen_at > self.silence_limit_s:
                    self._give_verdict(store, target, value, now - seen_at)
            except RuntimeError as err:
                if self._stop.is_set():
                    return
                failing_s = time.monotonic() - last_ok
                if failing_s > self.silence_limit_s:
                    self._exit(
                        f"shardrec watchdog: the c10d store has not answered rank {self.rank} "
                        f"for {failing_s:.1f} s ({type(err).__name__}: {err}); the process that "
                        "hosts it stopped (torchrun's agent; rank 0 on several nodes or "
                        "without torchrun)"
                    )

    def _next_running(self, store: Store) -> tuple[int | None, str]:
        """The first rank after this one in the ring that has not finished, and its heartbeat
        ("" before its first one)."""
        for step in range(1, self.world_size):
            other = (self.rank + step) % self.world_size
            key = _hb_key(other)
            value = store.get(key).decode() if store.check([key]) else ""
            if value != _DONE:
                return other, value
        return None, ""

    def _give_verdict(self, store: Store, silent: int, last: str, silent_s: float) -> NoReturn:
        who = store.get(_who_key(silent)).decode() if store.check([_who_key(silent)]) else ""
        pid_text, _, host = who.partition(" ")
        progress = last.partition(" ")[2] or "?"
        where = f"pid {pid_text} on host {host}" if who else "not yet started"
        message = (
            f"shardrec watchdog: rank {silent} ({where}) stopped answering: no heartbeat for "
            f"{silent_s:.1f} s (limit {self.silence_limit_s:g} s, half the collective timeout "
            f"of {self.timeout_s:g} s; its last progress: {progress}), noticed by rank "
            f"{self.rank}; stopping every rank"
        )
        agreed = store.compare_set(_VERDICT, "", message).decode()
        if agreed == message and host == self._host and pid_text.isdigit():
            # The silent process cannot act on the verdict (it may be stopped); end it here
            # rather than leave torchrun waiting for it to honour SIGTERM.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(pid_text), signal.SIGKILL)
        self._exit(agreed)

    def _exit(self, verdict: str) -> NoReturn:
        print(f"[rank {self.rank}] {verdict}", file=sys.stderr, flush=True)
        os._exit(EXIT_STATUS)
