"""The body of one spawned rank: join the process group once, then run jobs until told to stop.

Protocol over one duplex pipe per rank, every message a `pickle` byte string (plain pickle rather
than multiprocessing's shared-memory reductions, so a tensor result is a copy that outlives the
worker):

    parent -> worker: ("run", module_name, module_file, qualname, pickled_args) | ("stop",)
    worker -> parent: ("ready",) once, then per job ("ok", pickled_result) or
                      ("err", pickled_exception_or_None, exception_repr, formatted_traceback)
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import importlib.util
import os
import pickle
import sys
import traceback
import types
from multiprocessing.connection import Connection

import torch
import torch.distributed as dist

from shardrec_testing import _pickling
from shardrec_testing.context import RankContext


def _load_module(name: str, file: str | None) -> types.ModuleType:
    """Import `name`, or load it from `file` when it is not importable by name.

    Test modules collected with pytest's `--import-mode=importlib` carry names that are not on
    `sys.path` in a fresh process; loading them from their file under the same name makes
    pickled references to their functions and classes resolve.
    """
    if name in sys.modules:
        return sys.modules[name]
    try:
        return importlib.import_module(name)
    except ImportError:
        if file is None:
            raise
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load module {name!r} from {file!r}")
    module = importlib.util.module_from_spec(spec)
    # Registered before executing: dataclasses and pickle look the module up by name.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _resolve(module: types.ModuleType, qualname: str) -> object:
    obj: object = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _error_message(exc: BaseException) -> tuple[str, bytes | None, str, str]:
    formatted = "".join(traceback.format_exception(exc))
    payload: bytes | None
    try:
        payload = _pickling.dumps(exc)
        _pickling.loads(payload)  # some exceptions pickle but do not unpickle
    except Exception:
        payload = None
    return ("err", payload, repr(exc), formatted)


def worker_main(
    conn: Connection, rank: int, world_size: int, port: int, backend: str, pg_timeout_s: float
) -> None:
    """Entry point of a spawned rank (target of `multiprocessing.Process`)."""
    # Two cores are shared by every rank of every pool: intra-op threads would only contend.
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        dist.init_process_group(
            backend=backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=pg_timeout_s),
        )
    except BaseException as exc:
        conn.send_bytes(pickle.dumps(_error_message(exc)))
        return
    pg = dist.group.WORLD
    assert pg is not None
    if backend == "nccl":
        device = torch.device("cuda", rank % max(torch.cuda.device_count(), 1))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    ctx = RankContext(rank=rank, world_size=world_size, pg=pg, device=device, backend=backend)
    conn.send_bytes(pickle.dumps(("ready",)))
    try:
        while True:
            try:
                message = pickle.loads(conn.recv_bytes())
            except EOFError:
                return  # the parent went away
            if message[0] == "stop":
                return
            _, module_name, module_file, qualname, pickled_args = message
            try:
                fn = _resolve(_load_module(module_name, module_file), qualname)
                args = _pickling.loads(pickled_args)
                assert callable(fn) and isinstance(args, tuple)
                result = fn(ctx, *args)
                reply: tuple[object, ...] = ("ok", _pickling.dumps(result))
            except BaseException as exc:
                reply = _error_message(exc)
            conn.send_bytes(pickle.dumps(reply))
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
