"""Random bags of valid ids: the jagged input most multi-rank tests feed their tables.

`random_ids({"f0": 5, "f1": 7}, batch=3, max_len=4, gen=g)` draws, per feature (in the mapping's
order) and sample, a bag of 0..max_len ids below the feature's limit, and returns the
KeyedJaggedTensor's `(lengths, values)`: `lengths: (F * B,)` key-major, `values: (N,)` int64,
N = lengths.sum(). This package sits below shardrec-jagged, so the caller builds the KJT.
`random_dlrm_inputs` adds the dense features and labels of a DLRM-shaped batch.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from shardrec_testing.seeding import random_lengths

__all__ = ["random_dlrm_inputs", "random_ids"]


def random_ids(
    limits: Mapping[str, int], batch: int, max_len: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(lengths, values)` of `batch` random bags per feature of `limits` (module docstring).

    Draws the lengths first, then each feature's ids in turn, all from `gen`.
    """
    features = list(limits)
    lengths = random_lengths(len(features) * batch, max_len, gen)
    per_key = lengths.view(len(features), batch).sum(1).tolist()
    values = torch.cat(
        [torch.zeros(0, dtype=torch.long)]
        + [
            torch.randint(0, limits[f], (n,), generator=gen)
            for f, n in zip(features, per_key, strict=True)
        ]
    )
    return lengths, values


def random_dlrm_inputs(
    limits: Mapping[str, int], dense_in: int, batch: int, gen: torch.Generator, max_len: int = 3
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A random DLRM batch's tensors `(dense, lengths, values, labels)`: `dense: (B, dense_in)`
    standard normal, `(lengths, values)` from `random_ids`, `labels: (B,)` float 0. or 1.

    Draws the ids first, then the dense features, then the labels, all from `gen`.
    """
    lengths, values = random_ids(limits, batch, max_len, gen)
    dense = torch.randn(batch, dense_in, generator=gen)
    labels = torch.randint(0, 2, (batch,), generator=gen).float()
    return dense, lengths, values, labels
