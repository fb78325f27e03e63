"""TorchRec's `RandomRecDataset`: random batches of dense features, jagged ids and labels.

Each batch holds, per key f, B bags of a uniform random length in
`[min_ids_per_features[f], ids_per_features[f]]` with ids uniform in `[0, hash_sizes[f])`,
`dense_features (B, num_dense)` standard normal and `labels (B,)` int64 of 0/1.
`num_generated_batches` >= 0 generates that many batches once and cycles through them; < 0
generates every batch on the fly. `num_batches` bounds one pass (and is `len()`); None: endless.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import IterableDataset

from shardrec_data.batch import Batch
from shardrec_jagged import KeyedJaggedTensor

__all__ = ["RandomRecDataset"]


def _per_key(name: str, values: Sequence[int], keys: Sequence[str]) -> list[int]:
    if len(values) != len(keys):
        raise ValueError(
            f"length of {name} must be equal to the number of keys ({len(keys)}), got {len(values)}"
        )
    return [int(v) for v in values]


class RandomRecDataset(IterableDataset[Batch]):
    """Endless (or `num_batches`-long) random `Batch`es; see the module docstring.

    `hash_size` / `ids_per_feature` / `min_ids_per_feature` apply to every key unless the
    per-key lists are given (defaults: 100 ids, bags of up to 2; the minimum defaults to
    `ids_per_feature` when that is given, else 0). `manual_seed` makes the batches repeat.
    """

    def __init__(
        self,
        keys: list[str],
        batch_size: int,
        hash_size: int | None = None,
        hash_sizes: list[int] | None = None,
        ids_per_feature: int | None = None,
        ids_per_features: list[int] | None = None,
        num_dense: int = 50,
        manual_seed: int | None = None,
        num_batches: int | None = None,
        num_generated_batches: int = 10,
        min_ids_per_feature: int | None = None,
        min_ids_per_features: list[int] | None = None,
    ) -> None:
        super().__init__()
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.keys = list(keys)
        self.batch_size = batch_size
        self.hash_sizes = _per_key(
            "hash_sizes",
            hash_sizes if hash_sizes is not None else [hash_size or 100] * len(keys),
            keys,
        )
        self.ids_per_features = _per_key(
            "ids_per_features",
            ids_per_features
            if ids_per_features is not None
            else [ids_per_feature or 2] * len(keys),
            keys,
        )
        if min_ids_per_features is None:
            low = min_ids_per_feature if min_ids_per_feature is not None else ids_per_feature
            min_ids_per_features = [low or 0] * len(keys)
        self.min_ids_per_features = _per_key("min_ids_per_features", min_ids_per_features, keys)
        for key, lo, hi in zip(
            self.keys, self.min_ids_per_features, self.ids_per_features, strict=True
        ):
            if not 0 <= lo <= hi:
                raise ValueError(f"key {key!r}: need 0 <= min ids ({lo}) <= ids per feature ({hi})")
        self.num_dense = num_dense
        self.num_generated_batches = num_generated_batches
        self.num_batches: int = num_batches if num_batches is not None else sys.maxsize
        self._generator: torch.Generator | None = None
        if manual_seed is not None:
            self._generator = torch.Generator().manual_seed(manual_seed)
        self._cached = [self._generate_batch() for _ in range(max(num_generated_batches, 0))]

    def _generate_batch(self) -> Batch:
        gen, b = self._generator, self.batch_size
        lengths, values = [], []
        for lo, hi, hash_size in zip(
            self.min_ids_per_features, self.ids_per_features, self.hash_sizes, strict=True
        ):
            length = torch.randint(lo, hi + 1, (b,), dtype=torch.int32, generator=gen)
            lengths.append(length)
            values.append(torch.randint(0, hash_size, (int(length.sum()),), generator=gen))
        sparse = KeyedJaggedTensor.from_lengths_sync(
            keys=self.keys,
            values=torch.cat(values) if values else torch.zeros(0, dtype=torch.int64),
            lengths=torch.cat(lengths) if lengths else torch.zeros(0, dtype=torch.int32),
        )
        dense = torch.randn(b, self.num_dense, generator=gen)
        labels = torch.randint(0, 2, (b,), generator=gen)
        return Batch(dense_features=dense, sparse_features=sparse, labels=labels)

    def _endless(self) -> Iterator[Batch]:
        if self.num_generated_batches >= 0:
            yield from itertools.cycle(self._cached)
        else:
            while True:
                yield self._generate_batch()

    def __iter__(self) -> Iterator[Batch]:
        return itertools.islice(self._endless(), self.num_batches)

    def __len__(self) -> int:
        return self.num_batches
