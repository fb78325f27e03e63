"""Shape-only stand-ins that `torch.export` records in place of a collection's lookup.

An encapsulated collection's forward calls one of these custom ops instead of reading its
tables, so the exported graph holds one opaque node per collection (with the inputs it reads
and the output shapes) and no table-specific code. After `torch.export.unflatten`,
`decapsulate_ir_modules` swaps the real module back in; the ops' own results (zeros of the
right shapes) are only what the exported program returns before that.

TorchRec registers the same ops in the `torchrec` namespace; ours live in `shardrec`.
"""

from typing import Any

import torch

__all__ = ["ir_ec_lookup", "ir_emb_lookup", "ir_kt_regroup"]


def _device(tensors: list[torch.Tensor | None]) -> torch.device | None:
    for t in tensors:
        if t is not None:
            return t.device
    return None


def _pooled_op(name: str, doc: str) -> Any:
    """A custom op returning one `(batch_size, d)` tensor per width `d` in `dims`: zeros when
    run, empty tensors of the same shapes when traced."""

    def run(
        tensors: list[torch.Tensor | None],
        batch_size: int,
        dims: list[int],
        dtype: torch.dtype = torch.float32,
    ) -> list[torch.Tensor]:
        device = _device(tensors)
        return [torch.zeros(batch_size, d, device=device, dtype=dtype) for d in dims]

    run.__doc__ = doc
    op = torch.library.custom_op(f"shardrec::{name}", mutates_args=())(run)

    @op.register_fake
    def _fake(
        tensors: list[torch.Tensor | None],
        batch_size: int,
        dims: list[int],
        dtype: torch.dtype = torch.float32,
    ) -> list[torch.Tensor]:
        device = _device(tensors)
        return [torch.empty(batch_size, d, device=device, dtype=dtype) for d in dims]

    return op


ir_emb_lookup = _pooled_op(
    "ir_emb_lookup", "One `(batch_size, d)` tensor per pooled output of width `d` in `dims`."
)
ir_kt_regroup = _pooled_op(
    "ir_kt_regroup", "One `(batch_size, d)` tensor per regrouped output of width `d` in `dims`."
)


@torch.library.custom_op("shardrec::ir_ec_lookup", mutates_args=())
def ir_ec_lookup(
    values: torch.Tensor,
    lengths: torch.Tensor,
    num_keys: int,
    feature_index: list[int],
    dims: list[int],
    need_indices: bool,
    dtype: torch.dtype = torch.float32,
) -> list[torch.Tensor]:
    """Per output segment (feature `feature_index[s]` of the KJT, width `dims[s]`): `(n, d)`
    rows, n the feature's id count; then, when `need_indices`, each segment's `(n,)` ids."""
    counts = lengths.view(num_keys, -1).sum(1).tolist() if num_keys else []
    starts = [0]
    for c in counts:
        starts.append(starts[-1] + int(c))
    rows = [
        torch.zeros(int(counts[k]), d, device=values.device, dtype=dtype)
        for k, d in zip(feature_index, dims, strict=True)
    ]
    ids = [values[starts[k] : starts[k + 1]].clone() for k in feature_index] if need_indices else []
    return rows + ids


@ir_ec_lookup.register_fake
def _ir_ec_lookup_fake(
    values: torch.Tensor,
    lengths: torch.Tensor,
    num_keys: int,
    feature_index: list[int],
    dims: list[int],
    need_indices: bool,
    dtype: torch.dtype = torch.float32,
) -> list[torch.Tensor]:
    ctx = torch.library.get_ctx()
    sizes = [ctx.new_dynamic_size() for _ in feature_index]
    rows = [values.new_empty(n, d, dtype=dtype) for n, d in zip(sizes, dims, strict=True)]
    ids = [values.new_empty(n) for n in sizes] if need_indices else []
    return rows + ids
