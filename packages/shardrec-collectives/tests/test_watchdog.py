"""The heartbeat watchdog with real processes: a SIGSTOPped rank is named and every rank stops
within the timeout; ranks that finish at different times raise no alarm. And the attempt name
that rank 0 gives every rank through the store (`agree_on_attempt`).

The test process hosts the c10d store, as torchrun's agent does, and starts three plain Python
ranks that run the watchdog and then sleep (or stop it after a given time).
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable

import pytest
from torch.distributed import PrefixStore, TCPStore

from shardrec_collectives import EXIT_STATUS, Watchdog, agree_on_attempt

WORLD = 3
TIMEOUT_S = 10.0  # the silence limit is half of it: 5 s, long for a heartbeat thread to starve
# Process start (torch import) on a busy 2-core machine, plus exit and reaping.
SLACK_S = 10.0

RANK_SCRIPT = textwrap.dedent(
    """
    import datetime, sys, time
    from torch.distributed import PrefixStore, TCPStore
    from shardrec_collectives import Watchdog

    port, rank, world, timeout_s, finish_after = sys.argv[1:]
    store = TCPStore("127.0.0.1", int(port), is_master=False,
                     timeout=datetime.timedelta(seconds=30))
    store = PrefixStore("shardrec/attempt_0", store)
    # Everybody joins before anybody watches, as init_process_group guarantees.
    store.add("joined", 1)
    while int(store.add("joined", 0)) < int(world):
        time.sleep(0.05)
    dog = Watchdog(store, rank=int(rank), world_size=int(world),
                   timeout=datetime.timedelta(seconds=float(timeout_s))).start()
    print("started", flush=True)
    for step in range(int(float(finish_after) * 20)):
        dog.progress = step
        time.sleep(0.05)
    dog.stop()
    print("finished", flush=True)
    """
)


def _start_ranks(port: int, finish_after: list[float]) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                RANK_SCRIPT,
                str(port),
                str(rank),
                str(WORLD),
                str(TIMEOUT_S),
                str(finish_after[rank]),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(WORLD)
    ]


def _wait_started(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line == "started\n", line + (p.stdout.read() if p.poll() is not None else "")


def _kill(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _disturb_and_collect(
    procs: list[subprocess.Popen[str]], disturb: Callable[[], None]
) -> list[str]:
    """Once every rank runs its watchdog, `disturb` them; every rank must then exit within
    the timeout (plus slack). Returns their output."""
    try:
        _wait_started(procs)
        disturb()
        t0 = time.monotonic()
        logs = [p.communicate(timeout=TIMEOUT_S + SLACK_S)[0] for p in procs]
        elapsed = time.monotonic() - t0
    finally:
        _kill(procs)
    assert elapsed < TIMEOUT_S + SLACK_S
    return logs


@pytest.fixture
def store() -> TCPStore:
    return TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=30))


@pytest.mark.slow
def test_stopped_rank_is_named_and_every_rank_stops(store: TCPStore) -> None:
    procs = _start_ranks(store.port, [60.0] * WORLD)
    stopped = procs[2]
    logs = _disturb_and_collect(procs, lambda: os.kill(stopped.pid, signal.SIGSTOP))
    # Rank 1 watches rank 2 (the ring) and SIGKILLs it: it runs on this host.
    assert stopped.returncode == -signal.SIGKILL
    for rank in (0, 1):
        assert procs[rank].returncode == EXIT_STATUS, logs[rank]
        assert f"[rank {rank}] shardrec watchdog: rank 2 (pid {stopped.pid} on host" in logs[rank]
        assert "stopped answering" in logs[rank]
        assert "noticed by rank 1" in logs[rank]
        assert "finished" not in logs[rank]


@pytest.mark.slow
def test_ranks_finishing_at_different_times_raise_no_alarm(store: TCPStore) -> None:
    """Rank 1 finishes long before the others (past the silence limit): its watcher, rank 0,
    must skip it and watch rank 2 instead, and nobody may give a verdict."""
    procs = _start_ranks(store.port, [TIMEOUT_S * 0.9, 0.2, TIMEOUT_S * 0.9])
    try:
        logs = [p.communicate(timeout=TIMEOUT_S + 60)[0] for p in procs]
    finally:
        _kill(procs)
    for rank, p in enumerate(procs):
        assert p.returncode == 0, logs[rank]
        assert logs[rank].endswith("finished\n"), logs[rank]
    assert not store.check(["shardrec/attempt_0/watchdog/verdict"])


@pytest.mark.slow
def test_store_that_stops_answering_stops_every_rank_saying_so() -> None:
    """The store's host (torchrun's agent; rank 0 on several nodes) stopped: nobody can be
    named, every rank exits within the limit (plus one store timeout) saying so."""
    masters = [TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=30))]
    procs = _start_ranks(masters[0].port, [60.0] * WORLD)
    # The server goes with its last reference.
    logs = _disturb_and_collect(procs, masters.clear)
    for rank, p in enumerate(procs):
        assert p.returncode == EXIT_STATUS, logs[rank]
        assert f"the c10d store has not answered rank {rank} for" in logs[rank]


def test_verdict_is_none_without_one_and_readable_with_one(store: TCPStore) -> None:
    dog = Watchdog(store, rank=0, world_size=2, timeout=datetime.timedelta(seconds=10))
    assert dog.verdict() is None
    store.set("watchdog/verdict", "rank 1 stopped")
    assert dog.verdict() == "rank 1 stopped"


@pytest.mark.parametrize(
    ("rank", "world", "seconds", "match"),
    [
        (2, 2, 10.0, "rank 2 is outside the world of 2 ranks"),
        (-1, 2, 10.0, "rank -1 is outside"),
        (0, 0, 10.0, "outside the world of 0 ranks"),
        (0, 2, 0.0, "timeout must be positive, got 0:00:00"),
        (0, 2, -5.0, "timeout must be positive"),
    ],
)
def test_bad_arguments(store: TCPStore, rank: int, world: int, seconds: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Watchdog(store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=seconds))


def test_started_twice(store: TCPStore) -> None:
    dog = Watchdog(store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=10)).start()
    with pytest.raises(RuntimeError, match="already started"):
        dog.start()
    dog.stop()


def _agree_all(port: int, world: int, order: list[int]) -> list[str]:
    """Every rank of one attempt calls agree_on_attempt in its own thread (own store client),
    started in `order` with a pause between them; returns the names by rank."""
    names: list[str] = [""] * world
    errors: list[BaseException] = []

    def one(rank: int) -> None:
        client = TCPStore("127.0.0.1", port, is_master=False)
        try:
            names[rank] = agree_on_attempt(
                PrefixStore("shardrec", client),
                rank=rank,
                world_size=world,
                timeout=datetime.timedelta(seconds=20),
            )
        except BaseException as err:  # reported by the test thread
            errors.append(err)

    threads = [threading.Thread(target=one, args=(r,)) for r in order]
    for t in threads:
        t.start()
        time.sleep(0.1)
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    return names


def test_attempt_name_is_agreed_and_new_even_with_a_stale_attempt_in_the_store(
    store: TCPStore,
) -> None:
    """A second attempt whose other ranks start before rank 0 (so they find the first
    attempt's keys) still agrees on one name, different from the first attempt's."""
    first = _agree_all(store.port, 3, [0, 1, 2])
    second = _agree_all(store.port, 3, [2, 1, 0])
    assert len(set(first)) == 1 and len(set(second)) == 1
    assert first[0] != second[0]


def test_attempt_times_out_naming_the_missing_rank(store: TCPStore) -> None:
    with pytest.raises(TimeoutError, match=r"ranks \[1\] did not join"):
        agree_on_attempt(store, rank=0, world_size=2, timeout=datetime.timedelta(seconds=0.3))
    with pytest.raises(TimeoutError, match="rank 0 did not name this attempt"):
        agree_on_attempt(store, rank=1, world_size=2, timeout=datetime.timedelta(seconds=0.3))
