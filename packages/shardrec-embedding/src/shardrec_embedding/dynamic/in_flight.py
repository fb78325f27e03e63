"""Slots of in-flight batches: deferred resets and holds until backward.

A training step maps a batch's raw ids to slots and may free slots (eviction, TTL) whose row
and optimizer state are then reset. A batch whose backward has not run yet still owns its
slots' rows: its gradient (and, with a fused optimizer, its update) lands on them later. Two
ways a later step could take such a slot, and what prevents each:

- **mapped ahead** (a train pipeline maps batch i+1 in its input_dist before batch i's
  forward and backward run): the eviction choice is kept (it is the one sequential training
  makes: the id map only depends on the ids), but the *resets* wait. With `defer_resets`,
  `_free` queues `(generation, slots)` instead of resetting, and the lookup of batch i+1
  calls `flush_resets(upto=its step)` after batch i's backward and optimizer step. So the
  pipelined run gives exactly the weights of the sequential one.
- **looked up, backward pending** (a second training forward before the first's backward:
  gradient accumulation over batches): `hold()` taken when a step's rows are looked up, and
  released by its backward (`hold_until_backward`), makes every slot seen since the oldest
  held step unevictable (`protect_below`): eviction takes other slots, or rejects ids when
  none is left.

A hold is also released when its autograd graph is freed without a backward (the output
dropped), so a forward that is never backpropagated does not pin slots for ever.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable

from torch import Tensor

__all__ = ["Hold", "InFlightSlots", "hold_until_backward"]


class Hold:
    """One held step of one table; `release()` (idempotent) frees it."""

    def __init__(self, release: Callable[[], None]) -> None:
        self._release: Callable[[], None] | None = release

    def release(self) -> None:
        fn, self._release = self._release, None
        if fn is not None:
            fn()

    def __del__(self) -> None:
        self.release()


class InFlightSlots:
    """Deferred resets and step holds of one `DynamicTable` (module docstring).

    run_resets: runs the table's reset hooks on slots. generation: the table's current
    generation (training steps so far).
    """

    def __init__(self, run_resets: Callable[[Tensor], None], generation: Callable[[], int]) -> None:
        self.defer_resets = False
        self._run = run_resets
        self._generation = generation
        self._deferred: collections.deque[tuple[int, Tensor]] = collections.deque()
        self._holds: collections.Counter[int] = collections.Counter()
        self.reset_generation: int | None = None
        """While deferred resets run: the generation they were freed at (else None)."""

    def freed(self, slots: Tensor) -> None:
        """Reset `slots` now, or queue them when `defer_resets`."""
        if self.defer_resets:
            self._deferred.append((self._generation(), slots.clone()))
        else:
            self._run(slots)

    def flush_resets(self, upto: int | None = None) -> None:
        """Run the queued resets of slots freed at generation <= `upto` (all: None), oldest
        first, each with the generation it was freed at."""
        while self._deferred and (upto is None or self._deferred[0][0] <= upto):
            generation, slots = self._deferred.popleft()
            self.reset_generation = generation
            try:
                self._run(slots)
            finally:
                self.reset_generation = None

    def drop_resets(self) -> None:
        """Forget queued resets (a load replaced the rows)."""
        self._deferred.clear()

    @property
    def pending_resets(self) -> int:
        return sum(int(s.numel()) for _, s in self._deferred)

    def hold(self, step: int) -> Hold:
        """Keep the slots seen at `step` or later unevictable until the hold is released."""
        self._holds[step] += 1

        def release() -> None:
            self._holds[step] -= 1
            if self._holds[step] <= 0:
                del self._holds[step]

        return Hold(release)

    def protect_below(self, step: int) -> int:
        """Slots last seen at or after the returned step are not evictable at `step`: the
        oldest held step, or `step` itself (the slots this step saw)."""
        return min(step, min(self._holds)) if self._holds else step

    def release_holds(self) -> None:
        """Drop every hold (forwards whose backward will never run)."""
        self._holds.clear()


def hold_until_backward(
    steps: Iterable[tuple[InFlightSlots, int]], outputs: Iterable[Tensor]
) -> None:
    """Hold each `(table.in_flight, step)` of `steps` (the steps whose rows this training
    forward looked up) until the backward through `outputs` reaches one of them (or their
    graph is freed). No-op when no output requires grad."""
    nodes = [t.grad_fn for t in outputs if t.requires_grad and t.grad_fn is not None]
    if not nodes:
        return
    holds = [slots.hold(step) for slots, step in steps]
    if not holds:
        return

    def release(*_: object) -> None:
        for h in holds:
            h.release()

    for node in nodes:
        node.register_hook(release)
