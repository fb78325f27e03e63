"""Quantized inference: model bytes and pooled lookup time for FP32, FP16, INT8, INT4.

Run: `.venv/bin/python benchmarks/inference.py` (`--quick` for a smoke run, `--threads 1` for
one torch thread, `--profile` for a per-op breakdown of our INT8 forward). Shapes (issue 9): 26
tables x 100k rows x dim 128, batch 512, 20 ids per bag, uniform ids. Contenders: shardrec's
`QuantEmbeddingBagCollection` (FP32: the float `EmbeddingBagCollection`), TorchRec 1.8's
`torchrec.quant.embedding_modules.EmbeddingBagCollection` (FP32: its float EBC) on the same
weights and ids, and our INT8 kernel call alone (the module minus its overhead).

The machine this runs on is shared with other jobs, so every contender of every dtype runs once
per round, in turn (load drifting over the run hits all of them alike), and each cell is the
median over rounds of wall time and of process CPU time (CPU > wall: both threads busy, or
spinning at a barrier; wall >> CPU: descheduled). Load averages are printed per row. Results
and reading: docs/bench/inference.md. Reports only; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn
from torch.ao.quantization import PlaceholderObserver

from shardrec_embedding import (
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    QuantConfig,
    QuantEmbeddingBagCollection,
)
from shardrec_jagged import KeyedJaggedTensor

try:  # TorchRec is only a comparison point; never imported by shardrec packages.
    import torchrec
    from torchrec.modules.embedding_configs import QuantConfig as TorchrecQuantConfig
    from torchrec.quant.embedding_modules import EmbeddingBagCollection as TorchrecQEBC
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor as TorchrecKJT
except Exception as exc:  # any import failure just drops the column
    torchrec = None
    TORCHREC_ERROR = f"{type(exc).__name__}: {exc}"
else:
    TORCHREC_ERROR = ""

DTYPES = {"FP32": torch.float32, "FP16": torch.float16, "INT8": torch.int8, "INT4": torch.quint4x2}
Timed = tuple[float, float]  # (median wall ms, median process CPU ms)


def interleaved(
    fns: dict[str, Callable[[int], object]], warmup: int, repeats: int
) -> dict[str, Timed]:
    """Median wall and process-CPU ms of each fn; all fns run once per round, in turn."""
    for i in range(warmup):
        for fn in fns.values():
            fn(i)
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for i in range(repeats):
        for name, fn in fns.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn(i)
            wall[name].append((time.perf_counter() - start) * 1e3)
            cpu[name].append((time.process_time() - start_cpu) * 1e3)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in fns}


def module_bytes(module: nn.Module) -> int:
    """Bytes of the distinct storages of a module's parameters and buffers."""
    seen: dict[int, int] = {}
    for t in list(module.parameters()) + list(module.buffers()):
        try:
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        except RuntimeError:  # TorchRec's TBE buffers: count the tensor itself
            seen[id(t)] = t.numel() * t.element_size()
    return sum(seen.values())


def ours_module(ebc: EmbeddingBagCollection, dtype: torch.dtype) -> nn.Module:
    if dtype == torch.float32:
        return ebc
    ebc.qconfig = QuantConfig(
        activation=PlaceholderObserver.with_args(dtype=torch.float),
        weight=PlaceholderObserver.with_args(dtype=dtype),
    )
    try:
        return QuantEmbeddingBagCollection.from_float(ebc)
    finally:
        del ebc.qconfig


def torchrec_module(
    tables: list[EmbeddingBagConfig], state: dict[str, torch.Tensor], dtype: torch.dtype
) -> nn.Module:
    assert torchrec is not None
    tebc = torchrec.EmbeddingBagCollection(
        tables=[
            torchrec.EmbeddingBagConfig(
                name=t.name,
                num_embeddings=t.num_embeddings,
                embedding_dim=t.embedding_dim,
                feature_names=list(t.feature_names),
            )
            for t in tables
        ]
    )
    tebc.load_state_dict(state)
    if dtype == torch.float32:
        return tebc
    tebc.qconfig = TorchrecQuantConfig(
        activation=PlaceholderObserver.with_args(dtype=torch.float),
        weight=PlaceholderObserver.with_args(dtype=dtype),
    )
    return TorchrecQEBC.from_float(tebc)


def kernel_alone(
    module: QuantEmbeddingBagCollection, batches: list[KeyedJaggedTensor], rows: int
) -> Callable[[int], object]:
    """Our group's kernel call on ids/offsets prepared outside the timed region."""
    group = module.lookup.groups[0]
    inputs = []
    for kjt in batches:
        num_keys = len(kjt.keys())
        per_id_shift = torch.arange(num_keys).repeat_interleave(torch.tensor(kjt.length_per_key()))
        offsets = torch.zeros(kjt.lengths().numel() + 1, dtype=torch.long)
        offsets[1:] = torch.cumsum(kjt.lengths(), 0)
        inputs.append((kjt.values() + per_id_shift * rows, offsets))
    return lambda i: group(*inputs[i % len(inputs)], None)


def profile_ours(module: nn.Module, kjt: KeyedJaggedTensor) -> None:
    from torch.profiler import ProfilerActivity, profile

    module(kjt)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            module(kjt)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few repeats")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=0, help="rounds (default 31; quick 5)")
    parser.add_argument("--profile", action="store_true", help="per-op table of our INT8 forward")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tables_n, rows, dim, batch, ids = (
        (4, 10_000, 128, 128, 20) if args.quick else (26, 100_000, 128, 512, 20)
    )
    repeats = args.repeats or (5 if args.quick else 31)
    warmup = 2
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} cpus, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), load average "
        + " ".join(f"{x:.1f}" for x in os.getloadavg())
    )
    print(
        f"shapes: {tables_n} tables x {rows} rows x dim {dim}, batch {batch}, {ids} ids/bag; "
        f"median of {repeats} interleaved rounds after {warmup} warmup"
    )
    if TORCHREC_ERROR:
        print(f"TorchRec column skipped: {TORCHREC_ERROR}")
    tables = [
        EmbeddingBagConfig(
            name=f"t{i}", num_embeddings=rows, embedding_dim=dim, feature_names=[f"f{i}"]
        )
        for i in range(tables_n)
    ]
    torch.manual_seed(0)
    ebc = EmbeddingBagCollection(tables)
    keys = [f"f{i}" for i in range(tables_n)]
    lengths = torch.full((tables_n * batch,), ids, dtype=torch.long)
    gen = torch.Generator().manual_seed(1)
    all_values = [
        torch.randint(0, rows, (tables_n * batch * ids,), generator=gen) for _ in range(4)
    ]
    kjts = [KeyedJaggedTensor.from_lengths_sync(keys, v, lengths) for v in all_values]
    tkjts = (
        [TorchrecKJT.from_lengths_sync(keys, v, lengths) for v in all_values] if torchrec else []
    )
    state = ebc.state_dict()
    ours: dict[str, nn.Module] = {}
    theirs: dict[str, nn.Module] = {}
    fns: dict[str, Callable[[int], object]] = {}
    with torch.inference_mode():
        for name, dtype in DTYPES.items():
            ours[name] = ours_module(ebc, dtype)
            fns[f"ours {name}"] = lambda i, m=ours[name]: m(kjts[i % len(kjts)])
            if torchrec is not None:
                theirs[name] = torchrec_module(tables, state, dtype)
                fns[f"torchrec {name}"] = lambda i, m=theirs[name]: m(tkjts[i % len(tkjts)])
        int8 = ours["INT8"]
        assert isinstance(int8, QuantEmbeddingBagCollection)
        fns["ours INT8 kernel alone"] = kernel_alone(int8, kjts, rows)
        scripted = torch.jit.script(int8)  # the TorchScript branch of the forward, KJT input
        assert torch.equal(scripted(kjts[0]).values(), int8(kjts[0]).values())
        fns["ours INT8 scripted"] = lambda i, m=scripted: m(kjts[i % len(kjts)])
        load_before = os.getloadavg()[0]
        times = interleaved(fns, warmup, repeats)
        load_after = os.getloadavg()[0]
        if args.profile:
            profile_ours(int8, kjts[0])
    fp32_bytes = module_bytes(ours["FP32"])
    print(f"load average (1 min) before / after timing: {load_before:.1f} / {load_after:.1f}")
    print("ms: median wall / median process CPU; ratio = ours wall / TorchRec wall")
    print(
        "| dtype | shardrec bytes | x FP32 | shardrec ms | TorchRec bytes | TorchRec ms | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in DTYPES:
        our_bytes = module_bytes(ours[name])
        wall, cpu = times[f"ours {name}"]
        tr_bytes, tr_cell, ratio = "-", "-", "-"
        if name in theirs:
            t_wall, t_cpu = times[f"torchrec {name}"]
            tr_bytes = str(module_bytes(theirs[name]))
            tr_cell = f"{t_wall:.2f} / {t_cpu:.2f}"
            ratio = f"{wall / t_wall:.2f}"
        print(
            f"| {name} | {our_bytes} | {our_bytes / fp32_bytes:.3f} | {wall:.2f} / {cpu:.2f} | "
            f"{tr_bytes} | {tr_cell} | {ratio} |"
        )
    k_wall, k_cpu = times["ours INT8 kernel alone"]
    print(f"ours INT8 kernel alone (ids and offsets prepared): {k_wall:.2f} / {k_cpu:.2f} ms")
    s_wall, s_cpu = times["ours INT8 scripted"]
    print(f"ours INT8 under torch.jit.script (KJT input): {s_wall:.2f} / {s_cpu:.2f} ms")
    f_wall = times["ours FP32"][0]
    print(f"ours INT8 / ours FP32 (wall): {times['ours INT8'][0] / f_wall:.2f}")


if __name__ == "__main__":
    main()
