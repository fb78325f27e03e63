# ruff: noqa: E402, E501, I001, UP006, UP035
"""TorchRec's "Introduction to TorchRec" (../shared/seeds/torchrec_intro_tutorial.txt), run on shardrec.

The tutorial's code up to its "Inference" section (the quantization cells are
examples/tutorial_intro_inference.py), kept as written except for:

- `import shardrec as torchrec`, and `from torchrec.X import Y` written `from shardrec.X import Y`;
- `cuda` -> `cpu` (devices, `Topology(compute_device=...)`, `kjt.to(...)`), `nccl` -> `gloo`;
- MASTER_PORT is a free port instead of 29500 (the machine may run other jobs);
- a bare expression at the end of a notebook cell, which the notebook displays, is printed.

`from fbgemm_gpu.split_embedding_configs import EmbOptimType` stays: shardrec's sharders accept
fbgemm's enum members. Run: ``python examples/tutorial_intro.py`` (needs fbgemm-gpu-cpu, or any
`fbgemm_gpu` package defining that enum, importable).
"""

import socket


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return str(s.getsockname()[1])


import torch

######################################################################
# Embeddings in PyTorch
# ---------------------
#
# In this section, we will go over a very brief introduction to performing
# embedding lookups by passing in indices into the table.
#
num_embeddings, embedding_dim = 10, 4

# Initialize our embedding table
weights = torch.rand(num_embeddings, embedding_dim)
print("Weights:", weights)

# Pass in pre-generated weights just for example, typically weights are randomly initialized
embedding_collection = torch.nn.Embedding(num_embeddings, embedding_dim, _weight=weights)
embedding_bag_collection = torch.nn.EmbeddingBag(num_embeddings, embedding_dim, _weight=weights)

# Print out the tables, we should see the same weights as above
print("Embedding Collection Table: ", embedding_collection.weight)
print("Embedding Bag Collection Table: ", embedding_bag_collection.weight)

# Lookup rows (ids for embedding ids) from the embedding tables
# 2D tensor with shape (batch_size, ids for each batch)
ids = torch.tensor([[1, 3]])
print("Input row IDS: ", ids)

embeddings = embedding_collection(ids)

# Print out the embedding lookups
# You should see the specific embeddings be the same as the rows (ids) of the embedding tables above
print("Embedding Collection Results: ")
print(embeddings)
print("Shape: ", embeddings.shape)

# ``nn.EmbeddingBag`` default pooling is mean, so should be mean of batch dimension of values above
pooled_embeddings = embedding_bag_collection(ids)

print("Embedding Bag Collection Results: ")
print(pooled_embeddings)
print("Shape: ", pooled_embeddings.shape)

# ``nn.EmbeddingBag`` is the same as ``nn.Embedding`` but just with pooling (mean, sum, and so on)
# We can see that the mean of the embeddings of embedding_collection is the same as the output of the embedding_bag_collection
print("Mean: ", torch.mean(embedding_collection(ids), dim=1))

######################################################################
# TorchRec Features Overview
# ^^^^^^^^^^^^^^^^^^^^^^^^^^^
#
# Let's begin with importing TorchRec:
import shardrec as torchrec

######################################################################
# From ``EmbeddingBag`` to ``EmbeddingBagCollection``
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
#
# In the example code below, we create an ``EmbeddingBagCollection`` (EBC)
# with two embedding bags, 1 representing **products** and 1 representing **users**.
# Each table, ``product_table`` and ``user_table``, is represented by a 64 dimension
# embedding of size 4096.
#
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
print(ebc.embedding_bags)

######################################################################
# Let’s inspect the forward method for ``EmbeddingBagCollection`` and the
# module’s inputs and outputs:
#
import inspect

# Let's look at the ``EmbeddingBagCollection`` forward method
# What is a ``KeyedJaggedTensor`` and ``KeyedTensor``?
print(inspect.getsource(ebc.forward))

######################################################################
# TorchRec Input/Output Data Types
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
#
# A simple representation is shown below, where we have a ``lengths``
# tensor denoting how many indices are in an example for a batch and a
# ``values`` tensor containing the indices themselves.
#

# Batch Size 2
# 1 ID in example 1, 2 IDs in example 2
id_list_feature_lengths = torch.tensor([1, 2])

# Values (IDs) tensor: ID 5 is in example 1, ID 7, 1 is in example 2
id_list_feature_values = torch.tensor([5, 7, 1])

######################################################################
# Next, let's look at the offsets as well as what is contained in each batch
#

# Lengths can be converted to offsets for easy indexing of values
id_list_feature_offsets = torch.cumsum(id_list_feature_lengths, dim=0)

print("Offsets: ", id_list_feature_offsets)
print("First Batch: ", id_list_feature_values[: id_list_feature_offsets[0]])
print(
    "Second Batch: ",
    id_list_feature_values[id_list_feature_offsets[0] : id_list_feature_offsets[1]],
)

from shardrec import JaggedTensor

# ``JaggedTensor`` is just a wrapper around lengths/offsets and values tensors!
jt = JaggedTensor(values=id_list_feature_values, lengths=id_list_feature_lengths)

# Automatically compute offsets from lengths
print("Offsets: ", jt.offsets())

# Convert to list of values
print("List of Values: ", jt.to_dense())

# ``__str__`` representation
print(jt)

from shardrec import KeyedJaggedTensor

# ``JaggedTensor`` represents IDs for 1 feature, but we have multiple features in an ``EmbeddingBagCollection``
# That's where ``KeyedJaggedTensor`` comes in! ``KeyedJaggedTensor`` is just multiple ``JaggedTensors`` for multiple id_list_feature_offsets
# From before, we have our two features "product" and "user". Let's create ``JaggedTensors`` for both!

product_jt = JaggedTensor(values=torch.tensor([1, 2, 1, 5]), lengths=torch.tensor([3, 1]))
user_jt = JaggedTensor(values=torch.tensor([2, 3, 4, 1]), lengths=torch.tensor([2, 2]))

# Q1: How many batches are there, and which values are in the first batch for ``product_jt`` and ``user_jt``?
kjt = KeyedJaggedTensor.from_jt_dict({"product": product_jt, "user": user_jt})

# Look at our feature keys for the ``KeyedJaggedTensor``
print("Keys: ", kjt.keys())

# Look at the overall lengths for the ``KeyedJaggedTensor``
print("Lengths: ", kjt.lengths())

# Look at all values for ``KeyedJaggedTensor``
print("Values: ", kjt.values())

# Can convert ``KeyedJaggedTensor`` to dictionary representation
print("to_dict: ", kjt.to_dict())

# ``KeyedJaggedTensor`` string representation
print(kjt)

# Q2: What are the offsets for the ``KeyedJaggedTensor``?

# Now we can run a forward pass on our ``EmbeddingBagCollection`` from before
result = ebc(kjt)
print(result)

# Result is a ``KeyedTensor``, which contains a list of the feature names and the embedding results
print(result.keys())

# The results shape is [2, 128], as batch size of 2. Reread previous section if you need a refresher on how the batch size is determined
# 128 for dimension of embedding. If you look at where we initialized the ``EmbeddingBagCollection``, we have two tables "product" and "user" of dimension 64 each
# meaning embeddings for both features are of size 64. 64 + 64 = 128
print(result.values().shape)

# Nice to_dict method to determine the embeddings that belong to each feature
result_dict = result.to_dict()
for key, embedding in result_dict.items():
    print(key, embedding.shape)

######################################################################
# Distributed Training and Sharding
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
#
# In the example code below, we set up our PyTorch distributed environment.
#
import os

import torch.distributed as dist

# Set up environment variables for distributed training
# RANK is which GPU we are on, default 0
os.environ["RANK"] = "0"
# How many devices in our "world", colab notebook can only handle 1 process
os.environ["WORLD_SIZE"] = "1"
# Localhost as we are training locally
os.environ["MASTER_ADDR"] = "localhost"
# Port for distributed training
os.environ["MASTER_PORT"] = _free_port()

# nccl backend is for GPUs, gloo is for CPUs
dist.init_process_group(backend="gloo")

print(f"Distributed environment initialized: {dist}")

######################################################################
# Sharded Modules
# ~~~~~~~~~~~~~~~
#

# Refresher of our ``EmbeddingBagCollection`` module
print(ebc)

from shardrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
from shardrec.distributed.planner import EmbeddingShardingPlanner, Topology
from shardrec.distributed.types import ShardingEnv

# Corresponding sharder for ``EmbeddingBagCollection`` module
sharder = EmbeddingBagCollectionSharder()

# ``ProcessGroup`` from torch.distributed initialized 2 cells above
pg = dist.GroupMember.WORLD
assert pg is not None, "Process group is not initialized"

print(f"Process Group: {pg}")

######################################################################
# Planner
# ~~~~~~~
#

# In our case, 1 GPU and compute on CUDA device
planner = EmbeddingShardingPlanner(
    topology=Topology(
        world_size=1,
        compute_device="cpu",
    )
)

# Run planner to get plan for sharding
plan = planner.collective_plan(ebc, [sharder], pg)

print(f"Sharding Plan generated: {plan}")

######################################################################
# Planner Result
# ~~~~~~~~~~~~~~
#
# The result of running the planner is a static plan, which can be reused
# for sharding! Below, we use the sharding plan to finally generate our
# ``ShardedEmbeddingBagCollection``.
#

# The static plan that was generated
print(plan)

env = ShardingEnv.from_process_group(pg)

# Shard the ``EmbeddingBagCollection`` module using the ``EmbeddingBagCollectionSharder``
sharded_ebc = sharder.shard(ebc, plan.plan[""], env, torch.device("cpu"))

print(f"Sharded EBC Module: {sharded_ebc}")

######################################################################
# GPU Training with ``LazyAwaitable``
# ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
#
# All a ``LazyAwaitable`` type does is delay calculating some
# result as long as possible, and it does it by acting like an async type.
#

from typing import List

from shardrec.distributed.types import LazyAwaitable


# Demonstrate a ``LazyAwaitable`` type:
class ExampleAwaitable(LazyAwaitable[torch.Tensor]):
    def __init__(self, size: List[int]) -> None:
        super().__init__()
        self._size = size

    def _wait_impl(self) -> torch.Tensor:
        return torch.ones(self._size)


awaitable = ExampleAwaitable([3, 2])
print(awaitable.wait())

kjt = kjt.to("cpu")
output = sharded_ebc(kjt)
# The output of our sharded ``EmbeddingBagCollection`` module is an `Awaitable`?
print(output)

kt = output.wait()
# Now we have our ``KeyedTensor`` after calling ``.wait()``
# If you are confused as to why we have a ``KeyedTensor ``output,
# give yourself a refresher on the unsharded ``EmbeddingBagCollection`` module
print(type(kt))

print(kt.keys())

print(kt.values().shape)

# Same output format as unsharded ``EmbeddingBagCollection``
result_dict = kt.to_dict()
for key, embedding in result_dict.items():
    print(key, embedding.shape)

######################################################################
# Anatomy of Sharded TorchRec modules
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
#
# * ``input_dist``: Handles distributing inputs from GPU to GPU.
# * ``lookups``: Does the actual embedding lookup in an optimized,
#   batched manner using FBGEMM TBE (more on this later).
# * ``output_dist``: Handles distributing outputs from GPU to GPU.
#

print(sharded_ebc)

# Distribute input KJTs to all other GPUs and receive KJTs
print(sharded_ebc._input_dists)

# Distribute output embeddings to all other GPUs and receive embeddings
print(sharded_ebc._output_dists)

######################################################################
# Optimizing Embedding Lookups
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
#
# The ``ShardedEmbeddingBagCollection`` uses the FBGEMM TBE as the lookup
# instead of traditional ``nn.EmbeddingBags`` for optimized embedding
# lookups.
#

print(sharded_ebc._lookups)

######################################################################
# ``DistributedModelParallel``
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
#
# In this toy example, since we have two embedding tables and one GPU,
# TorchRec will place both on the single GPU.
#

print(ebc)

model = torchrec.distributed.DistributedModelParallel(ebc, device=torch.device("cpu"))

out = model(kjt)
print(out.wait())

print(model)

######################################################################
# Adding an Optimizer to ``EmbeddingBagCollection``
# ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
#
# We will do this in two ways, which are equivalent, but give you options
# depending on your preferences:
#
# 1. Passing optimizer kwargs through ``fused_params`` in sharder.
# 2. Through ``apply_optimizer_in_backward``, which converts the optimizer
#    parameters to ``fused_params`` to pass to the ``TBE`` in the ``EmbeddingBagCollection`` or ``EmbeddingCollection``.
#

# Option 1: Passing optimizer kwargs through fused parameters
from shardrec.optim.optimizers import in_backward_optimizer_filter
from fbgemm_gpu.split_embedding_configs import EmbOptimType

# We initialize the sharder with
fused_params = {
    "optimizer": EmbOptimType.EXACT_ROWWISE_ADAGRAD,
    "learning_rate": 0.02,
    "eps": 0.002,
}

# Initialize sharder with ``fused_params``
sharder_with_fused_params = EmbeddingBagCollectionSharder(fused_params=fused_params)

# We'll use same plan and unsharded EBC as before but this time with our new sharder
sharded_ebc_fused_params = sharder_with_fused_params.shard(
    ebc, plan.plan[""], env, torch.device("cpu")
)

# Looking at the optimizer of each, we can see that the learning rate changed, which indicates our optimizer has been applied correctly.
# If seen, we can also look at the TBE logs of the cell to see that our new optimizer is indeed being applied
print(f"Original Sharded EBC fused optimizer: {sharded_ebc.fused_optimizer}")
print(
    f"Sharded EBC with fused parameters fused optimizer: {sharded_ebc_fused_params.fused_optimizer}"
)

print(f"Type of optimizer: {type(sharded_ebc_fused_params.fused_optimizer)}")

from torch.distributed.optim import _apply_optimizer_in_backward as apply_optimizer_in_backward
import copy

# Option 2: Applying optimizer through apply_optimizer_in_backward
# Note: we need to call apply_optimizer_in_backward on unsharded model first and then shard it

# We can achieve the same result as we did in the previous
ebc_apply_opt = copy.deepcopy(ebc)
optimizer_kwargs = {"lr": 0.5}

for name, param in ebc_apply_opt.named_parameters():
    print(f"{name=}")
    apply_optimizer_in_backward(torch.optim.SGD, [param], optimizer_kwargs)

sharded_ebc_apply_opt = sharder.shard(ebc_apply_opt, plan.plan[""], env, torch.device("cpu"))

# Now when we print the optimizer, we will see our new learning rate, you can verify momentum through the TBE logs as well if outputted
print(sharded_ebc_apply_opt.fused_optimizer)
print(type(sharded_ebc_apply_opt.fused_optimizer))

# We can also check through the filter other parameters that aren't associated with the "fused" optimizer(s)
# Practically, just non TorchRec module parameters. Since our module is just a TorchRec EBC
# there are no other parameters that aren't associated with TorchRec
print("Non Fused Model Parameters:")
print(dict(in_backward_optimizer_filter(sharded_ebc_fused_params.named_parameters())).keys())

# Here we do a dummy backwards call and see that parameter updates for fused
# optimizers happen as a result of the backward pass

ebc_output = sharded_ebc_fused_params(kjt).wait().values()
loss = torch.sum(torch.ones_like(ebc_output) - ebc_output)
print(f"First Iteration Loss: {loss}")

loss.backward()

ebc_output = sharded_ebc_fused_params(kjt).wait().values()
loss = torch.sum(torch.ones_like(ebc_output) - ebc_output)
# We don't call an optimizer.step(), so for the loss to have changed here,
# that means that the gradients were somehow updated, which is what the
# fused optimizer automatically handles for us
print(f"Second Iteration Loss: {loss}")
