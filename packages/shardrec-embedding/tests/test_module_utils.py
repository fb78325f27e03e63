"""torchrec.modules.utils helpers against naive loops."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from shardrec_embedding.module_utils import (
    check_module_output_dimension,
    construct_jagged_tensors,
    construct_modulelist_from_single_module,
    convert_list_of_modules_to_modulelist,
    deterministic_dedup,
    extract_module_or_tensor_callable,
    get_module_output_dimension,
)
from shardrec_jagged import KeyedJaggedTensor
from shardrec_testing import seeded_generator


@pytest.mark.parametrize("seed", range(4))
def test_dedup_keeps_the_last_occurrence(seed: int) -> None:
    ids = torch.randint(0, 6, (15,), generator=seeded_generator("dedup", seed))
    unique, last = deterministic_dedup(ids)
    want = sorted(set(ids.tolist()))
    assert unique.tolist() == want
    assert last.tolist() == [max(i for i, v in enumerate(ids.tolist()) if v == u) for u in want]
    empty_u, empty_l = deterministic_dedup(torch.zeros(0, dtype=torch.int64))
    assert empty_u.numel() == 0 and empty_l.numel() == 0


def test_construct_jagged_tensors_splits_by_key_and_joins_repeated_names() -> None:
    kjt = KeyedJaggedTensor(
        keys=["a", "b", "c"],
        values=torch.tensor([1, 2, 3, 4, 5, 6]),
        lengths=torch.tensor([2, 0, 1, 1, 1, 1]),
    )
    rows = torch.arange(12.0).view(6, 2)
    out = construct_jagged_tensors(rows, kjt, ["x", "y", "x"], need_indices=True)
    assert list(out) == ["x", "y"]
    # b's ids are values 3 and 4 (rows 2-3), one per sample
    assert torch.equal(out["y"].values(), rows[2:4]) and out["y"].lengths().tolist() == [1, 1]
    assert out["y"].weights().tolist() == [3, 4]
    # "x" joins a (rows 0-1) and c (rows 4-5) along dim 1: the two keys have equal counts
    assert torch.equal(out["x"].values(), torch.cat([rows[0:2], rows[4:6]], dim=1))
    swapped = construct_jagged_tensors(
        rows, kjt, ["x", "y", "x"], features_to_permute_indices={"x": [1, 0]}
    )
    assert torch.equal(swapped["x"].values(), torch.cat([rows[4:6], rows[0:2]], dim=1))
    dedup = construct_jagged_tensors(
        rows[:3], kjt, ["a", "b", "c"], reverse_indices=torch.tensor([0, 1, 2, 2, 1, 0])
    )
    assert torch.equal(dedup["c"].values(), rows[[1, 0]])
    with pytest.raises(ValueError, match="2 embedding_names for 3 keys"):
        construct_jagged_tensors(rows, kjt, ["x", "y"])


def test_module_helpers() -> None:
    lin = nn.Linear(3, 5)
    assert get_module_output_dimension(lin, 3) == 5
    assert check_module_output_dimension([lin, nn.Linear(3, 5)], 3, 5)
    assert not check_module_output_dimension(nn.ModuleList([lin, nn.Linear(3, 4)]), 3, 5)
    assert extract_module_or_tensor_callable(lin) is lin
    assert extract_module_or_tensor_callable(torch.relu) is torch.relu
    made = extract_module_or_tensor_callable(lambda: nn.ReLU())
    assert isinstance(made, nn.ReLU)
    with pytest.raises(ValueError, match=r"must return an nn\.Module, got int"):
        extract_module_or_tensor_callable(lambda: 3)  # type: ignore[arg-type,return-value]  # bad input
    nested = construct_modulelist_from_single_module(nn.Sequential(nn.Linear(2, 2)), (2, 3))
    copies = [m for row in nested for m in row]  # type: ignore[attr-defined]  # ModuleLists
    assert len(copies) == 6 and all(torch.all(c[0].bias == 0) for c in copies)
    assert len({id(c[0].weight) for c in copies}) == 6
    grid = convert_list_of_modules_to_modulelist([[nn.ReLU()], [nn.Tanh()]], (2, 1))  # type: ignore[list-item]  # nested lists
    assert isinstance(grid[1][0], nn.Tanh)  # type: ignore[index]  # ModuleLists
    with pytest.raises(ValueError, match="got 1 modules where sizes"):
        convert_list_of_modules_to_modulelist([nn.ReLU()], (2,))
