"""KeyedJaggedTensor's TorchRec all-to-all methods against a naive all-to-all.

Every rank's KJT is a ``RefKJT`` (lists of bags). The all-to-all is simulated with plain
slicing: rank r's ``dist_tensors`` are cut by its ``dist_splits`` and rank j concatenates the
pieces meant for it, rank-major. ``recat`` is built by loops from TorchRec's definition (one
index per (rank, key) segment; per bag when the batch differs between ranks). ``dist_init``
must then give, for rank j's keys, every rank's bags of that key one after the other, which the
reference builds by concatenating the lists.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from jagged_reference import RefKJT, jagged_settings, kjt_lists, kjt_wlists

from shardrec_jagged import KeyedJaggedTensor


def simulated_all_to_all(
    kjts: list[KeyedJaggedTensor], key_splits: list[int]
) -> list[list[torch.Tensor]]:
    """``received[j][i]``: tensor i as rank j gets it (every rank's piece j, rank-major)."""
    sent = [(k.dist_tensors(), k.dist_splits(key_splits)) for k in kjts]
    received: list[list[torch.Tensor]] = []
    for j in range(len(kjts)):
        per_tensor = []
        for i in range(len(sent[0][0])):
            pieces = []
            for tensors, splits in sent:
                start = sum(splits[i][:j])
                pieces.append(tensors[i][start : start + splits[i][j]])
            per_tensor.append(torch.cat(pieces))
        received.append(per_tensor)
    return received


def segment_recat(n_keys: int, world: int) -> list[int]:
    """Key-major order of the rank-major (rank, key) segments."""
    return [r * n_keys + k for k in range(n_keys) for r in range(world)]


def bag_recat(n_keys: int, batches: list[int]) -> list[int]:
    """The same order, one index per bag: segment (r, k) holds batches[r] bags."""
    start = [sum(n_keys * b for b in batches[:r]) for r in range(len(batches))]
    out: list[int] = []
    for k in range(n_keys):
        for r, b in enumerate(batches):
            first = start[r] + k * b
            out.extend(range(first, first + b))
    return out


@st.composite
def dist_cases(draw: st.DrawFn) -> tuple[str, list[RefKJT], list[int]]:
    """(mode, one RefKJT per rank over the same keys, key_splits)."""
    world = draw(st.integers(1, 3))
    n_keys = draw(st.integers(0, 4))
    mode = draw(st.sampled_from(["same_batch", "batch_per_rank", "variable"]))
    weighted = draw(st.booleans())
    dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    cuts = sorted(draw(st.lists(st.integers(0, n_keys), min_size=world - 1, max_size=world - 1)))
    bounds = [0, *cuts, n_keys]
    key_splits = [bounds[j + 1] - bounds[j] for j in range(world)]
    keys = [f"f{i}" for i in range(n_keys)]
    same = draw(st.integers(0, 3))
    refs = []
    for _ in range(world):
        spkpr = None
        if mode == "variable":
            columns = draw(st.integers(1, 2))  # the sender's own per-rank strides
            spkpr = [[draw(st.integers(0, 3)) for _ in range(columns)] for _ in keys]
            strides = [sum(r) for r in spkpr]
        else:
            b = same if mode == "same_batch" else draw(st.integers(0, 3))
            strides = [b] * n_keys
        bags = [[draw(st.lists(st.integers(0, 99), max_size=3)) for _ in range(s)] for s in strides]
        wbags = [[[v / 8 for v in bag] for bag in k] for k in bags] if weighted else None
        refs.append(RefKJT(keys, bags, wbags, spkpr, lengths_dtype=dtype))
    return mode, refs, key_splits


def expected_on(refs: list[RefKJT], lo: int, hi: int, variable: bool) -> RefKJT:
    """Rank j's KJT by lists: for each of its keys, every rank's bags in rank order."""
    keys = refs[0].keys[lo:hi]
    bags = [[bag for ref in refs for bag in ref.bags[k]] for k in range(lo, hi)]
    wbags = None
    if refs[0].wbags is not None:
        wbags = [[bag for ref in refs for bag in ref.wbags[k]] for k in range(lo, hi)]  # type: ignore[index]
    spkpr = [[len(ref.bags[k]) for ref in refs] for k in range(lo, hi)] if variable else None
    return RefKJT(keys, bags, wbags, spkpr)


@jagged_settings
@given(case=dist_cases())
def test_dist_init_rebuilds_every_ranks_bags_per_key(
    case: tuple[str, list[RefKJT], list[int]],
) -> None:
    mode, refs, key_splits = case
    world, variable = len(refs), mode == "variable"
    kjts = [ref.build() for ref in refs]
    received = simulated_all_to_all(kjts, key_splits)
    batches = [kjt.stride() for kjt in kjts]
    lo = 0
    for j, tensors in enumerate(received):
        n = key_splits[j]
        keys = refs[0].keys[lo : lo + n]
        if n == 0 or world == 1:
            recat = None
        elif mode == "batch_per_rank" and len(set(batches)) > 1:
            recat = torch.tensor(bag_recat(n, batches), dtype=torch.int32)
        else:
            recat = torch.tensor(segment_recat(n, world), dtype=torch.int32)
        # TorchRec's positional order here; the named cases below pass keywords.
        out = KeyedJaggedTensor.dist_init(
            keys, tensors, variable, world, recat, None if variable else batches
        )
        ref = expected_on(refs, lo, lo + n, variable)
        assert out.keys() == keys
        assert kjt_lists(out) == ref.bags
        assert out.length_per_key_or_none() == ref.length_per_key()  # dist_init syncs
        if ref.wbags is not None:
            assert kjt_wlists(out) == ref.wbags
        else:
            assert out.weights_or_none() is None
        if variable:
            assert out.stride_per_key_per_rank() == ref.spkpr
        else:
            assert out.stride() == sum(batches) and not out.variable_stride_per_key()
        lo += n


def test_what_a_rank_sends() -> None:
    # keys a, b, c; batch 2; ids per key 3, 1, 2.
    lengths = torch.tensor([2, 1, 0, 1, 2, 0])
    kjt = KeyedJaggedTensor(["a", "b", "c"], torch.arange(6), torch.ones(6), lengths=lengths)
    assert kjt.dist_labels() == ["lengths", "values", "weights"]
    assert kjt.dist_splits([1, 2]) == [[2, 4], [3, 3], [3, 3]]
    assert kjt.dist_splits([0, 3, 0]) == [[0, 6, 0], [0, 6, 0], [0, 6, 0]]
    sent = kjt.dist_tensors()
    assert all(t is o for t, o in zip(sent, [lengths, kjt.values(), kjt.weights()], strict=True))
    vbe = KeyedJaggedTensor(
        ["a", "b"], torch.arange(4), lengths=torch.tensor([1, 0, 2, 1]),
        stride_per_key_per_rank=[[1, 2], [1, 0]],
    )  # fmt: skip
    assert vbe.dist_labels() == ["lengths", "values", "strides"]
    assert vbe.dist_splits([1, 1]) == [[3, 1], [3, 1], [1, 1]]
    strides = vbe.dist_tensors()[2]
    assert strides.dtype == torch.int64 and strides.tolist() == [3, 1]


def test_dist_init_staggered_strides() -> None:
    # 4 senders in 2 staggered groups: column p holds sender (p % 2) * 2 + p // 2.
    strides = torch.tensor([[1, 5], [2, 6], [3, 7], [4, 8]])  # [rank][key]
    lengths = torch.ones(int(strides.sum()), dtype=torch.int32)
    out = KeyedJaggedTensor.dist_init(
        keys=["x", "y"],
        tensors=[lengths, torch.arange(lengths.numel()), strides.reshape(-1)],
        variable_stride_per_key=True,
        num_workers=4,
        recat=None,
        stride_per_rank=None,
        stagger=2,
    )
    order = torch.arange(4).view(2, -1).T.reshape(-1).tolist()
    assert order == [0, 2, 1, 3]
    assert out.stride_per_key_per_rank() == [[1, 3, 2, 4], [5, 7, 6, 8]]


def _fixed(**kw: object) -> KeyedJaggedTensor:
    args: dict[str, object] = {
        "keys": ["a"],
        "tensors": [torch.tensor([1, 2]), torch.arange(3)],
        "variable_stride_per_key": False,
        "num_workers": 2,
        "recat": torch.tensor([0, 1]),
        "stride_per_rank": [1, 1],
    }
    args.update(kw)
    return KeyedJaggedTensor.dist_init(**args)  # type: ignore[arg-type]


def test_dist_init_fixed_named_case() -> None:
    out = _fixed(recat=torch.tensor([1, 0]))  # rank 1's bag first
    assert out.lengths().tolist() == [2, 1] and out.values().tolist() == [1, 2, 0]
    assert out.stride() == 2


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"tensors": [torch.tensor([1, 2])]}, r"dist_init got 1 tensors; .*\[lengths, values\]"),
        ({"stride_per_rank": None}, r"stride_per_rank = None: .* each of the 2 senders"),
        ({"stride_per_rank": [2]}, r"stride_per_rank = \[2\]: .* each of the 2 senders"),
        ({"num_workers": 0}, r"num_workers = 0, stagger = 1: num_workers must be >= 1"),
        ({"stagger": 3}, r"num_workers = 2, stagger = 3: .* a multiple of stagger"),
        ({"recat": torch.tensor([0, 1, 1])}, r"recat must be a 1-D integer tensor of 2 indices"),
        ({"recat": torch.tensor([0.0, 1.0])}, r"recat must be .* got torch.float32"),
        ({"recat": torch.tensor([0, 2])}, r"recat index 2 is out of range for 2 "),
        ({"tensors": [torch.tensor([1, 2, 0]), torch.arange(3)]}, r"lengths has 3 entries but"),
        ({"tensors": [torch.tensor([2, 2]), torch.arange(3)]}, r"ids per .* values has 3"),
        ({"tensors": [torch.tensor([-1, 2]), torch.arange(3)]}, r"lengths must be >= 0"),
        ({"recat": None, "tensors": [torch.tensor([-1, 2]), torch.arange(3)]}, r"is negative"),
        # batch 1 on rank 0, 2 on rank 1: recat has one index per bag
        (
            {
                "stride_per_rank": [1, 2],
                "tensors": [torch.tensor([1, -1, 2]), torch.arange(2)],
                "recat": torch.tensor([0, 1, 2]),
            },
            r"smallest -1\) need 2 ids",
        ),
        (
            {
                "stride_per_rank": [1, 2],
                "tensors": [torch.tensor([1, 1, 2]), torch.arange(3)],
                "recat": torch.tensor([0, 1, 2]),
            },
            r"need 4 ids but values has 3",
        ),
        (
            {
                "stride_per_rank": [1, 2],
                "tensors": [torch.tensor([1, 1, 1]), torch.arange(3)],
                "recat": torch.tensor([0, 1]),
            },
            r"3 indices, one per bag",
        ),
        ({"stride_per_rank": [1, 2]}, r"lengths has 2 entries but the senders' strides give 3"),
    ],
)
def test_dist_init_bad_inputs(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _fixed(**kw)


def test_dist_init_bad_strides_and_splits() -> None:
    with pytest.raises(ValueError, match=r"strides has 3 entries; .* num_workers 2 x 1 keys"):
        KeyedJaggedTensor.dist_init(
            ["a"], [torch.ones(3), torch.arange(3), torch.ones(3)], True, 2, None, None
        )
    kjt = KeyedJaggedTensor(["a", "b"], torch.arange(2), lengths=torch.tensor([1, 1]))
    for splits in ([1], [2, -1, 1], [1, 2]):
        with pytest.raises(ValueError, match=r"key_splits .* must be >= 0 and sum to the 2 keys"):
            kjt.dist_splits(splits)


class Rebuild(torch.nn.Module):
    """Sends its input to itself as one of ``world`` ranks would (every sender alike), then
    rebuilds it: the scripted form of TorchRec's send-and-rebuild round trip."""

    def __init__(self, world: int, variable: bool, recat: list[int] | None) -> None:
        super().__init__()
        self.world, self.variable, self.recat = world, variable, recat

    def forward(
        self, kjt: KeyedJaggedTensor
    ) -> tuple[list[str], list[list[int]], KeyedJaggedTensor]:
        n_keys = len(kjt.keys())
        tensors = [torch.cat([t] * self.world) for t in kjt.dist_tensors()]
        recat = self.recat
        return (
            kjt.dist_labels(),
            kjt.dist_splits([n_keys]),
            KeyedJaggedTensor.dist_init(
                keys=kjt.keys(),
                tensors=tensors,
                variable_stride_per_key=self.variable,
                num_workers=self.world,
                recat=None if recat is None else torch.tensor(recat),
                stride_per_rank=None if self.variable else [kjt.stride()] * self.world,
            ),
        )


@pytest.mark.parametrize(
    ("variable", "weighted", "batches"),
    [(False, False, [2, 2]), (False, True, [3, 3]), (True, True, [1, 2])],
)
def test_scripted_dist_methods_match_eager(
    variable: bool, weighted: bool, batches: list[int]
) -> None:
    g = torch.Generator().manual_seed(7)
    keys = ["a", "b", "c"]
    spkpr = [[b + i for b in batches] for i in range(3)] if variable else None
    n_bags = sum(map(sum, spkpr)) if spkpr is not None else 3 * batches[0]
    lengths = torch.randint(0, 4, (n_bags,), generator=g)
    n = int(lengths.sum())
    weights = torch.rand(n, generator=g) if weighted else None
    values = torch.randint(0, 50, (n,), generator=g)
    kjt = KeyedJaggedTensor(keys, values, weights, lengths=lengths, stride_per_key_per_rank=spkpr)
    module = Rebuild(2, variable, segment_recat(3, 2))
    labels, splits, eager = module(kjt)
    s_labels, s_splits, scripted = torch.jit.script(module)(kjt)
    assert (s_labels, s_splits) == (labels, splits)
    assert scripted.keys() == eager.keys() == keys
    for name in ("lengths", "values", "weights_or_none"):
        a, b = getattr(scripted, name)(), getattr(eager, name)()
        assert (a is None and b is None) or torch.equal(a, b), name
    assert scripted.stride_per_key() == eager.stride_per_key()
    # every sender alike: each key's bags come twice, one copy after the other
    ref = RefKJT(keys, [[*bags, *bags] for bags in kjt_lists(kjt)])
    assert kjt_lists(eager) == ref.bags
