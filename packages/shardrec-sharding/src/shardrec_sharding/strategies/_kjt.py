"""Small KJT helpers the strategies share."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from shardrec_jagged import KeyedJaggedTensor
from shardrec_sharding.lookup import LocalLookup
from shardrec_sharding.types import DistInput


def unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def empty_kjt(keys: Sequence[str], like: KeyedJaggedTensor) -> KeyedJaggedTensor:
    """A KJT with `keys`, batch 0 and no ids (what a rank sends once it knows it must fail)."""
    values = like.values()
    return KeyedJaggedTensor(
        list(keys), values.new_empty(0), lengths=like.lengths().new_empty(0), stride=0
    )


def expand_variable_batch(features: KeyedJaggedTensor) -> KeyedJaggedTensor:
    """A variable-batch KJT (`stride_per_key`, with `inverse_indices`) as a fixed-batch KJT.

    TorchRec's contract for variable batch per feature: key f holds `B_f` distinct bags and
    `inverse_indices[f, b]` names the bag of sample b, so the output of sample b for f is that
    bag's. Expanding the bags to every sample gives the same output (and the same gradients, one
    contribution per sample) through the fixed-batch path. `lengths: (sum_f B_f,)` ->
    `(F * B,)`; `values` are gathered bag by bag, vectorized.
    """
    _, inverse = features.inverse_indices()
    num_keys, batch = len(features.keys()), int(inverse.shape[-1])
    lengths = features.lengths().long()
    device = lengths.device
    strides = torch.tensor(features.stride_per_key(), device=device)
    first_bag = torch.cumsum(strides, 0) - strides
    bag = (inverse.to(device).long().view(num_keys, batch) + first_bag.unsqueeze(1)).reshape(-1)
    offsets = torch.cumsum(lengths, 0) - lengths
    new_lengths = lengths[bag]
    total = int(new_lengths.sum())
    new_offsets = torch.cumsum(new_lengths, 0) - new_lengths
    index = torch.arange(total, device=device) + torch.repeat_interleave(
        offsets[bag] - new_offsets, new_lengths, output_size=total
    )
    weights = features.weights_or_none()
    return KeyedJaggedTensor(
        features.keys(),
        features.values()[index],
        weights=None if weights is None else weights[index],
        lengths=new_lengths.to(features.lengths().dtype),
        stride=batch,
    )


def pooled_lookup(lookup: LocalLookup, dist_input: DistInput) -> torch.Tensor:
    """The local pooled lookup of the features `input_dist` delivered: (sum of batch sizes, D)."""
    kjt = dist_input.features
    return lookup(
        kjt.values(),
        kjt.lengths(),
        kjt.weights_or_none(),
        kjt.offset_per_key(),
        sum(dist_input.batch_size_per_rank),
        dist_input.key_index,
    )
