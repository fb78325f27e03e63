"""TorchRec-style multi-process tests (`torchrec.distributed.test_utils.multi_process`).

TorchRec users' tests look like this, and run unchanged here:

    def _check(rank: int, world_size: int, backend: str) -> None:   # top level of the module
        with MultiProcessContext(rank, world_size, backend) as ctx:
            ...  # ctx.pg, ctx.device

    class MyTest(MultiProcessTestBase):
        def test_it(self) -> None:
            self._run_multi_process_test(callable=_check, world_size=2, backend="gloo")

The ranks are the shared rank pool's processes (`shared_pool`, docs/testing.md), not fresh ones:
the pool's process group is already up, so `MultiProcessContext` adopts it instead of creating
one, and leaves it up on exit. A failure on any rank is raised in the test as the same exception
type with its rank (`RankPool.run`), where TorchRec reports an assertion on the exit count.
"""

from __future__ import annotations

import os
import unittest
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from shardrec_testing._worker import _load_module, _resolve
from shardrec_testing.context import RankContext
from shardrec_testing.pool import _function_reference, shared_pool

__all__ = ["MultiProcessContext", "MultiProcessTestBase"]


@dataclass(eq=False)
class MultiProcessContext:
    """One rank's process group for the body of a `with` block.

    Adopts the default process group when one is up (it must match `rank`, `world_size` and
    `backend`), else creates it from `MASTER_ADDR` / `MASTER_PORT` and destroys it on exit.
    `local_size` sets `LOCAL_WORLD_SIZE` / `LOCAL_RANK` for the block (what `comm`'s helpers
    read); `use_deterministic_algorithms` turns torch's deterministic mode on for the block.
    A record of its arguments (positional as TorchRec's), `device` and, inside the block, `pg`.
    """

    rank: int
    world_size: int
    backend: str = "gloo"
    local_size: int | None = None
    use_deterministic_algorithms: bool = True
    disable_cuda_tf_32: bool = True
    device: torch.device = field(init=False)
    pg: dist.ProcessGroup | None = field(default=None, init=False)
    _owns_pg: bool = field(default=False, init=False, repr=False)
    _saved_env: dict[str, str | None] = field(default_factory=dict, init=False, repr=False)
    _saved_deterministic: bool = field(default=False, init=False, repr=False)
    _saved_tf32: tuple[bool, bool] = field(default=(False, False), init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is outside world_size {self.world_size}")
        local_size = self.local_size
        if local_size is not None and (local_size < 1 or self.world_size % local_size != 0):
            raise ValueError(f"local_size {local_size} must be >= 1 and divide {self.world_size}")
        cuda = self.backend == "nccl"
        self.device = torch.device("cuda", self.rank) if cuda else torch.device("cpu")

    def __enter__(self) -> MultiProcessContext:
        if dist.is_initialized():
            found = (dist.get_rank(), dist.get_world_size(), str(dist.get_backend()))
            wanted = (self.rank, self.world_size, self.backend)
            if found != wanted:
                raise ValueError(
                    f"the process group already up is (rank, world_size, backend) = {found}, "
                    f"not {wanted}; run the test with world_size={found[1]} and "
                    f"backend={found[2]!r}"
                )
        else:
            dist.init_process_group(self.backend, rank=self.rank, world_size=self.world_size)
            self._owns_pg = True
        self.pg = dist.group.WORLD
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        local = self.world_size if self.local_size is None else self.local_size
        for name, value in (("LOCAL_WORLD_SIZE", local), ("LOCAL_RANK", self.rank % local)):
            self._saved_env[name] = os.environ.get(name)
            os.environ[name] = str(value)
        self._saved_deterministic = torch.are_deterministic_algorithms_enabled()
        if self.use_deterministic_algorithms:
            torch.use_deterministic_algorithms(True)
        self._saved_tf32 = (
            torch.backends.cudnn.allow_tf32,
            torch.backends.cuda.matmul.allow_tf32,
        )
        if self.disable_cuda_tf_32 and torch.cuda.is_available():
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
        return self

    def __exit__(self, *exc_info: object) -> None:
        torch.use_deterministic_algorithms(self._saved_deterministic)
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = self._saved_tf32
        for name, old in self._saved_env.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
        if self._owns_pg:
            dist.destroy_process_group()
        self.pg = None


# The user's callable travels as a reference (module, file, qualname) and is loaded on the rank
# the way the pool loads the function it runs, so a test module's function works too.
FunctionRef = tuple[str, str | None, str]


def _call(ctx: RankContext, ref: FunctionRef, kwargs: Mapping[str, object]) -> object:
    fn = _resolve(_load_module(ref[0], ref[1]), ref[2])
    assert callable(fn), ref
    return fn(**{**kwargs, "rank": ctx.rank, "world_size": ctx.world_size})


def _call_per_rank(
    ctx: RankContext, ref: FunctionRef, kwargs_per_rank: Sequence[Mapping[str, object]]
) -> object:
    return _call(ctx, ref, kwargs_per_rank[ctx.rank])


class MultiProcessTestBase(unittest.TestCase):
    """A `unittest.TestCase` whose tests run a function on every rank of a shared pool.

    `callable` must be importable by the ranks (a top-level function of the test module) and
    takes `rank` and `world_size` keywords besides the ones passed through. The pool's backend
    is `backend` from those keywords (default gloo). `mp_init_mode` is accepted for TorchRec's
    signature and unused: the pool's ranks are already started.
    """

    def __init__(self, methodName: str = "runTest", mp_init_mode: str = "forkserver") -> None:
        super().__init__(methodName)
        self._mp_init_mode = mp_init_mode

    def _run_multi_process_test(
        self,
        *,
        callable: Callable[..., object],
        world_size: int = 2,
        **kwargs: object,
    ) -> None:
        pool = shared_pool(world_size, str(kwargs.get("backend", "gloo")))
        pool.run(_call, _function_reference(callable), kwargs)

    def _run_multi_process_test_per_rank(
        self,
        *,
        callable: Callable[..., object],
        world_size: int,
        kwargs_per_rank: Sequence[Mapping[str, object]],
    ) -> None:
        if len(kwargs_per_rank) != world_size:
            raise ValueError(
                f"kwargs_per_rank has {len(kwargs_per_rank)} entries; it needs one per rank "
                f"({world_size})"
            )
        backends = {str(k.get("backend", "gloo")) for k in kwargs_per_rank}
        if len(backends) != 1:
            raise ValueError(f"every rank must use one backend, got {sorted(backends)}")
        pool = shared_pool(world_size, backends.pop())
        pool.run(_call_per_rank, _function_reference(callable), list(kwargs_per_rank))
