"""EmbeddingBagCollection speed: shardrec vs TorchRec 1.8 vs a loop of nn.EmbeddingBag.

Run: `.venv/bin/python benchmarks/embedding.py` (add `--quick` for a smoke run). Prints the
machine, the shapes, the median of repeated timings and ratios:

1. forward of 26 tables (100k rows, dim 64), batch 2048, 20 ids per bag, fp32, with the
   bandwidth reached ((rows read + output written) bytes / time) beside a large `copy_`'s;
2. forward + backward with dense gradients;
3. kernel options for one lookup group (packed view, cat per call, per-table calls, fbgemm TBE);
4. scaling: 500 tables of mixed dims against 26, per id looked up.
Results and reading: docs/bench/embedding.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    PoolingType,
    batched_embedding_bag,
)
from shardrec_embedding import embedding_bag_collection as ebc_module
from shardrec_embedding._native import native_available
from shardrec_jagged import KeyedJaggedTensor

try:  # TorchRec is only a comparison point; never imported by shardrec packages.
    import torchrec
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TorchrecKJT
except Exception as exc:  # any import failure just drops the column
    torchrec = None
    TORCHREC_ERROR = f"{type(exc).__name__}: {exc}"
else:
    TORCHREC_ERROR = ""


@dataclass(frozen=True)
class Shape:
    tables: int
    rows: int
    dims: tuple[int, ...]  # cycled over the tables
    batch: int
    ids_per_bag: int

    def describe(self) -> str:
        dims = self.dims[0] if len(self.dims) == 1 else "/".join(map(str, self.dims))
        return (
            f"{self.tables} tables x {self.rows} rows x dim {dims}, batch {self.batch}, "
            f"{self.ids_per_bag} ids/bag"
        )


def median_ms(fn: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    return interleaved_ms({"fn": fn}, repeats, warmup)["fn"]


def interleaved_ms(
    fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 2
) -> dict[str, float]:
    """Median ms of each candidate, timed round-robin so that load from other processes
    falls on all candidates alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) * 1e3 for name, ts in times.items()}


def copy_bandwidth_gbs(nbytes: int, repeats: int) -> float:
    src = torch.rand(nbytes // 4)
    dst = torch.empty_like(src).fill_(1.0)  # touch pages so the copy does not page-fault
    ms = median_ms(lambda: dst.copy_(src), repeats)
    return 2 * nbytes / (ms * 1e-3) / 1e9


def configs(shape: Shape) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name=f"t{i}",
            num_embeddings=shape.rows,
            embedding_dim=shape.dims[i % len(shape.dims)],
            feature_names=[f"f{i}"],
            pooling=PoolingType.SUM,
        )
        for i in range(shape.tables)
    ]


def inputs(shape: Shape) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    keys = [f"f{i}" for i in range(shape.tables)]
    n = shape.tables * shape.batch * shape.ids_per_bag
    values = torch.randint(0, shape.rows, (n,), generator=gen)
    lengths = torch.full((shape.tables * shape.batch,), shape.ids_per_bag, dtype=torch.int64)
    return keys, values, lengths


def ours_kjt(keys: list[str], values: torch.Tensor, lengths: torch.Tensor) -> KeyedJaggedTensor:
    return KeyedJaggedTensor(keys=keys, values=values, lengths=lengths)


def torchrec_ebc(shape: Shape, ours: EmbeddingBagCollection) -> Any:
    tables = [
        torchrec.EmbeddingBagConfig(
            name=c.name,
            num_embeddings=c.num_embeddings,
            embedding_dim=c.embedding_dim,
            feature_names=list(c.feature_names),
            pooling=torchrec.PoolingType.SUM,
        )
        for c in ours.embedding_bag_configs()
    ]
    ebc = torchrec.EmbeddingBagCollection(tables=tables, device=torch.device("cpu"))
    ebc.load_state_dict(ours.state_dict())  # same weights: outputs compared below
    return ebc


def bytes_moved(shape: Shape) -> int:
    """Rows read plus pooled output written, fp32."""
    dims = [shape.dims[i % len(shape.dims)] for i in range(shape.tables)]
    rows_read = sum(d * shape.batch * shape.ids_per_bag for d in dims)
    output = sum(d * shape.batch for d in dims)
    return 4 * (rows_read + output)


def zero_grads(module: torch.nn.Module) -> None:
    for p in module.parameters():
        p.grad = None


def fwd_bwd(module: torch.nn.Module, kjt: Any) -> None:
    module(kjt).values().sum().backward()
    zero_grads(module)


def kernel_options(shape: Shape, ebc: EmbeddingBagCollection, repeats: int) -> list[str]:
    """One group's lookup four ways (ids already shifted to group rows)."""
    _, values, _ = inputs(shape)
    weights = [ebc.embedding_bags[f"t{i}"].weight.detach() for i in range(shape.tables)]
    ids = (
        values
        + torch.arange(shape.tables).repeat_interleave(shape.batch * shape.ids_per_bag) * shape.rows
    )
    offsets = torch.arange(0, ids.numel() + 1, shape.ids_per_bag)
    full = torch.cat(weights)  # only to build the fbgemm/cat variants' inputs
    per = shape.batch * shape.ids_per_bag
    local = values.split(per)
    local_offsets = torch.arange(0, per + 1, shape.ids_per_bag)

    def per_table() -> object:
        return [
            torch.nn.functional.embedding_bag(
                v, w, local_offsets, mode="sum", include_last_offset=True
            )
            for v, w in zip(local, weights, strict=True)
        ]

    candidates: dict[str, Callable[[], object]] = {
        "packed view, one embedding_bag (ours)": lambda: batched_embedding_bag(
            weights, ids, offsets
        ),
        "per-table embedding_bag calls": per_table,
    }
    try:
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            DenseTableBatchedEmbeddingBagsCodegen,
        )

        tbe = DenseTableBatchedEmbeddingBagsCodegen(
            [(shape.rows, d) for d in [shape.dims[0]] * shape.tables], use_cpu=True
        )
        with torch.no_grad():
            tbe.weights.copy_(full.view(-1))
        candidates["fbgemm DenseTableBatchedEmbeddingBags"] = lambda: tbe(values, offsets)
    except Exception as exc:  # optional backend
        candidates[f"fbgemm TBE unavailable ({type(exc).__name__})"] = lambda: None
    out = list(interleaved_ms(candidates, repeats).items())
    # Copies all tables on every call: a few repeats say enough.
    cat_ms = median_ms(
        lambda: torch.nn.functional.embedding_bag(
            ids, torch.cat(weights), offsets, mode="sum", include_last_offset=True
        ),
        3,
        warmup=1,
    )
    out.insert(1, ("torch.cat(weights) per call + embedding_bag", cat_ms))
    del full
    base = out[0][1]
    return [f"| {name} | {ms:.2f} | {ms / base:.2f}x of ours |" for name, ms in out]


def torch_path(fn: Callable[[], object]) -> Callable[[], object]:
    """`fn` with the native kernels hidden from the EBC (the path before them, or without a C
    compiler / with SHARDREC_NATIVE=0)."""

    def run() -> object:
        saved = ebc_module.native_applies
        ebc_module.native_applies = lambda *a: False  # type: ignore[assignment]
        try:
            return fn()
        finally:
            ebc_module.native_applies = saved

    return run


def forward_tables(
    shape: Shape, ebc: EmbeddingBagCollection, ref: Any, copy_gbs: float, repeats: int
) -> tuple[float, float | None]:
    keys, values, lengths = inputs(shape)
    kjt = ours_kjt(keys, values, lengths)
    ref_kjt = TorchrecKJT(keys=keys, values=values, lengths=lengths) if ref is not None else None
    if ref is not None:
        torch.testing.assert_close(ebc(kjt).values(), ref(ref_kjt).values())
    bags = [ebc.embedding_bags[f"t{i}"] for i in range(shape.tables)]
    per = shape.batch * shape.ids_per_bag
    split = values.split(per)
    offs = torch.arange(0, per + 1, shape.ids_per_bag)

    def loop() -> torch.Tensor:
        return torch.cat([b(v, offs) for b, v in zip(bags, split, strict=True)], 1)

    candidates: dict[str, Callable[[], object]] = {"ours": lambda: ebc(kjt), "loop": loop}
    if native_available():
        candidates["torch path"] = torch_path(lambda: ebc(kjt))
    if ref is not None:
        candidates["ref"] = lambda: ref(ref_kjt)
    with torch.no_grad():
        ms = interleaved_ms(candidates, repeats)
    ours_ms, loop_ms, ref_ms, torch_ms = ms["ours"], ms["loop"], ms.get("ref"), ms.get("torch path")
    native = "native kernel" if native_available() else "torch path: native kernels unavailable"
    print(f"## forward, {shape.describe()}, fp32 (median ms of {repeats}, interleaved)\n")
    print("| module | ms | bandwidth | TorchRec / module | loop of nn.EmbeddingBag / module |")
    print("|---|---|---|---|---|")
    for name, ms in [
        (f"shardrec EmbeddingBagCollection ({native})", ours_ms),
        ("shardrec EmbeddingBagCollection, torch path", torch_ms),
        ("TorchRec EmbeddingBagCollection", ref_ms),
        ("loop of nn.EmbeddingBag + cat", loop_ms),
    ]:
        if ms is None:
            print(f"| {name} | n/a | | | |")
            continue
        gbs = bytes_moved(shape) / (ms * 1e-3) / 1e9
        vs_ref = "n/a" if ref_ms is None else f"{ref_ms / ms:.2f}x"
        print(
            f"| {name} | {ms:.2f} | {gbs:.1f} GB/s ({100 * gbs / copy_gbs:.0f}% of copy) | "
            f"{vs_ref} | {loop_ms / ms:.2f}x |"
        )
    fb_repeats = max(3, repeats // 2)
    steps: dict[str, Callable[[], object]] = {"ours": lambda: fwd_bwd(ebc, kjt)}
    if native_available():
        steps["torch path"] = torch_path(lambda: fwd_bwd(ebc, kjt))
    if ref is not None:
        steps["ref"] = lambda: fwd_bwd(ref, ref_kjt)
    fb = interleaved_ms(steps, fb_repeats)
    ours_fb, ref_fb = fb["ours"], fb.get("ref")
    print(f"\n## forward + backward (dense grads), same shapes (median ms of {fb_repeats})\n")
    print("| module | ms | TorchRec / module |")
    print("|---|---|---|")
    print(
        f"| shardrec EmbeddingBagCollection ({native}) | {ours_fb:.2f} | "
        f"{'n/a' if ref_fb is None else f'{ref_fb / ours_fb:.2f}x'} (target >= 2x) |"
    )
    if "torch path" in fb and ref_fb is not None:
        torch_fb = fb["torch path"]
        print(
            f"| shardrec EmbeddingBagCollection, torch path | {torch_fb:.2f} | "
            f"{ref_fb / torch_fb:.2f}x |"
        )
    if ref_fb is not None:
        print(f"| TorchRec EmbeddingBagCollection | {ref_fb:.2f} | 1.00x |")
    return ours_ms, ref_ms


def scaling_row(shape: Shape, ours_ms: float, ref_ms: float | None) -> str:
    n = shape.tables * shape.batch * shape.ids_per_bag
    ref = "n/a" if ref_ms is None else f"{ref_ms:.2f}"
    ratio = "n/a" if ref_ms is None else f"{ref_ms / ours_ms:.2f}x"
    return (
        f"| {shape.describe()} | {n} | {ours_ms:.2f} | {1e6 * ours_ms / n:.1f} | {ref} | {ratio} |"
    )


def forward_only(shape: Shape, repeats: int) -> tuple[float, float | None]:
    ebc = EmbeddingBagCollection(configs(shape))
    keys, values, lengths = inputs(shape)
    kjt = ours_kjt(keys, values, lengths)
    ref = torchrec_ebc(shape, ebc) if torchrec is not None else None
    candidates: dict[str, Callable[[], object]] = {"ours": lambda: ebc(kjt)}
    if ref is not None:
        ref_kjt = TorchrecKJT(keys=keys, values=values, lengths=lengths)
        torch.testing.assert_close(ebc(kjt).values(), ref(ref_kjt).values())
        candidates["ref"] = lambda: ref(ref_kjt)
    with torch.no_grad():
        ms = interleaved_ms(candidates, repeats)
    return ms["ours"], ms.get("ref")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few repeats")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch.set_num_threads (default: torch's choice)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    repeats = 3 if args.quick else 10
    rows = 10_000 if args.quick else 100_000
    batch = 256 if args.quick else 2048
    main_shape = Shape(26, rows, (64,), batch, 20)
    # Same ids (~1M) and ids per output row as main_shape, spread over 500 mixed-dim tables.
    wide = Shape(500, rows // 25, (16, 32, 64, 128), batch // 16, 16)

    print(
        f"machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )
    if torchrec is None:
        print(f"TorchRec column skipped: {TORCHREC_ERROR}")
    else:
        print(f"reference: torchrec {getattr(torchrec, '__version__', '?')}")
    copy_gbs = copy_bandwidth_gbs(512 << 20 if not args.quick else 64 << 20, repeats)
    print(f"copy bandwidth (Tensor.copy_, read + write bytes): {copy_gbs:.1f} GB/s\n")

    torch.manual_seed(0)
    ebc = EmbeddingBagCollection(configs(main_shape))
    ref = torchrec_ebc(main_shape, ebc) if torchrec is not None else None
    ours_ms, ref_ms = forward_tables(main_shape, ebc, ref, copy_gbs, repeats)
    del ref

    print(f"\n## kernel options for one group ({main_shape.describe()}), forward, no grad\n")
    print("| option | ms | relative |")
    print("|---|---|---|")
    with torch.no_grad():
        for line in kernel_options(main_shape, ebc, repeats):
            print(line)
    del ebc

    print("\n## scaling: forward ns per id looked up (should not grow with table count)\n")
    print("| shape | ids | ms | ns/id | TorchRec ms | TorchRec / ours |")
    print("|---|---|---|---|---|---|")
    print(scaling_row(main_shape, ours_ms, ref_ms))
    print(scaling_row(wide, *forward_only(wide, repeats)))


if __name__ == "__main__":
    main()
