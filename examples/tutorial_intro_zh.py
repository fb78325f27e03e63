# ruff: noqa: E402, I001
"""The Chinese "TorchRec简介" tutorial (../shared/seeds/torchrec_intro_zh.txt), run on shardrec.

Its code blocks in order, kept as written except for `import shardrec as torchrec`, `cuda` ->
`cpu` (`device=...`, `.cuda()` -> `.cpu()`), `nccl` -> `gloo`, a free MASTER_PORT instead of
29500, and the bare expression `product_eb(...)`, which the notebook displays, printed. The
installation commands and the two ASCII tables are not code and are left out.

Run: ``python examples/tutorial_intro_zh.py``.
"""

import socket


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return str(s.getsockname()[1])


# 分布式设置
import os
import torch
import shardrec as torchrec
import torch.distributed as dist

os.environ["RANK"] = "0"
os.environ["WORLD_SIZE"] = "1"
os.environ["MASTER_ADDR"] = "localhost"
os.environ["MASTER_PORT"] = _free_port()

# Note - you will need a V100 or A100 to run tutorial as as!
# If using an older GPU (such as colab free K80),
# you will need to compile fbgemm with the appripriate CUDA architecture
# or run with "gloo" on CPUs
dist.init_process_group(backend="gloo")

# 从EmbeddingBag到EmbeddingBagCollection
ebc = torchrec.EmbeddingBagCollection(
    device="meta",
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

# DistributedModelParallel
model = torchrec.distributed.DistributedModelParallel(ebc, device=torch.device("cpu"))
print(model)
print(model.plan)

# 使用输入和偏移查询普通的nn.EmbeddingBag
product_eb = torch.nn.EmbeddingBag(4096, 64)
print(product_eb(input=torch.tensor([101, 202, 303]), offsets=torch.tensor([0, 2, 2])))

# 使用KeyedJaggedTensor表示小批量
mb = torchrec.KeyedJaggedTensor(
    keys=["product", "user"],
    values=torch.tensor([101, 202, 303, 404, 505, 606]).cpu(),
    lengths=torch.tensor([2, 0, 1, 1, 1, 1], dtype=torch.int64).cpu(),
)

print(mb.to(torch.device("cpu")))

# 将所有内容整合在一起，使用KJT小批量查询我们的分布式模型
pooled_embeddings = model(mb)
print(pooled_embeddings)
