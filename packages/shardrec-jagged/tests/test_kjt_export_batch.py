"""A KJT's batch after a pytree round trip follows its leaves: a program exported with a
dynamic batch serves any batch (the input spec does not carry the example's batch)."""

from __future__ import annotations

import io

import torch
import torch.utils._pytree as pytree
from torch.export import Dim

from shardrec_jagged import KeyedJaggedTensor


def _kjt(batch: int, offsets_only: bool = False) -> KeyedJaggedTensor:
    gen = torch.Generator().manual_seed(batch)
    lengths = torch.randint(0, 3, (2 * batch,), generator=gen)
    values = torch.randint(0, 9, (int(lengths.sum()),), generator=gen)
    if offsets_only:
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
        return KeyedJaggedTensor(keys=["a", "b"], values=values, offsets=offsets)
    return KeyedJaggedTensor(keys=["a", "b"], values=values, lengths=lengths)


def test_context_leaves_out_a_batch_the_leaves_give() -> None:
    for kjt in (_kjt(3), _kjt(3, offsets_only=True)):
        leaves, spec = pytree.tree_flatten(kjt)
        assert spec.context[1] is None
        back = pytree.tree_unflatten(leaves, spec)
        assert back.stride() == 3 and back.stride_per_key() == [3, 3]
        assert back.to_dict()["b"].lengths().tolist() == kjt.to_dict()["b"].lengths().tolist()


def test_variable_batch_and_keyless_kjts_keep_their_batch_in_the_context() -> None:
    vbe = KeyedJaggedTensor(
        keys=["a", "b"],
        values=torch.arange(4),
        lengths=torch.tensor([1, 2, 1]),
        stride_per_key_per_rank=[[2], [1]],
    )
    leaves, spec = pytree.tree_flatten(vbe)
    assert spec.context[1] == vbe.stride()
    back = pytree.tree_unflatten(leaves, spec)
    assert back.stride() == vbe.stride() and back.stride_per_key() == [2, 1]
    empty = KeyedJaggedTensor(keys=[], values=torch.tensor([], dtype=torch.int64), stride=5)
    leaves, spec = pytree.tree_flatten(empty)
    assert spec.context[1] == 5
    assert pytree.tree_unflatten(leaves, spec).stride() == 5


class _PerSample(torch.nn.Module):
    """Ids per sample: reads the batch (stride) inside the module."""

    def forward(self, kjt: KeyedJaggedTensor) -> torch.Tensor:
        return kjt.lengths().view(len(kjt.keys()), kjt.stride()).sum(0)


def test_exported_program_with_a_dynamic_batch_serves_other_batches() -> None:
    example = _kjt(4)
    batch = Dim("batch", min=2)
    # one entry per leaf: values, weights, lengths, offsets, inverse-indices tensor
    dynamic = ([{0: Dim("ids", min=2)}, None, {0: 2 * batch}, None, None],)
    program = torch.export.export(_PerSample(), (example,), dynamic_shapes=dynamic, strict=False)
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    buffer.seek(0)
    served = torch.export.load(buffer).module()
    for b in (2, 4, 9):
        kjt = _kjt(b)
        assert torch.equal(served(kjt), _PerSample()(kjt))
