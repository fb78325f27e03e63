"""Concepts: how shardrec represents a batch of sparse features, in one screen.

A recommendation batch holds, per example, a variable number of ids for each sparse feature
(the movies a user watched, the genres of a movie). shardrec stores such a batch the way TorchRec
does, under the same names:

- `JaggedTensor`: one feature; all ids in one flat `values` tensor, plus `lengths` (ids per
  example) or, equivalently, `offsets` (where each example starts);
- `KeyedJaggedTensor` (KJT): several features of one batch; `lengths` runs feature by feature;
- `KeyedTensor`: what an `EmbeddingBagCollection` returns, one pooled block per feature.

Run: ``python examples/tutorial_concepts.py`` (any install of the `shardrec` umbrella;
``SHARDREC_EXAMPLE_DEVICE=cuda`` runs it on a GPU).
"""

import os

import torch

import shardrec as torchrec

DEVICE = torch.device(os.environ.get("SHARDREC_EXAMPLE_DEVICE", "cpu"))

# Three viewers watched 1, 0 and 2 movies: lengths, or offsets (a leading 0, cumulative sums).
watched = torchrec.JaggedTensor(
    values=torch.tensor([7, 3, 9], device=DEVICE), lengths=torch.tensor([1, 0, 2], device=DEVICE)
)
same = torchrec.JaggedTensor(
    values=torch.tensor([7, 3, 9], device=DEVICE), offsets=torch.tensor([0, 1, 1, 3], device=DEVICE)
)
print("per viewer:", watched.to_dense())
print("offsets from lengths:", watched.offsets().tolist())
assert [t.tolist() for t in same.to_dense()] == [t.tolist() for t in watched.to_dense()]

# Two features of the same 3 examples: `lengths` holds all "movie" bags, then all "genre" bags.
batch = torchrec.KeyedJaggedTensor(
    keys=["movie", "genre"],
    values=torch.tensor([7, 3, 9, 1, 1, 2], device=DEVICE),
    lengths=torch.tensor([1, 0, 2, 1, 1, 1], device=DEVICE),
)
print("batch size:", batch.stride(), "features:", batch.keys())
print("genre ids per example:", batch["genre"].to_dense())

# Pool each feature's embeddings per example: one (3, dim) block per feature, side by side.
# One table per feature: (feature, numbers per row, rows).
shapes = [("movie", 4, 10), ("genre", 2, 3)]
tables = [
    torchrec.EmbeddingBagConfig(
        name=f"{feature}_table", embedding_dim=dim, num_embeddings=rows, feature_names=[feature]
    )
    for feature, dim, rows in shapes
]
ebc = torchrec.EmbeddingBagCollection(tables=tables, device=DEVICE)
pooled = ebc(batch)
print("pooled:", {k: tuple(v.shape) for k, v in pooled.to_dict().items()})

# The pooling is a sum of table rows: viewer 2 watched movies 3 and 9.
rows = ebc.embedding_bags["movie_table"].weight
assert torch.allclose(pooled["movie"][2], rows[3] + rows[9])
assert torch.equal(pooled["movie"][1], torch.zeros(4, device=DEVICE))  # an empty bag pools to zeros
print("viewer 2's movie embedding is rows 3 + 9: ok")
