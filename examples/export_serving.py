"""Serving through torch.export: train, export with the IR serializer, reload elsewhere, serve.

TorchRec's `torchrec.ir` flow on shardrec:

1. train a small model (an `EmbeddingBagCollection` and an MLP) a few SGD steps;
2. encapsulate its collections (`encapsulate_ir_modules`: each stores its tables' configs in
   the module as JSON and is recorded in the graph as one shape-only op), declare the number
   of ids dynamic (`mark_dynamic_kjt`), `torch.export.export` it and `torch.export.save` the
   program: one file with the graph, the weights and the collections' descriptions;
3. in a fresh process: `torch.export.load`, `torch.export.unflatten`, and
   `decapsulate_ir_modules` rebuild the model with real collections holding the trained
   weights; it serves requests of any size (empty bags included), equal to the trained model.

Run: ``python examples/export_serving.py``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch

import shardrec as torchrec
from shardrec.ir.serializer import JsonSerializer
from shardrec.ir.utils import decapsulate_ir_modules, encapsulate_ir_modules, mark_dynamic_kjt

FEATURES = ["user", "item"]
BATCH = 8


class Ranker(torch.nn.Module):
    def __init__(self, ebc: torchrec.EmbeddingBagCollection) -> None:
        super().__init__()
        self.sparse = ebc
        self.over = torch.nn.Sequential(
            torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
        )

    def forward(self, batch: torchrec.KeyedJaggedTensor) -> torch.Tensor:
        return self.over(self.sparse(batch).values()).squeeze(1)


def random_batch(gen: torch.Generator, batch: int) -> torchrec.KeyedJaggedTensor:
    lengths = torch.randint(0, 4, (len(FEATURES) * batch,), generator=gen)
    return torchrec.KeyedJaggedTensor.from_lengths_sync(
        keys=FEATURES,
        values=torch.randint(0, 100, (int(lengths.sum()),), generator=gen),
        lengths=lengths,
    )


def train_and_export(path: Path) -> list[tuple[torchrec.KeyedJaggedTensor, torch.Tensor]]:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    ebc = torchrec.EmbeddingBagCollection(
        tables=[
            torchrec.EmbeddingBagConfig(
                name=f"{f}_table", embedding_dim=16, num_embeddings=100, feature_names=[f]
            )
            for f in FEATURES
        ]
    )
    model = Ranker(ebc)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        batch = random_batch(gen, BATCH)
        label = torch.randint(0, 2, (BATCH,), generator=gen).float()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(batch), label)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step}: loss {loss.item():.4f}")
    model.eval()

    # requests to serve later, and what the trained model answers (one with empty bags only)
    requests = [random_batch(gen, BATCH) for _ in range(3)]
    requests.append(
        torchrec.KeyedJaggedTensor.from_lengths_sync(
            keys=FEATURES,
            values=torch.tensor([], dtype=torch.int64),
            lengths=torch.zeros(len(FEATURES) * BATCH, dtype=torch.int64),
        )
    )
    with torch.no_grad():
        expected = [(r, model(r)) for r in requests]

    example = random_batch(gen, BATCH)
    model, fqns = encapsulate_ir_modules(model, JsonSerializer)
    print(f"encapsulated: {fqns}")
    dynamic = mark_dynamic_kjt(example).dynamic_shapes(model, (example,))
    program = torch.export.export(
        model,
        (example,),
        strict=False,
        dynamic_shapes=dynamic,
        preserve_module_call_signature=tuple(fqns),
    )
    torch.export.save(program, path)
    print(f"saved {path.name}: {path.stat().st_size} bytes")
    return expected


def serve(path: Path, io_path: Path) -> None:
    """What a serving process runs: no model code, only the saved program."""
    program = torch.export.load(path)
    with warnings.catch_warnings():
        # torch.export.unflatten's own notes on programs with preserved module signatures
        # (TorchRec's programs print them too); nothing is wrong with the program.
        warnings.filterwarnings("ignore", message="Attempted to insert a get_attr Node")
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)`")
        unflattened = torch.export.unflatten(program)
    model = decapsulate_ir_modules(unflattened, JsonSerializer)
    print(f"restored sparse: {type(model.sparse).__name__}")
    ok = True
    for i, (request, want) in enumerate(torch.load(io_path, weights_only=False)):
        with torch.no_grad():
            got = model(request)
        same = torch.allclose(got, want, rtol=1e-5, atol=1e-6)
        ok &= same
        print(f"request {i}: {request.values().numel()} ids, equals the trained model: {same}")
    if not ok:
        raise SystemExit("the served model differs from the trained one")
    print("served from the exported artifact: ok")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path, io_path = Path(tmp) / "ranker.pt2", Path(tmp) / "requests.pt"
        torch.save(train_and_export(path), io_path)
        # a fresh interpreter, as a server would be
        run = subprocess.run(
            [sys.executable, __file__, "--serve", str(path), str(io_path)],
            capture_output=True,
            text=True,
            check=False,
        )
        print(run.stdout, end="")
        sys.stderr.write(run.stderr)
        if run.returncode != 0:
            raise SystemExit(f"serving failed:\n{run.stderr}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        main()
