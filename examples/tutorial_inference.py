"""Inference: quantize a trained collection to 8 bits, shard it for serving, script it.

TorchRec's inference journey on shardrec:

1. wrap an `EmbeddingBagCollection` in the module you will serve;
2. quantize its tables to INT8 with `torch.ao.quantization.quantize_dynamic`, mapping the
   collection to its quantized twin (`shardrec.quant.embedding_modules`); each row keeps a
   scale and shift, so the error per number is at most half a quantization step;
3. shard the quantized model for 2 serving devices (`shard_quant_model`), one table row-wise,
   the other table-wise; its outputs equal the unsharded quantized model's;
4. trace and script it with TorchScript, and export it with `torch.export`: all three give the
   eager output.

Run: ``python examples/tutorial_inference.py``.
"""

from __future__ import annotations

import warnings

import torch
from torch import quantization as quant

import shardrec as torchrec
from shardrec.distributed.planner.types import ParameterConstraints
from shardrec.fx import symbolic_trace
from shardrec.inference.modules import shard_quant_model
from shardrec.modules.embedding_configs import QuantConfig
from shardrec.quant.embedding_modules import EmbeddingBagCollection as QuantEBC


class Recommender(torch.nn.Module):
    """What a server runs: pooled embeddings of a batch, ready for the dense part."""

    def __init__(self, ebc: torchrec.EmbeddingBagCollection) -> None:
        super().__init__()
        self.sparse = ebc

    def forward(self, batch: torchrec.KeyedJaggedTensor) -> torchrec.KeyedTensor:
        return self.sparse(batch)


def main() -> None:
    torch.manual_seed(0)
    dim = 32
    tables = [
        torchrec.EmbeddingBagConfig(name="video_table", embedding_dim=dim, num_embeddings=2000,
                                    feature_names=["video"]),
        torchrec.EmbeddingBagConfig(name="channel_table", embedding_dim=dim, num_embeddings=300,
                                    feature_names=["channel"]),
    ]  # fmt: skip
    model = Recommender(torchrec.EmbeddingBagCollection(tables=tables)).eval()
    batch = torchrec.KeyedJaggedTensor(
        keys=["video", "channel"],
        values=torch.tensor([5, 1999, 42, 7, 0, 299, 12]),
        lengths=torch.tensor([2, 0, 1, 1, 1, 2]),  # 3 examples: videos, then channels
    )

    # 2. Quantize: float activations out, INT8 weights stored.
    qconfig = QuantConfig(
        activation=quant.PlaceholderObserver.with_args(dtype=torch.float),
        weight=quant.PlaceholderObserver.with_args(dtype=torch.int8),
    )
    with warnings.catch_warnings():  # torch.ao.quantization's deprecation notice
        warnings.simplefilter("ignore")
        quantized = quant.quantize_dynamic(
            model,
            qconfig_spec={torchrec.EmbeddingBagCollection: qconfig},
            mapping={torchrec.EmbeddingBagCollection: QuantEBC},
            inplace=False,
        )
    for name, buffer in quantized.state_dict().items():
        print(f"{name}: {tuple(buffer.shape)} {buffer.dtype}")
    expected = model(batch).values()
    got = quantized(batch).values()
    # Each row spans [min, max] in 255 steps: half a step of error per number and row; a bag
    # here sums at most 2 rows.
    rows = torch.cat([model.sparse.embedding_bags[t.name].weight for t in tables])
    step = ((rows.max(1).values - rows.min(1).values) / 255).max().item()
    error = (got - expected).abs().max().item()
    print(f"quantized: max error {error:.2e}, bound {step:.2e}")
    assert error <= step + 1e-6

    # 3. Shard for two serving devices.
    constraints = {
        "video_table": ParameterConstraints(sharding_types=["row_wise"]),
        "channel_table": ParameterConstraints(sharding_types=["table_wise"]),
    }
    sharded, plan = shard_quant_model(
        quantized, world_size=2, compute_device="cpu", sharding_device="cpu",
        constraints=constraints,
    )  # fmt: skip
    print(plan)
    sharded_out = sharded(batch).values()
    torch.testing.assert_close(sharded_out, got, rtol=0, atol=1e-6)
    print("sharded equals unsharded: ok")

    # 4. TorchScript (trace keeps the sharded collection one module, then script) and export.
    with warnings.catch_warnings():
        # torch 2.13's own GraphModule.__init__ annotates an empty dict, which torch.jit.script
        # reports as a UserWarning on every traced module it scripts; harmless, not ours.
        warnings.filterwarnings("ignore", "The TorchScript type system", UserWarning)
        scripted = torch.jit.script(symbolic_trace(sharded))
    print(f"scripted equals eager: {torch.equal(scripted(batch).values(), sharded_out)}")
    exported = torch.export.export(quantized, (batch,), strict=False)
    print(f"exported equals eager: {torch.equal(exported.module()(batch).values(), got)}")


if __name__ == "__main__":
    main()
