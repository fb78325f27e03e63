"""A Criteo-shaped batch as shardrec's value types: what `nox -s demo` prints.

Criteo rows have 13 dense (integer count) features and 26 categorical features. Here each
categorical feature may hold several ids per sample (multi-hot), as in recommendation models
built on TorchRec. The script builds one small batch and walks through the operations the
sharded model uses on it: per-feature views, permuting features into table order, splitting
them across ranks, and regrouping pooled embeddings.
"""

from __future__ import annotations

import torch

from shardrec_jagged import KeyedJaggedTensor, KeyedTensor

BATCH = 4
DENSE = [f"int_{i}" for i in range(13)]
SPARSE = [f"cat_{i}" for i in range(26)]
EMBED_DIM = 4


def section(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 70 - len(title)))


def synthetic_batch(seed: int = 3) -> tuple[torch.Tensor, KeyedJaggedTensor, torch.Tensor]:
    """Dense (B, 13), sparse KJT over 26 features (0-3 ids per bag, ids < 1e6), labels (B,)."""
    g = torch.Generator().manual_seed(seed)
    dense = torch.log1p(torch.randint(0, 1000, (BATCH, len(DENSE)), generator=g).float())
    lengths = torch.randint(0, 4, (len(SPARSE) * BATCH,), generator=g, dtype=torch.int32)
    values = torch.randint(0, 1_000_000, (int(lengths.sum()),), generator=g)
    kjt = KeyedJaggedTensor.from_lengths_sync(keys=SPARSE, values=values, lengths=lengths)
    labels = torch.randint(0, 2, (BATCH,), generator=g).float()
    return dense, kjt, labels


def main() -> None:
    torch.set_printoptions(precision=2, linewidth=100)
    dense, kjt, labels = synthetic_batch()

    section(f"a Criteo-shaped batch: {BATCH} samples")
    print(f"dense features: {tuple(dense.shape)} (13 log-scaled counts per sample)")
    print(f"  sample 0:     {[round(x, 2) for x in dense[0].tolist()]}")
    print(f"labels:         {labels.tolist()}")
    print(
        f"sparse features: {len(kjt.keys())} keys, stride (batch) {kjt.stride()}, "
        f"{kjt.values().numel()} ids in total"
    )
    print(f"lengths (F * B = {kjt.lengths().numel()}): {kjt.lengths()[:12].tolist()} ...")
    print(f"length_per_key: {kjt.length_per_key()}")
    print("\nthe first four features, one bag per sample:")
    print(kjt.split([4, len(SPARSE) - 4])[0])

    section("to_dict: one JaggedTensor per feature (views, no copy)")
    per_feature = kjt.to_dict()
    for key in SPARSE[:3]:
        jt = per_feature[key]
        print(f"{key}: lengths {jt.lengths().tolist()}, offsets {jt.offsets().tolist()}")
        print(f"        padded (B, 3): {jt.to_padded_dense(3, padding_value=-1).tolist()}")
    print(f"kjt['cat_25'] -> {kjt['cat_25']}")

    section("permute: reorder features (a feature may appear twice)")
    order = [2, 0, 2]
    permuted = kjt.permute(order)
    print(f"permute({order}) -> keys {permuted.keys()}")
    print(permuted)

    section("split: features across 4 ranks (table-wise sharding)")
    for rank, part in enumerate(kjt.split([7, 7, 6, 6])):
        print(
            f"rank {rank}: {len(part.keys())} features {part.keys()[0]}..{part.keys()[-1]}, "
            f"{part.values().numel()} ids"
        )

    section("concat: two feature groups back into one")
    left, right = kjt.split([13, 13])
    again = KeyedJaggedTensor.concat([left, right])
    print(
        f"concat -> {len(again.keys())} keys, same values: "
        f"{torch.equal(again.values(), kjt.values())}"
    )

    section("KeyedTensor: pooled embeddings, regrouped for the interaction layer")
    g = torch.Generator().manual_seed(1)
    pooled = [torch.randn(BATCH, EMBED_DIM, generator=g) for _ in SPARSE]
    user_side = KeyedTensor.from_tensor_list(SPARSE[:13], pooled[:13])
    item_side = KeyedTensor.from_tensor_list(SPARSE[13:], pooled[13:])
    print(
        f"two KeyedTensors: {tuple(user_side.values().shape)} and "
        f"{tuple(item_side.values().shape)} (B, 13 keys x {EMBED_DIM})"
    )
    print(KeyedTensor.from_tensor_list(SPARSE[:2], pooled[:2]))
    groups = [SPARSE[0::2], SPARSE[1::2]]
    even, odd = KeyedTensor.regroup([user_side, item_side], groups)
    print(f"regroup into even/odd features -> {tuple(even.shape)}, {tuple(odd.shape)}")
    named = KeyedTensor.regroup_as_dict([user_side, item_side], groups, ["even", "odd"])
    print(
        f"regroup_as_dict -> {sorted(named)}; "
        f"'even' starts with cat_0: {torch.equal(named['even'][:, :EMBED_DIM], pooled[0])}"
    )
    print(f"to_dict()['cat_0'] == input: {torch.equal(user_side.to_dict()['cat_0'], pooled[0])}")


if __name__ == "__main__":
    main()
