"""TorchRec's all-to-all plumbing on KeyedJaggedTensor: what a rank sends (``dist_labels``,
``dist_splits``, ``dist_tensors``) and the KJT a rank rebuilds from what it got (``dist_init``).

shardrec's own input distribution (shardrec-collectives' KJT all-to-all) does not use these:
they are for code written against TorchRec's ``KJTAllToAll``, which sends a KJT's tensors in
pieces and calls ``dist_init`` on the receiving side.

W ranks each hold a KJT over the same keys; ``key_splits[j]`` consecutive keys go to rank j.
Each rank sends rank j, per tensor (``dist_labels`` names them, ``dist_splits`` sizes them)::

    lengths   the bags of group j's keys         (sum of their stride_per_key)
    values    their ids                          (sum of their length_per_key)
    strides   variable batch only: group j's stride_per_key, one int per key
    weights   weighted only: like values

Rank j receives every tensor rank-major (2 ranks, keys f, g, batch 2 on each)::

    lengths = [f0 f0 g0 g0 | f1 f1 g1 g1]     segments (rank, key): (0,f) (0,g) (1,f) (1,g)
    recat   = [0, 2, 1, 3]                    new segment i = received segment recat[i]
    result  = [f0 f0 f1 f1 | g0 g0 g1 g1]     key-major, stride 4 (the ranks' batches summed)

``recat`` holds one index per (rank, key) segment when every rank has the same batch (or the
batch varies per key: ``variable_stride_per_key``), and one index per bag otherwise (TorchRec's
``_get_recat`` expands it so). ``recat=None`` keeps the received order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from shardrec_jagged import _kernels
from shardrec_jagged._kjt_layout import cumsum
from shardrec_jagged._script_dist import DistInitArgs
from shardrec_jagged._torch_kernels import index_tensor
from shardrec_jagged._validation import check_keys

if TYPE_CHECKING:
    from shardrec_jagged.keyed_jagged_tensor import KeyedJaggedTensor

__all__ = ["dist_init", "dist_labels", "dist_splits", "dist_tensors"]


def dist_labels(kjt: KeyedJaggedTensor) -> list[str]:
    """Names of ``dist_tensors``, in order: lengths, values[, strides][, weights]."""
    labels = ["lengths", "values"]
    if kjt.variable_stride_per_key():
        labels.append("strides")
    if kjt.weights_or_none() is not None:
        labels.append("weights")
    return labels


def dist_splits(kjt: KeyedJaggedTensor, key_splits: Sequence[int]) -> list[list[int]]:
    """Per ``dist_tensors`` entry, how many of its rows go to each rank: rank j gets the next
    ``key_splits[j]`` keys (one host read for ``length_per_key``, cached)."""
    splits = [int(s) for s in key_splits]
    n_keys = len(kjt.keys())
    if any(s < 0 for s in splits) or sum(splits) != n_keys:
        raise ValueError(
            f"key_splits {splits} must be >= 0 and sum to the {n_keys} keys {kjt.keys()} "
            "(key_splits[j] consecutive keys go to rank j)"
        )
    bags = _sum_by_splits(kjt.stride_per_key(), splits)
    ids = _sum_by_splits(kjt.length_per_key(), splits)
    out = [bags, ids]
    if kjt.variable_stride_per_key():
        out.append(splits)
    if kjt.weights_or_none() is not None:
        out.append(ids)
    return out


def dist_tensors(kjt: KeyedJaggedTensor) -> list[torch.Tensor]:
    """The tensors to send, as ``dist_labels`` names them; strides: ``(F,)`` int64 on the
    KJT's device."""
    tensors = [kjt.lengths(), kjt.values()]
    if kjt.variable_stride_per_key():
        tensors.append(index_tensor(kjt.stride_per_key(), kjt.device()))
    weights = kjt.weights_or_none()
    if weights is not None:
        tensors.append(weights)
    return tensors


def dist_init(
    cls: type[KeyedJaggedTensor], args: DistInitArgs, stagger: int = 1
) -> KeyedJaggedTensor:
    """A synced ``cls`` from ``args`` = TorchRec's ``dist_init`` arguments but ``stagger``, as
    one tuple (the TorchScript form, ``_script_dist.kjt_dist_init``, takes the same): over
    ``keys``, from the tensors ``num_workers`` ranks sent this one (module docstring);
    ``tensors`` as ``dist_labels`` names them, each the concatenation of every rank's piece,
    rank-major. ``stride_per_rank``: each sender's batch size (fixed batch); ``stagger`` > 1
    (TorchRec's TWRW) reorders the per-rank strides of a variable batch as TorchRec does."""
    keys, tensors, variable_stride_per_key, num_workers, recat, stride_per_rank = args
    keys_ = check_keys(keys)
    expected = 2 + int(variable_stride_per_key)
    if len(tensors) not in (expected, expected + 1):
        labels = "lengths, values" + (", strides" if variable_stride_per_key else "")
        raise ValueError(
            f"dist_init got {len(tensors)} tensors; with variable_stride_per_key="
            f"{variable_stride_per_key} it takes [{labels}] and optionally weights"
        )
    if num_workers < 1 or stagger < 1 or num_workers % stagger != 0:
        raise ValueError(
            f"num_workers = {num_workers}, stagger = {stagger}: num_workers must be >= 1 and "
            "a multiple of stagger >= 1"
        )
    lengths, values = tensors[0], tensors[1]
    weights = tensors[expected] if len(tensors) == expected + 1 else None
    if variable_stride_per_key:
        strides = tensors[2]
        if strides.numel() != num_workers * len(keys_):
            raise ValueError(
                f"strides has {strides.numel()} entries; it must hold one per (rank, key): "
                f"num_workers {num_workers} x {len(keys_)} keys"
            )
        per_rank: list[list[int]] = strides.view(num_workers, len(keys_)).tolist()
        sizes = [s for row in per_rank for s in row]  # bags per (rank, key) segment
        if recat is not None:
            lengths, values, weights = _permute_segments(lengths, values, weights, sizes, recat)
        spkpr = [list(col) for col in zip(*per_rank, strict=True)] if keys_ else []
        if stagger > 1:
            # Column p holds the strides of sender (p % stagger) * (W / stagger) + p // stagger.
            group = num_workers // stagger
            order = [(p % stagger) * group + p // stagger for p in range(num_workers)]
            spkpr = [[row[i] for i in order] for row in spkpr]
        return cls(keys_, values, weights, lengths=lengths, stride_per_key_per_rank=spkpr).sync()
    if stride_per_rank is None or len(stride_per_rank) != num_workers:
        raise ValueError(
            f"stride_per_rank = {stride_per_rank}: without variable_stride_per_key it must "
            f"give each of the {num_workers} senders' batch size"
        )
    batches = [int(b) for b in stride_per_rank]
    _check_lengths(lengths, len(keys_) * sum(batches))
    if recat is not None and batches and all(b == batches[0] for b in batches):
        sizes = [batches[0]] * (num_workers * len(keys_))
        lengths, values, weights = _permute_segments(lengths, values, weights, sizes, recat)
    elif recat is not None:  # batch varies per rank: recat holds one index per bag
        lengths, values, weights = _permute_bags(lengths, values, weights, recat)
    return cls(keys_, values, weights, lengths=lengths, stride=sum(batches)).sync()


def _sum_by_splits(per_key: Sequence[int], splits: Sequence[int]) -> list[int]:
    bounds = cumsum(splits)
    return [sum(per_key[bounds[i] : bounds[i + 1]]) for i in range(len(splits))]


def _recat_list(recat: torch.Tensor, n: int, unit: str) -> list[int]:
    """``recat`` as host ints, checked to index ``n`` segments (one host read)."""
    if recat.is_floating_point() or recat.dim() != 1 or recat.numel() != n:
        raise ValueError(
            f"recat must be a 1-D integer tensor of {n} indices, one per {unit}; got "
            f"{recat.dtype} of shape {tuple(recat.shape)}"
        )
    order: list[int] = recat.tolist()
    bad = [i for i in order if not 0 <= i < n]
    if bad:
        raise ValueError(f"recat index {bad[0]} is out of range for {n} {unit}s (0..{n - 1})")
    return order


def _check_lengths(lengths: torch.Tensor, n_bags: int) -> None:
    if lengths.numel() != n_bags:
        raise ValueError(
            f"lengths has {lengths.numel()} entries but the senders' strides give {n_bags} "
            "bags; lengths must hold every bag received"
        )


def _permute_segments(
    lengths: torch.Tensor,
    values: torch.Tensor,
    weights: torch.Tensor | None,
    sizes: list[int],
    recat: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Reorder (rank, key) segments of ``sizes[i]`` bags each to ``recat``."""
    order = _recat_list(recat, len(sizes), "(rank, key) segment")
    _check_lengths(lengths, sum(sizes))
    bounds = _kernels.lengths_to_offsets(lengths)[index_tensor(cumsum(sizes), lengths.device)]
    per_segment: list[int] = _kernels.offsets_to_lengths(bounds).tolist()  # ids per segment
    total = sum(per_segment)
    if min(per_segment, default=0) < 0 or total > values.size(0):
        raise ValueError(
            f"the received lengths give {per_segment} ids per (rank, key) segment but values "
            f"has {values.size(0)}; lengths must be >= 0 and sum to at most values.size(0)"
        )
    new_values = _kernels.permute_segments(values[:total], per_segment, order)
    new_weights = (
        None if weights is None else _kernels.permute_segments(weights[:total], per_segment, order)
    )
    return _kernels.permute_segments(lengths, sizes, order), new_values, new_weights


def _permute_bags(
    lengths: torch.Tensor, values: torch.Tensor, weights: torch.Tensor | None, recat: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Reorder single bags to ``recat``: one gather of the ids of every bag."""
    order = _recat_list(recat, lengths.numel(), "bag")
    offsets = _kernels.lengths_to_offsets(lengths)
    smallest, needed = (int(lengths.min()), int(offsets[-1])) if order else (0, 0)
    if smallest < 0 or needed > values.size(0):
        raise ValueError(
            f"the received lengths (smallest {smallest}) need {needed} ids but values has "
            f"{values.size(0)}; lengths must be >= 0 and sum to at most values.size(0)"
        )
    index = index_tensor(order, lengths.device)
    starts = offsets[:-1][index]
    new_lengths = lengths[index]
    new_starts = _kernels.lengths_to_offsets(new_lengths)
    total = int(new_starts[-1]) if new_starts.numel() > 0 else 0
    # Id i of the output, in bag b, comes from starts[b] + (i - new_starts[b]).
    shift = torch.repeat_interleave((starts - new_starts[:-1]).to(torch.int64), new_lengths)
    ids = torch.arange(total, device=values.device) + shift
    return new_lengths, values[ids], None if weights is None else weights[ids]
