"""The bytes of one KJT all-to-all: header and data of a pair of ranks in one chunk.

What rank s sends rank d is one byte string (its *payload*), every part 8-byte aligned:

    [header: int64 x (HEADER_FIXED + 2 x keys)] [lengths] [values] [weights, if any]

The header describes the rest (dtypes, per-key batch sizes and id counts, the payload's byte
size), so the receiver can read the data out of the same chunk. The exchange is one
`all_to_all` of byte chunks whose sizes both sides know beforehand: a pair's *capacity*, the
bytes it moves in the first exchange. A payload larger than its capacity moves its rest in a
second exchange, which every rank issues or skips alike (the overflow flag in every header).
`ExchangeCapacity` learns each pair's capacity from the payloads it has seen, the same way on
the sending and the receiving rank, so a steady stream of batches of similar size moves in one
exchange per call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

__all__ = ["ExchangeCapacity", "align", "header_bytes", "new_capacity", "typed", "write"]

# Header int64 fields before the per-key fields: flags, keys hash, values / lengths / weights
# dtype codes, source batch size, value count, key count, payload bytes.
HEADER_FIXED = 9
PAYLOAD_BYTES = 8  # index of the payload byte size in the header


def align(n: int) -> int:
    """`n` bytes rounded up to a multiple of 8."""
    return (n + 7) & ~7


def header_bytes(n_keys: int) -> int:
    """Bytes of a header for `n_keys` keys (the least a pair's chunk holds)."""
    return 8 * (HEADER_FIXED + 2 * n_keys)


def new_capacity(capacity: int, payload: int) -> int:
    """A pair's next capacity after a payload of `payload` bytes moved under `capacity`:
    set to the payload plus 1/8 and 64 bytes when it did not fit, the same when it used under a
    quarter (one large batch does not pad every later one), else kept. The headroom covers the
    usual batch-to-batch spread of id counts (about 0.5% at 10k bags of ~10 ids)."""
    if payload > capacity or 4 * payload < capacity:
        return align(payload + payload // 8 + 64)
    return capacity


class ExchangeCapacity:
    """Per-pair byte capacities of one call site's `kjt_all_to_all` (pass the same object on
    every call of that site, on every rank).

    `sent[d]`: the bytes this rank sends rank d in the first exchange; `received[s]`: the
    bytes it receives from rank s. Both ends of a pair update their entry from the same
    payload size (the sender knows it, the receiver reads it in the header), so they stay
    equal without communicating. Starts at 0: the first call moves only the headers in the
    first exchange and the data in a second one, as an exchange without a capacity always does.

    A deferred call (`kjt_all_to_all(..., defer=True)`) learns its payload sizes only when its
    headers are read; `current` reads them first (`defer`), so the capacities of call k are
    those learned from calls 0..k-1 on every rank, whatever the order of the waits.
    """

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.received: list[int] = []
        # The last call's header read when it has not happened yet (idempotent), else None.
        self._unread: Callable[[], object] | None = None

    def defer(self, read: Callable[[], object]) -> None:
        """Record the header read of a deferred call (run by the next `current` at the latest)."""
        self._unread = read

    def forget(self, read: Callable[[], object]) -> None:
        """`read` ran (by a wait or `layout`): the next `current` need not run it."""
        if self._unread == read:
            self._unread = None

    def settle(self) -> None:
        """Run the pending header read, if any (it updates the capacities)."""
        read, self._unread = self._unread, None
        if read is not None:
            read()

    def current(self, world: int) -> tuple[list[int], list[int]]:
        self.settle()
        if len(self.sent) != world:
            self.sent, self.received = [0] * world, [0] * world
        return self.sent, self.received

    def update(self, sent: Sequence[int], received: Sequence[int]) -> None:
        """Record the payload sizes of one call (per destination, per source)."""
        self.sent = [new_capacity(c, p) for c, p in zip(self.sent, sent, strict=True)]
        self.received = [new_capacity(c, p) for c, p in zip(self.received, received, strict=True)]


def write(dest: torch.Tensor, parts: Sequence[torch.Tensor]) -> None:
    """Concatenate `parts` into the byte view `dest`, cast to `dest`'s element type (`dest`
    holds exactly their elements)."""
    if not parts:
        return
    if len(parts) == 1:
        dest.copy_(parts[0])
    else:
        torch.cat(list(parts), out=dest)


def typed(chunk: torch.Tensor, offset: int, count: int, dtype: torch.dtype) -> torch.Tensor:
    """`count` elements of `dtype` at byte `offset` (8-aligned) of the byte tensor `chunk`."""
    return chunk[offset : offset + count * dtype.itemsize].view(dtype)
