"""One-dimensional searches a proposer drives one probe at a time (TorchRec's planner utils).

Both are "ask, then tell" iterators: `next(result_of_previous_probe)` returns the next point to
try, or None when done. A proposer uses them to search a budget (memory for caches, a scale-up
factor) where each probe is a whole partitioning run.
"""

from __future__ import annotations

import math

import torch


class BinarySearchPredicate:
    """Finds the largest integer X in [A, B] for which a step predicate F(X) holds.

    F must be monotone (true up to some X, false after). The search stops early once the
    remaining range is narrower than `tolerance`. The first `next` ignores its argument.
    """

    def __init__(self, A: int, B: int, tolerance: int) -> None:
        self.left = A
        self.right = B
        self.tolerance = tolerance
        self.first = True

    def _mid(self) -> int:
        return self.left + (self.right - self.left) // 2

    def next(self, prior_result: bool) -> int | None:
        if self.right - self.left < self.tolerance:
            return None
        if self.first:
            self.first = False
            return self._mid()
        mid = self._mid()
        if prior_result:
            self.left = mid + 1
        else:
            self.right = mid - 1
        if self.right - self.left < self.tolerance:
            return None
        return self._mid()


class LuusJaakolaSearch:
    """Minimizes f on [A, B] by Luus-Jaakola random search, clamped to the interval.

    Each step samples a point uniformly within +-d of the best point so far (clamped to
    [A, B]); an improvement moves there and shrinks d by 5%. A boundary already evaluated is
    not probed again. Deterministic for a given `seed`; `max_iterations` counts probes.
    """

    def __init__(
        self,
        A: float,
        B: float,
        max_iterations: int,
        seed: int = 42,
        left_cost: float | None = None,
    ) -> None:
        self.left = A
        self.right = B
        self.iteration = -1
        self.max_iterations = max_iterations
        self.gen = torch.Generator()
        self.gen.manual_seed(seed)
        self.x: float = self.uniform(self.left, self.right)
        self.fx: float = 0.0
        self.y: float = math.nan
        self.fleft: float | None = left_cost
        self.fright: float | None = None
        self.d: float = self.right - self.left

    def shrink_right(self, B: float) -> None:
        """Everything at or beyond B is known infeasible (infinite cost)."""
        self.right = B
        self.fright = math.inf
        self.d = self.right - self.left
        self.x = self.clamp(self.x)

    def clamp(self, x: float) -> float:
        return min(max(x, self.left), self.right)

    def uniform(self, A: float, B: float) -> float:
        u = torch.rand(1, generator=self.gen, device="cpu").item()
        return A + (B - A) * u

    def next(self, fy: float) -> float | None:
        self.iteration += 1
        if self.iteration == 0:
            return self.x
        if self.iteration == 1:
            self.fx = fy
        elif self.iteration == self.max_iterations:
            return None
        elif fy <= self.fx:
            self.x = self.y
            self.fx = fy
            self.d = 0.95 * self.d
        if self.y == self.left:
            self.fleft = fy
        elif self.y == self.right:
            self.fright = fy
        while True:
            y = self.clamp(self.x + self.uniform(-self.d, self.d))
            known_left = y == self.left and self.fleft is not None
            known_right = y == self.right and self.fright is not None
            if not (known_left or known_right):
                self.y = y
                return y

    def best(self) -> tuple[float, float]:
        """The best point so far and its cost."""
        return self.x, self.fx
