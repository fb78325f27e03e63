"""The inference cells of TorchRec's intro tutorial (../shared/seeds/torchrec_intro_tutorial.txt)
run against shardrec with `import shardrec as torchrec`, on CPU.

Cells: wrap the trained EBC in `InferenceModule`, print its FP32 parameters; quantize it to INT8
with `QuantConfig` + `quant.quantize_dynamic(..., mapping={EBC: QuantEBC})`, print the quantized
state and compare the quantized lookup with the float one; shard the quantized model with
`shard_quant_model` and check it gives the unsharded output; compile the sharded quantized
model to TorchScript and check the scripted model returns the same output. Differences from
the notebook:

- CPU in place of CUDA (`compute_device="cpu"`, two "devices" that are both the CPU, as
  TorchRec's CPU path does), and one table per sharding type to show them;
- `torch.export` of the quantized model (it takes the KJT too) is shown beside TorchScript.

Run: ``.venv/bin/python examples/tutorial_intro_inference.py``.
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
from shardrec.quant.embedding_modules import (
    EmbeddingBagCollection as QuantEmbeddingBagCollection,
)
from shardrec.sparse.jagged_tensor import KeyedJaggedTensor


class InferenceModule(torch.nn.Module):
    def __init__(self, ebc: torchrec.EmbeddingBagCollection) -> None:
        super().__init__()
        self.ebc_ = ebc

    def forward(self, kjt: KeyedJaggedTensor) -> torchrec.KeyedTensor:
        return self.ebc_(kjt)


def main() -> None:
    torch.manual_seed(0)
    ebc = torchrec.EmbeddingBagCollection(
        device="cpu",
        tables=[
            torchrec.EmbeddingBagConfig(
                name="product_table",
                embedding_dim=64,
                num_embeddings=4096,
                feature_names=["product"],
                pooling=torchrec.PoolingType.SUM,
            ),
            torchrec.EmbeddingBagConfig(
                name="user_table",
                embedding_dim=64,
                num_embeddings=4096,
                feature_names=["user"],
                pooling=torchrec.PoolingType.SUM,
            ),
        ],
    )
    product_jt = torchrec.JaggedTensor(
        values=torch.tensor([1, 2, 1, 5]), lengths=torch.tensor([3, 1])
    )
    user_jt = torchrec.JaggedTensor(values=torch.tensor([2, 3, 4, 1]), lengths=torch.tensor([2, 2]))
    kjt = KeyedJaggedTensor.from_jt_dict({"product": product_jt, "user": user_jt})

    module = InferenceModule(ebc)
    for name, param in module.named_parameters():
        print(name, param.shape, param.dtype)

    # Quantization
    quant_dtype = torch.int8
    qconfig = QuantConfig(
        activation=quant.PlaceholderObserver.with_args(dtype=torch.float),
        weight=quant.PlaceholderObserver.with_args(dtype=quant_dtype),
    )
    qconfig_spec = {torchrec.EmbeddingBagCollection: qconfig}
    mapping = {torchrec.EmbeddingBagCollection: QuantEmbeddingBagCollection}
    with warnings.catch_warnings():  # torch.ao.quantization's deprecation notice
        warnings.simplefilter("ignore")
        qebc = quant.quantize_dynamic(
            module, qconfig_spec=qconfig_spec, mapping=mapping, inplace=False
        )
    print(f"Quantized EBC: {qebc}")
    quant_out = qebc(kjt).values()
    float_out = module(kjt).values()
    for name, buffer in qebc.state_dict().items():
        print(name, tuple(buffer.shape), buffer.dtype)
    print(f"max |quantized - float|: {(quant_out - float_out).abs().max().item():.6f}")

    exported = torch.export.export(qebc, (kjt,), strict=False)
    print(f"exported equals eager: {torch.equal(exported.module()(kjt).values(), quant_out)}")

    # Shard
    constraints = {
        "product_table": ParameterConstraints(sharding_types=["row_wise"]),
        "user_table": ParameterConstraints(sharding_types=["table_wise"]),
    }
    sharded_model, sharding_plan = shard_quant_model(
        qebc, world_size=2, compute_device="cpu", sharding_device="cpu", constraints=constraints
    )
    print(f"Sharding plan: {sharding_plan}")
    print(f"Sharded Quantized EBC: {sharded_model}")
    sharded_out = sharded_model(kjt).values()
    print(f"sharded max |sharded - unsharded|: {(sharded_out - quant_out).abs().max().item():.2e}")

    # Compilation to TorchScript: trace (the sharded collection stays one module), then script
    sharded_model = symbolic_trace(sharded_model)
    scripted_model = torch.jit.script(sharded_model)
    print("Scripted Module Created!")
    scripted_out = scripted_model(kjt).values()
    print(f"scripted equals eager: {torch.equal(scripted_out, sharded_out)}")


if __name__ == "__main__":
    main()
