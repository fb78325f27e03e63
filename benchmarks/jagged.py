"""shardrec_jagged vs TorchRec 1.8 on a Criteo-shaped batch: one row per operation.

Run: ``.venv/bin/python benchmarks/jagged.py`` (``--quick`` for a smoke run). Prints the machine,
the shapes, the load average, the median time per call of ours and TorchRec's (when importable)
and the ratio; for operations that are one kernel or one copy also that kernel alone ("floor")
and TorchRec / floor, the largest speedup any implementation could show. Then the per-kernel
backend comparison (torch-native vs fbgemm) that ``_kernels.py`` is chosen from. Reports only;
asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

import shardrec_jagged as ours
from shardrec_jagged import _fbgemm_kernels, _torch_kernels

F, B, MEAN_IDS, MAX_ID = 26, 512, 8, 1_000_000
KT_DIM = 64  # pooled-embedding width per key for the KeyedTensor rows


def _torchrec() -> ModuleType | None:
    try:
        import torchrec.sparse.jagged_tensor as trc

        return trc
    except Exception as exc:  # missing, or fbgemm/torch mismatch
        print(f"TorchRec column skipped: torchrec not importable ({type(exc).__name__}: {exc})")
        return None


def _load() -> str:
    """1/5/15-minute load averages: the machine is shared, so every run records them."""
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unavailable"


def timeit(*fns: Callable[[], object], inner: int, repeats: int) -> list[float]:
    """Median over ``repeats`` of the mean microseconds per call over ``inner`` calls, per fn.

    The functions are timed in alternation (A, B, A, B, ...), so that load from other processes
    on a shared machine hits both sides alike; the order rotates every repeat (A B C, B C A,
    ...), so that no side always runs right after another one.
    """
    for fn in fns:
        for _ in range(max(inner // 10, 3)):
            fn()
    samples: list[list[float]] = [[] for _ in fns]
    for r in range(repeats):
        for k in range(len(fns)):
            i = (r + k) % len(fns)
            fn = fns[i]
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            samples[i].append((time.perf_counter() - start) / inner * 1e6)
    return [statistics.median(s) for s in samples]


def make_batch(weighted: bool, seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    keys = [f"cat_{i}" for i in range(F)]
    lengths = torch.randint(0, 2 * MEAN_IDS + 1, (F * B,), generator=g, dtype=torch.int32)
    n = int(lengths.sum())
    values = torch.randint(0, MAX_ID, (n,), generator=g)
    weights = torch.rand(n, generator=g) if weighted else None
    return {"keys": keys, "values": values, "lengths": lengths, "weights": weights}


def ops(lib: Any, batch: dict[str, Any]) -> dict[str, Callable[[], object]]:
    """The benchmarked operations, written once against the shared TorchRec API."""
    kjt_cls, kt_cls = lib.KeyedJaggedTensor, lib.KeyedTensor
    keys, values, lengths, weights = (batch[k] for k in ("keys", "values", "lengths", "weights"))

    def fresh() -> Any:
        return kjt_cls(keys=keys, values=values, lengths=lengths, weights=weights)

    synced = fresh().sync()
    half = F // 2
    a = kjt_cls(
        keys=keys[:half],
        values=values[: synced.offset_per_key()[half]],
        lengths=lengths[: half * B],
        weights=None if weights is None else weights[: synced.offset_per_key()[half]],
    ).sync()
    b_keys = [f"{k}_b" for k in keys[:half]]
    b = kjt_cls(keys=b_keys, values=a.values(), lengths=a.lengths(), weights=a.weights_or_none())
    b.sync()
    reversed_idx = list(range(F))[::-1]

    def to_dict() -> object:
        synced._jt_dict = None  # both libraries cache to_dict; time the computation
        return synced.to_dict()

    g = torch.Generator().manual_seed(1)
    kts = [
        kt_cls.from_tensor_list(
            keys[i * half : (i + 1) * half],
            [torch.rand(B, KT_DIM, generator=g) for _ in range(half)],
        )
        for i in range(2)
    ]
    groups = [keys[0::2], keys[1::2]]
    return {
        "construct+offsets": lambda: fresh().offsets(),
        "construct+length_per_key": lambda: fresh().length_per_key(),
        "permute (reversed keys)": lambda: synced.permute(reversed_idx),
        "split into 4 groups": lambda: synced.split([7, 7, 6, 6]),
        "to_dict": to_dict,
        "getitem": lambda: synced["cat_13"],
        "concat of 2": lambda: kjt_cls.concat([a, b]),
        "KeyedTensor.regroup (2 groups)": lambda: kt_cls.regroup(kts, groups),
        "KeyedTensor.to_dict": lambda: kts[0].to_dict(),
    }


def floors(batch: dict[str, Any]) -> dict[str, Callable[[], object]]:
    """The irreducible tensor work of the operations that are one kernel or one copy.

    Timed alongside ours and TorchRec's: an operation can be at most (TorchRec / floor) times
    faster than TorchRec, whatever its Python side costs. Uses the kernel ``_kernels`` picks.
    """
    from shardrec_jagged import _kernels

    keys, values, lengths, weights = (batch[k] for k in ("keys", "values", "lengths", "weights"))
    kjt = ours.KeyedJaggedTensor(keys=keys, values=values, lengths=lengths, weights=weights).sync()
    lpk, half = kjt.length_per_key(), F // 2
    order = list(range(F))[::-1]
    n_a = kjt.offset_per_key()[half]
    a_values, a_lengths = values[:n_a], lengths[: half * B]
    a_weights = None if weights is None else weights[:n_a]
    kt_values = torch.rand(B, half * KT_DIM)
    kt_widths = [KT_DIM] * half

    def concat() -> object:
        out = [torch.cat([a_values, a_values]), torch.cat([a_lengths, a_lengths])]
        if a_weights is not None:
            out.append(torch.cat([a_weights, a_weights]))
        return out

    return {
        "construct+offsets": lambda: _kernels.lengths_to_offsets(lengths),
        "construct+length_per_key": lambda: _kernels.length_per_key(lengths, F, B),
        "permute (reversed keys)": lambda: _kernels.permute_kjt(
            (values, weights, lengths), lpk, order, B
        ),
        "concat of 2": concat,
        "KeyedTensor.to_dict": lambda: kt_values.split_with_sizes(kt_widths, dim=1),
    }


def kernel_rows(
    batch: dict[str, Any],
) -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
    """(name, torch-native call, fbgemm call) for each kernel with an fbgemm candidate."""
    lengths, values, weights = batch["lengths"], batch["values"], batch["weights"]
    lengths_2d = lengths.view(F, B)
    lpk = lengths_2d.sum(1).tolist()
    order = list(range(F))[::-1]
    tk, fk = _torch_kernels, _fbgemm_kernels
    rows = [
        (
            "lengths_to_offsets (F*B)",
            lambda: tk.lengths_to_offsets(lengths),
            lambda: fk.lengths_to_offsets(lengths),
        ),
        (
            "batched_lengths_to_offsets (F, B)",
            lambda: tk.batched_lengths_to_offsets(lengths_2d),
            lambda: fk.batched_lengths_to_offsets(lengths_2d),
        ),
        (
            "length_per_key (segment sums)",
            lambda: tk.length_per_key(lengths, F, B),
            lambda: fk.length_per_key(lengths, F, B),
        ),
        (
            "permute values+lengths",
            lambda: tk.permute_kjt((values, weights, lengths), lpk, order, B),
            lambda: fk.permute_kjt((values, weights, lengths), lpk, order, B),
        ),
    ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few repeats, for a smoke run")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch intra-op threads (default: torch's choice)"
    )
    parser.add_argument(
        "--repeats", type=int, default=9, help="timed repeats per row (the median is printed)"
    )
    parser.add_argument(
        "--inner", type=int, default=200, help="calls per timed repeat (the mean is one sample)"
    )
    parser.add_argument(
        "--only", default="", help="comma-separated substrings: time only matching operations"
    )
    parser.add_argument(
        "--no-kernels", action="store_true", help="skip the torch-vs-fbgemm kernel comparison"
    )
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    inner, repeats = (20, 3) if args.quick else (args.inner, args.repeats)
    only = [o for o in args.only.split(",") if o]

    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cpus ({torch.get_num_threads()} torch threads), "
        f"torch {torch.__version__}, "
        f"fbgemm {'yes' if ours.fbgemm_available() else 'no'}"
    )
    print(
        f"shape: F={F} features, B={B}, ~{MEAN_IDS} ids per bag (0..{2 * MEAN_IDS}), "
        f"ids < {MAX_ID}; KeyedTensor: 2 x {F // 2} keys x {KT_DIM} wide; "
        f"median of {repeats} x {inner} calls"
    )
    print(f"load average at start: {_load()}")
    trc = _torchrec()
    for weighted in (False, True):
        batch = make_batch(weighted)
        print(f"\n{'weighted' if weighted else 'unweighted'} batch: {batch['values'].numel()} ids")
        print(
            f"{'operation':34} {'ours us':>10} {'torchrec us':>12} {'speedup':>8} "
            f"{'floor us':>9} {'max speedup':>12}"
        )
        mine = ops(ours, batch)
        theirs = ops(trc, batch) if trc is not None else {}
        floor = floors(batch)
        for name, fn in mine.items():
            if only and not any(o in name for o in only):
                continue
            fns = [fn] + [d[name] for d in (theirs, floor) if name in d]
            times = timeit(*fns, inner=inner, repeats=repeats)
            t_ours = times[0]
            t_ref = times[1] if name in theirs else None
            t_floor = times[-1] if name in floor else None
            ref = "-" if t_ref is None else f"{t_ref:.1f}"
            ratio = "-" if t_ref is None else f"{t_ref / t_ours:.1f}x"
            fl = "-" if t_floor is None else f"{t_floor:.1f}"
            best = "-" if t_ref is None or t_floor is None else f"{t_ref / t_floor:.1f}x"
            print(f"{name:34} {t_ours:10.1f} {ref:>12} {ratio:>8} {fl:>9} {best:>12}")
    print(f"\nload average at end: {_load()}")

    if args.no_kernels:
        return
    if not ours.fbgemm_available():
        print("\nbackend comparison skipped: fbgemm_gpu not importable")
        return
    for weighted in (False, True):
        batch = make_batch(weighted)
        print(f"\nkernels, torch-native vs fbgemm ({'weighted' if weighted else 'unweighted'})")
        print(f"{'kernel':34} {'torch us':>10} {'fbgemm us':>10} {'faster':>8}")
        for name, t_fn, f_fn in kernel_rows(batch):
            tt, tf = timeit(t_fn, f_fn, inner=inner, repeats=repeats)
            print(f"{name:34} {tt:10.1f} {tf:10.1f} {'torch' if tt <= tf else 'fbgemm':>8}")


if __name__ == "__main__":
    main()
