"""fbgemm-backed versions of the kernels where fbgemm has an operator for the job.

Call only after ``_backend.fbgemm_available()`` returned True: these reach ``torch.ops.fbgemm``,
which exists only once ``fbgemm_gpu`` is imported. Each returns exactly what its namesake in
``_torch_kernels`` returns (the parity tests check it). Calls go to the ``.default`` overload
directly: the overload packet's Python ``__call__`` costs ~0.5 us per call.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from shardrec_jagged._torch_kernels import KjtTensors, index_tensor


def lengths_to_offsets(lengths: torch.Tensor) -> torch.Tensor:
    """``lengths: (N,)`` -> ``offsets: (N + 1,)``."""
    out: torch.Tensor = torch.ops.fbgemm.asynchronous_complete_cumsum.default(lengths)
    return out


def batched_lengths_to_offsets(lengths_2d: torch.Tensor) -> torch.Tensor:
    """``(F, B)`` -> ``(F, B + 1)``, each row starting at 0."""
    out: torch.Tensor = torch.ops.fbgemm.asynchronous_complete_cumsum.default(lengths_2d)
    return out


def length_per_key(lengths: torch.Tensor, num_keys: int, stride: int) -> list[int]:
    """Ids per key of a fixed-batch ``lengths: (F * B,)``. One device-to-host copy."""
    bounds = torch.arange(0, num_keys * stride + 1, max(stride, 1), dtype=lengths.dtype)
    if stride == 0:
        return [0] * num_keys
    sums = torch.ops.fbgemm.segment_sum_csr.default(1, bounds.to(lengths.device), lengths)
    out: list[int] = sums.tolist()
    return out


def permute_kjt(
    parts: KjtTensors, length_per_key: Sequence[int], order: Sequence[int], stride: int
) -> KjtTensors:
    """A fixed-batch KJT's ``parts`` with its keys reordered to ``order`` (repeats allowed)."""
    values, weights, lengths = parts
    if stride == 0 or len(order) == 0:
        return (
            values[:0] if len(order) == 0 else values,
            None if weights is None else (weights[:0] if len(order) == 0 else weights),
            lengths[:0],
        )
    index = index_tensor(order, lengths.device, torch.int32)
    total = sum(length_per_key[i] for i in order)
    new_lengths, new_values, new_weights = torch.ops.fbgemm.permute_2D_sparse_data.default(
        index, lengths.reshape(-1, stride), values, weights, total
    )
    return new_values, new_weights, new_lengths.view(-1)
