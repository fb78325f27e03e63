"""TorchRec's managed-collision modules: shardrec's against TorchRec 1.8's, unsharded on CPU.

Run: `PYTHONPATH=<packages/*/src> /work/trvenv/bin/python benchmarks/mc_modules.py [--quick]`
(a python with TorchRec 1.8 for its column; without it only shardrec's runs). Prints the
machine, the shape, the median time of one forward per module and the ratio:

- MCH (`MCHManagedCollisionModule`, DistanceLFU) in training, eviction every forward and every
  10th forward, and in evaluation (lookup only);
- HashZch (`HashZchManagedCollisionModule`) lookups (TorchRec's CPU kernel is lookup-only, so
  training runs only for shardrec).

Ids: Zipf(1.05)-like draws over 2**40 (ranks through a random permutation of a 1M pool).
Results: docs/bench/mc_modules.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable

import torch

from shardrec_embedding import mc as ours
from shardrec_jagged import JaggedTensor

try:  # TorchRec is only a comparison point
    from torchrec.modules import hash_mc_modules as tr_hash
    from torchrec.modules import mc_modules as tr_mc
    from torchrec.sparse.jagged_tensor import JaggedTensor as TrJT
except Exception:  # no TorchRec: shardrec's column only
    tr_mc = tr_hash = TrJT = None


def zipf_ids(n: int, pool: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ranks = torch.arange(1, pool + 1, dtype=torch.float64)
    p = ranks.pow(-1.05)
    picks = torch.multinomial(p / p.sum(), n, replacement=True, generator=g)
    raw = torch.randint(0, 1 << 40, (pool,), generator=g)
    return raw[picks]


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def mch(module_lib: object, zch: int, interval: int) -> torch.nn.Module:
    return module_lib.MCHManagedCollisionModule(  # type: ignore[attr-defined, no-any-return]
        zch_size=zch,
        device=torch.device("cpu"),
        eviction_interval=interval,
        eviction_policy=module_lib.DistanceLFU_EvictionPolicy(),  # type: ignore[attr-defined]
        input_hash_size=1 << 40,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    zch, batch = (10_000, 4096) if args.quick else (100_000, 2048 * 20)
    repeat = 3 if args.quick else 15
    torch.set_num_threads(1)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
        f"torch {torch.__version__}, 1 thread"
    )
    print(f"shape: zch_size {zch}, {batch} ids per forward, Zipf(1.05) over 2**40\n")
    batches = [zipf_ids(batch, 1_000_000, s) for s in range(8)]
    lengths = torch.ones(batch, dtype=torch.int64)
    rows = []

    def run(
        make: Callable[[], torch.nn.Module], jt_cls: type, train: bool, fill: bool = True
    ) -> float:
        module = make()
        warm = [{"t": jt_cls(values=b, lengths=lengths)} for b in batches]
        for f in warm[:4] if fill else []:
            module(f)  # fill the table
        module.train(train)
        step = iter(range(10**9))
        return median_ms(lambda: module(warm[next(step) % len(warm)]), repeat)

    cases = [
        ("MCH train, evict every forward", lambda lib: mch(lib, zch, 1), True),
        ("MCH train, evict every 10th", lambda lib: mch(lib, zch, 10), True),
        ("MCH eval (lookup)", lambda lib: mch(lib, zch, 1), False),
    ]
    for name, make, train in cases:
        a = run(lambda m=make: m(ours), JaggedTensor, train)
        b = run(lambda m=make: m(tr_mc), TrJT, train) if tr_mc is not None else float("nan")
        rows.append((name, a, b))
    hz = lambda lib: lib.HashZchManagedCollisionModule(  # noqa: E731
        zch_size=zch, device=torch.device("cpu"), total_num_buckets=1, max_probe=128
    )
    rows.append(
        ("HashZch train (insert + lookup)", run(lambda: hz(ours), JaggedTensor, True), float("nan"))
    )
    ours_eval = run(lambda: hz(ours), JaggedTensor, False)
    theirs_eval = float("nan")
    if tr_hash is not None:
        # TorchRec's CPU kernel cannot insert: its table stays empty (every id misses)
        theirs_eval = run(lambda: hz(tr_hash), TrJT, False, fill=False)
    rows.append(("HashZch eval (TorchRec: empty table)", ours_eval, theirs_eval))
    print(f"{'case':36} {'shardrec ms':>12} {'TorchRec ms':>12} {'TorchRec/ours':>14}")
    for name, a, b in rows:
        print(f"{name:36} {a:12.2f} {b:12.2f} {b / a:14.2f}")


if __name__ == "__main__":
    main()
