"""A rank that finished cleanly exits with status 0, also when its last collectives are still in
flight or just completed as the interpreter shuts down (`shardrec_collectives._held`).

Before the works were tracked, a gloo worker thread could release the last reference to a
collective's tensors during interpreter shutdown, take the GIL there and abort the process
("terminate called without an active exception", SIGABRT): 2-11% of the exits of the script
below. Each round forks two gloo ranks from one parent (one torch import for all of them);
each launches all-to-alls, reduce-scatters, all-gathers and blocking id exchanges on
temporaries, leaves its last ones unwaited (rank 1 a moment later than rank 0, so that they
complete while rank 0 is shutting down) and exits through normal interpreter finalization.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch.distributed as dist

from shardrec_collectives import _held

ROUNDS = 12

SCRIPT = textwrap.dedent(
    """
    import datetime, os, socket, sys, time
    import torch
    import torch.distributed as dist
    from shardrec_collectives import ShardingEnv
    from shardrec_collectives import _held, _primitives as prim
    from shardrec_collectives.ids import all_to_all_ids

    rounds = int(sys.argv[1])
    rank = None
    statuses = []
    for r in range(rounds):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        pids = []
        for child in range(2):
            pid = os.fork()
            if pid == 0:
                rank = child
                break
            pids.append(pid)
        if rank is not None:
            break
        statuses += [os.waitpid(pid, 0)[1] for pid in pids]
    if rank is None:
        print("statuses", statuses)
        sys.exit(0)

    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0,
                          timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    env = ShardingEnv.from_process_group(dist.group.WORLD)
    for i in range(8):
        prim.all_to_all(env, torch.ones(20000) * i, [10000, 10000], [10000, 10000]).wait()
        prim.reduce_scatter_v(env, torch.ones(3001) * i, [1500, 1501]).wait()
        prim.all_gather_v(env, torch.ones(1000 + rank) * i, [1000, 1001]).wait()
        all_to_all_ids(env, torch.arange(10 + i), [5, 5 + i])
    for _ in range(2):  # a launch sees the works above completed; the next one releases them
        time.sleep(0.01)
        prim.all_to_all(env, torch.ones(2), [1, 1], [1, 1]).wait()
    assert _held.tracked_count() <= 2, _held.tracked_count()
    if rank == 1:
        time.sleep(0.05)
    for i in range(3):  # left in flight: the process exits at once
        prim.all_to_all(env, torch.ones(20000) * i, [10000, 10000], [10000, 10000])
        prim.reduce_scatter_v(env, torch.ones(3001) * i, [1500, 1501])
    """
)


def test_ranks_exit_cleanly_with_collectives_in_flight() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROUNDS)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(s for s in result.stdout.splitlines() if s.startswith("statuses"))
    statuses = [int(s) for s in line.removeprefix("statuses [").rstrip("]").split(",")]
    assert len(statuses) == 2 * ROUNDS
    assert statuses == [0] * len(statuses), (statuses, result.stderr[-3000:])
    assert "terminate called" not in result.stderr, result.stderr[-3000:]


class _Work:
    """A stand-in for `dist.Work` with a settable completion (the tracking only asks that)."""

    def __init__(self) -> None:
        self.done = False

    def is_completed(self) -> bool:
        return self.done


def test_a_work_is_released_only_after_it_has_been_seen_completed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_held, "_tracked", [])
    monkeypatch.setattr(dist, "Work", _Work)
    times = iter([0.0, 1.0, 1.001, 1.0061, 1.007])
    monkeypatch.setattr(_held.time, "monotonic", lambda: next(times))
    first, second = _Work(), _Work()
    _held.track(first)  # t=0: in flight
    assert _held.tracked_count() == 1
    first.done = True
    _held.track(second)  # t=1: first seen completed now, kept
    assert _held.tracked_count() == 2
    _held.track(None)  # nothing launched: nothing changes
    _held.track(_Work())  # t=1.001: 1 ms after: still kept
    assert _held.tracked_count() == 3
    _held.track(_Work())  # t=1.0061: 6.1 ms after: released; the others are in flight
    assert _held.tracked_count() == 3
    assert first not in [w for w, _ in _held._tracked]
