"""Quantized inference: model bytes and pooled lookup time for FP32, FP16, INT8, INT4.

Run: `.venv/bin/python benchmarks/inference.py` (add `--quick` for a smoke run). Shapes: 26
tables x 100k rows x dim 128, batch 512, 20 ids per bag. Columns: shardrec's
`QuantEmbeddingBagCollection` (FP32 is the float `EmbeddingBagCollection`), TorchRec 1.8's
`torchrec.quant.embedding_modules.EmbeddingBagCollection` on the same weights and ids, and
their ratio. Median of repeats. Results and reading: docs/bench/inference.md.
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


def median_ms(fns: list[Callable[[], object]], repeats: int) -> list[float]:
    """Median ms of each fn; the fns alternate within each repeat so that load drifting on a
    shared machine hits them alike."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return [statistics.median(t) * 1e3 for t in times]


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    tables_n, rows, dim, batch, ids = (
        (4, 10_000, 128, 128, 20) if args.quick else (26, 100_000, 128, 512, 20)
    )
    repeats = 5 if args.quick else 21
    print(f"machine: {platform.platform()}, {os.cpu_count()} cpus, torch {torch.__version__}")
    print(f"shapes: {tables_n} tables x {rows} rows x dim {dim}, batch {batch}, {ids} ids/bag")
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
    values = torch.randint(0, rows, (tables_n * batch * ids,))
    kjt = KeyedJaggedTensor.from_lengths_sync(keys, values, lengths)
    fp32_bytes = module_bytes(ebc)
    print(
        "| dtype | shardrec bytes | x FP32 | shardrec ms | TorchRec bytes | TorchRec ms | ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    with torch.inference_mode():
        for name, dtype in DTYPES.items():
            if name == "FP32":
                ours: nn.Module = ebc
            else:
                ebc.qconfig = QuantConfig(
                    activation=PlaceholderObserver.with_args(dtype=torch.float),
                    weight=PlaceholderObserver.with_args(dtype=dtype),
                )
                ours = QuantEmbeddingBagCollection.from_float(ebc)
                del ebc.qconfig
            our_bytes = module_bytes(ours)
            tr_bytes, tr_ms = "-", "-"
            ratio = "-"
            if torchrec is None:
                (our_ms,) = median_ms([lambda m=ours: m(kjt)], repeats)
            else:
                tebc = torchrec.EmbeddingBagCollection(
                    tables=[
                        torchrec.EmbeddingBagConfig(
                            name=t.name,
                            num_embeddings=rows,
                            embedding_dim=dim,
                            feature_names=list(t.feature_names),
                        )
                        for t in tables
                    ]
                )
                tebc.load_state_dict(ebc.state_dict())
                tkjt = TorchrecKJT.from_lengths_sync(keys, values, lengths)
                if name == "FP32":
                    theirs: nn.Module = tebc
                else:
                    tebc.qconfig = TorchrecQuantConfig(
                        activation=PlaceholderObserver.with_args(dtype=torch.float),
                        weight=PlaceholderObserver.with_args(dtype=dtype),
                    )
                    theirs = TorchrecQEBC.from_float(tebc)
                our_ms, t_ms = median_ms(
                    [lambda m=ours: m(kjt), lambda m=theirs, k=tkjt: m(k)], repeats
                )
                tr_bytes, tr_ms = str(module_bytes(theirs)), f"{t_ms:.2f}"
                ratio = f"{our_ms / t_ms:.2f}"
                del theirs, tebc
            print(
                f"| {name} | {our_bytes} | {our_bytes / fp32_bytes:.3f} | {our_ms:.2f} | "
                f"{tr_bytes} | {tr_ms} | {ratio} |",
                flush=True,
            )
            if name != "FP32":
                del ours


if __name__ == "__main__":
    main()
