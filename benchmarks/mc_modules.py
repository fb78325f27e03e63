"""TorchRec's managed-collision modules: shardrec's against TorchRec 1.8's, unsharded on CPU.

Run: `PYTHONPATH=<packages/*/src> /work/trvenv/bin/python benchmarks/mc_modules.py [--quick]`
(a python with TorchRec 1.8 for its column; without it only shardrec's runs). Prints the
machine, the shape, the median time of one forward per module and the ratio:

- MCH (`MCHManagedCollisionModule`, DistanceLFU) in training, eviction every forward and every
  10th forward, and in evaluation (lookup only);
- HashZch (`HashZchManagedCollisionModule`) lookups (TorchRec's CPU kernel is lookup-only, so
  training runs only for shardrec);
- `ManagedCollisionEmbeddingBagCollection` (MCH, DistanceLFU, eviction every forward; dim 64,
  bags of 20 ids, SUM pooling): one training step, forward and backward of the pooled sum.

Times are process-CPU (one thread; steadier than wall time on a shared machine).

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
    import torchrec as tr_root
    from torchrec.modules import hash_mc_modules as tr_hash
    from torchrec.modules import mc_embedding_modules as tr_mce
    from torchrec.modules import mc_modules as tr_mc
    from torchrec.sparse.jagged_tensor import JaggedTensor as TrJT
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TrKJT
except Exception:  # no TorchRec: shardrec's column only
    tr_root = tr_mce = tr_mc = tr_hash = TrJT = TrKJT = None

import shardrec_embedding as ours_root
from shardrec_jagged import KeyedJaggedTensor


def zipf_ids(n: int, pool: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ranks = torch.arange(1, pool + 1, dtype=torch.float64)
    p = ranks.pow(-1.05)
    picks = torch.multinomial(p / p.sum(), n, replacement=True, generator=g)
    raw = torch.randint(0, 1 << 40, (pool,), generator=g)
    return raw[picks]


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median process-CPU ms of `repeat` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append((time.process_time() - t0) * 1e3)
    return statistics.median(times)


def mc_ebc(root: object, mce: object, mc_lib: object, zch: int) -> torch.nn.Module:
    """`ManagedCollisionEmbeddingBagCollection` of one table (dim 64) with an MCH module."""
    cfg = root.EmbeddingBagConfig(  # type: ignore[attr-defined]
        name="t", embedding_dim=64, num_embeddings=zch, feature_names=["f"]
    )
    ebc = root.EmbeddingBagCollection(tables=[cfg])  # type: ignore[attr-defined]
    mcc = mc_lib.ManagedCollisionCollection(  # type: ignore[attr-defined]
        managed_collision_modules={"t": mch(mc_lib, zch, 1)}, embedding_configs=[cfg]
    )
    return mce.ManagedCollisionEmbeddingBagCollection(  # type: ignore[attr-defined, no-any-return]
        ebc, mcc, return_remapped_features=False
    )


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
    parser.add_argument("--skip-hash", action="store_true", help="MCH and the MC-EBC only")
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

    def run_ebc(module: torch.nn.Module, kjt_cls: type, bag: int) -> float:
        kjts = [
            kjt_cls(
                keys=["f"],
                values=b,
                lengths=torch.full((b.numel() // bag,), bag, dtype=torch.int64),
            )
            for b in batches
        ]
        for k in kjts[:4]:
            module(k)  # fill the table
        module.train(True)
        step = iter(range(10**9))

        def one() -> None:
            out = module(kjts[next(step) % len(kjts)])
            pooled = out[0] if isinstance(out, tuple) else out
            pooled.values().sum().backward()
            module.zero_grad()

        return median_ms(one, repeat)

    bag = 20 if batch % 20 == 0 else 1
    a = run_ebc(mc_ebc(ours_root, ours, ours, zch), KeyedJaggedTensor, bag)
    b = float("nan")
    if tr_mce is not None:
        b = run_ebc(mc_ebc(tr_root, tr_mce, tr_mc, zch), TrKJT, bag)
    rows.append(("MC-EBC train step (fwd + bwd)", a, b))
    if args.skip_hash:
        print_rows(rows)
        return
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
    print_rows(rows)


def print_rows(rows: list[tuple[str, float, float]]) -> None:
    print(f"{'case':36} {'shardrec ms':>12} {'TorchRec ms':>12} {'TorchRec/ours':>14}")
    for name, a, b in rows:
        print(f"{name:36} {a:12.2f} {b:12.2f} {b / a:14.2f}")


if __name__ == "__main__":
    main()
