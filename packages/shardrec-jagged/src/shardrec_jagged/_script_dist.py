# tolist() is untyped in torch's annotations:
# mypy: disable-error-code="no-untyped-call, no-any-return"
"""TorchScript form of ``KeyedJaggedTensor.dist_init`` (the eager one: ``_kjt_dist.py``, whose
docstring draws the layout). Scripted code reaches the class's static method as the Python
function, which branches here on ``is_scripting()`` (docs/design/torchscript.md).

Written in the TorchScript subset: f-strings without ``!r``, loops instead of
``zip(strict=...)``; split/cat instead of a gather for a per-bag ``recat`` (scripted code is the
inference path, where a rank gets few bags).
"""

import torch

from shardrec_jagged._script_types import ScriptKeyedJaggedTensor

__all__ = ["kjt_dist_init"]


def _order(recat: torch.Tensor, n: int, unit: str) -> list[int]:
    if recat.is_floating_point() or recat.dim() != 1 or recat.numel() != n:
        raise ValueError(f"recat must be a 1-D integer tensor of {n} indices, one per {unit}")
    order: list[int] = recat.long().tolist()
    for i in order:
        if i < 0 or i >= n:
            raise ValueError(f"recat index {i} is out of range for {n} {unit}")
    return order


def _pick(data: torch.Tensor, sizes: list[int], order: list[int]) -> torch.Tensor:
    """The consecutive segments of ``data`` (sizes ``sizes``, summing to at most its length)
    in ``order``."""
    total = 0
    for s in sizes:
        if s < 0:
            raise ValueError("the received lengths give a negative segment: lengths must be >= 0")
        total += s
    if total > data.size(0):
        raise ValueError(f"the received lengths need {total} ids but values has {data.size(0)}")
    parts = torch.split_with_sizes(data[:total], sizes)
    if len(order) == 0:
        return data[:0]
    return torch.cat([parts[i] for i in order])


def _ids_per(lengths: torch.Tensor, sizes: list[int]) -> list[int]:
    """Ids in each segment of ``sizes[i]`` bags of ``lengths``."""
    total = 0
    for s in sizes:
        total += s
    if total != lengths.numel():
        raise ValueError(
            f"lengths has {lengths.numel()} entries but the senders' strides give {total} bags"
        )
    out: list[int] = []
    for part in torch.split_with_sizes(lengths, sizes):
        out.append(int(part.sum()))
    return out


# TorchRec's dist_init arguments but stagger: (keys, tensors, variable_stride_per_key,
# num_workers, recat, stride_per_rank).
DistInitArgs = tuple[
    list[str], list[torch.Tensor], bool, int, torch.Tensor | None, list[int] | None
]


def kjt_dist_init(args: DistInitArgs, stagger: int = 1) -> ScriptKeyedJaggedTensor:
    keys, tensors, variable_stride_per_key, num_workers, recat, stride_per_rank = args
    n = 3 if variable_stride_per_key else 2
    if len(tensors) != n and len(tensors) != n + 1:
        raise ValueError(f"dist_init got {len(tensors)} tensors; it takes {n} or {n + 1}")
    if num_workers < 1 or stagger < 1 or num_workers % stagger != 0:
        raise ValueError(
            f"num_workers = {num_workers}, stagger = {stagger}: num_workers must be >= 1 and "
            "a multiple of stagger >= 1"
        )
    lengths = tensors[0]
    values = tensors[1]
    weights: torch.Tensor | None = None
    if len(tensors) == n + 1:
        weights = tensors[n]
    n_keys = len(keys)
    if variable_stride_per_key:
        strides: list[int] = tensors[2].long().tolist()
        if len(strides) != num_workers * n_keys:
            raise ValueError(f"strides has {len(strides)} entries; it needs one per (rank, key)")
        if recat is not None:
            order = _order(recat, len(strides), "(rank, key) segment")
            ids = _ids_per(lengths, strides)
            values = _pick(values, ids, order)
            if weights is not None:
                weights = _pick(weights, ids, order)
            lengths = _pick(lengths, strides, order)
        group = num_workers // stagger
        spkpr: list[list[int]] = []
        for k in range(n_keys):
            row: list[int] = []
            for p in range(num_workers):
                row.append(strides[((p % stagger) * group + p // stagger) * n_keys + k])
            spkpr.append(row)
        return ScriptKeyedJaggedTensor.from_lengths_sync(
            keys, values, lengths, weights, None, spkpr
        )
    if stride_per_rank is None or len(stride_per_rank) != num_workers:
        raise ValueError(f"stride_per_rank must give each of the {num_workers} senders' batch")
    same = True
    for b in stride_per_rank:
        same = same and b == stride_per_rank[0]
    if recat is not None:
        # one index per (rank, key) segment of equal batches, else one per bag
        sizes = [stride_per_rank[0]] * (num_workers * n_keys) if same else [1] * lengths.numel()
        order = _order(recat, len(sizes), "segment" if same else "bag")
        ids = _ids_per(lengths, sizes)
        values = _pick(values, ids, order)
        if weights is not None:
            weights = _pick(weights, ids, order)
        lengths = _pick(lengths, sizes, order)
    return ScriptKeyedJaggedTensor.from_lengths_sync(
        keys, values, lengths, weights, sum(stride_per_rank), None
    )
