"""``validate_keyed_jagged_tensor`` (TorchRec path ``torchrec.sparse.jagged_tensor_validator``):
a KJT's full content check, plus, given table configs, whether every id fits its table.

Content errors raise ``ValueError`` naming the offending value (``KeyedJaggedTensor.validate``);
ids outside a table are a soft result (``False`` and a warning naming the feature and range), as
TorchRec: the embedding modules raise on them themselves when they look up.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Protocol

from shardrec_jagged.keyed_jagged_tensor import KeyedJaggedTensor

__all__ = ["TableRange", "validate_keyed_jagged_tensor"]


class TableRange(Protocol):
    """What the check reads off a table config (``EmbeddingBagConfig`` satisfies it)."""

    @property
    def feature_names(self) -> list[str]: ...

    @property
    def num_embeddings(self) -> int: ...


def validate_keyed_jagged_tensor(
    kjt: KeyedJaggedTensor, configs: Sequence[TableRange] | None = None
) -> bool:
    """Check ``kjt``'s contents (raises ``ValueError``); with ``configs``, return whether every
    feature's ids lie in ``[0, num_embeddings)`` of its table (one host read per feature)."""
    kjt.validate()
    kjt.length_per_key()  # lengths against values, negative lengths, offsets per key
    if configs is None:
        return True
    rows = {f: c.num_embeddings for c in configs for f in c.feature_names}
    valid = True
    keys = kjt.keys()  # a KJT is not a dict: iterating it does not give its keys
    for key in keys:
        if key not in rows:
            continue
        ids = kjt[key].values()
        if ids.numel() == 0:
            continue
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= rows[key]:
            warnings.warn(
                f"feature {key!r} has ids in [{low}, {high}] but its table has "
                f"{rows[key]} rows (valid ids 0..{rows[key] - 1})",
                stacklevel=2,
            )
            valid = False
    return valid
