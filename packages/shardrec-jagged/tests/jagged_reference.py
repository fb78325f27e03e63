"""A naive pure-Python model of a keyed jagged batch, built from lists, and its hypothesis strategy.

``RefKJT.bags[f][b]`` is the list of ids of key f, bag b; ``RefKJT.wbags`` the same for weights.
Every expected result in the tests is computed from these lists by plain loops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from shardrec_jagged import JaggedTensor, KeyedJaggedTensor

_Item = TypeVar("_Item")

# Per-test hypothesis settings (not a global profile: other packages share the pytest process).
jagged_settings = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


@dataclass
class RefKJT:
    keys: list[str]
    bags: list[list[list[int]]]  # [F][B_f][ids]
    wbags: list[list[list[float]]] | None = None
    spkpr: list[list[int]] | None = None  # variable batch per key: [F][R]
    lengths_dtype: torch.dtype = torch.int64
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def weighted(self) -> bool:
        return self.wbags is not None

    def flat_values(self) -> list[int]:
        return [v for key in self.bags for bag in key for v in bag]

    def flat_weights(self) -> list[float]:
        assert self.wbags is not None
        return [w for key in self.wbags for bag in key for w in bag]

    def flat_lengths(self) -> list[int]:
        return [len(bag) for key in self.bags for bag in key]

    def flat_offsets(self) -> list[int]:
        out = [0]
        for n in self.flat_lengths():
            out.append(out[-1] + n)
        return out

    def stride(self) -> int:
        if not self.keys:
            return 0
        return max(len(k) for k in self.bags)

    def length_per_key(self) -> list[int]:
        return [sum(len(bag) for bag in key) for key in self.bags]

    def tensors(self) -> dict[str, torch.Tensor | None]:
        return {
            "values": torch.tensor(self.flat_values(), dtype=torch.int64),
            "weights": (
                torch.tensor(self.flat_weights(), dtype=torch.float32) if self.weighted else None
            ),
            "lengths": torch.tensor(self.flat_lengths(), dtype=self.lengths_dtype),
            "offsets": torch.tensor(self.flat_offsets(), dtype=self.lengths_dtype),
        }

    def build(self, via: str = "lengths") -> KeyedJaggedTensor:
        t = self.tensors()
        values = t["values"]
        assert values is not None
        kwargs: dict[str, object] = {}
        if self.spkpr is not None:
            kwargs["stride_per_key_per_rank"] = self.spkpr
        elif not self.keys:
            kwargs["stride"] = 0
        return KeyedJaggedTensor(
            keys=self.keys,
            values=values,
            weights=t["weights"],
            lengths=t["lengths"] if via in ("lengths", "both") else None,
            offsets=t["offsets"] if via in ("offsets", "both") else None,
            **kwargs,  # type: ignore[arg-type]
        )

    def permute(self, order: list[int]) -> RefKJT:
        return RefKJT(
            keys=[self.keys[i] for i in order],
            bags=[self.bags[i] for i in order],
            wbags=None if self.wbags is None else [self.wbags[i] for i in order],
            spkpr=None if self.spkpr is None else [self.spkpr[i] for i in order],
        )

    def select(self, start: int, end: int) -> RefKJT:
        return RefKJT(
            keys=self.keys[start:end],
            bags=self.bags[start:end],
            wbags=None if self.wbags is None else self.wbags[start:end],
            spkpr=None if self.spkpr is None else self.spkpr[start:end],
        )


def jt_lists(jt: JaggedTensor) -> list[list[int]]:
    """A JaggedTensor back to lists, via its offsets (exercises offsets())."""
    vals = jt.values().tolist()
    offs = jt.offsets().tolist()
    return [vals[offs[i] : offs[i + 1]] for i in range(len(offs) - 1)]


def jt_wlists(jt: JaggedTensor) -> list[list[float]]:
    ws = jt.weights().tolist()
    lens = jt.lengths().tolist()
    out, start = [], 0
    for n in lens:
        out.append(ws[start : start + n])
        start += n
    return out


def _per_key_bags(flat: list[_Item], kjt: KeyedJaggedTensor) -> list[list[list[_Item]]]:
    """`flat` (one item per id) cut into per-key lists of bags by the KJT's lengths and
    stride_per_key alone (no per-key caches)."""
    lens = kjt.lengths().tolist()
    out: list[list[list[_Item]]] = []
    pos = bag = 0
    for n_bags in kjt.stride_per_key():
        key: list[list[_Item]] = []
        for _ in range(n_bags):
            key.append(flat[pos : pos + lens[bag]])
            pos += lens[bag]
            bag += 1
        out.append(key)
    return out


def kjt_lists(kjt: KeyedJaggedTensor) -> list[list[list[int]]]:
    """A KJT back to per-key lists of bags of ids."""
    return _per_key_bags(kjt.values().tolist(), kjt)


def kjt_wlists(kjt: KeyedJaggedTensor) -> list[list[list[float]]]:
    """A weighted KJT back to per-key lists of bags of weights."""
    return _per_key_bags(kjt.weights().tolist(), kjt)


@st.composite
def ref_kjts(
    draw: st.DrawFn,
    max_keys: int = 4,
    max_batch: int = 4,
    variable: bool | None = None,
    weighted: bool | None = None,
    min_keys: int = 0,
) -> RefKJT:
    """Random keyed batches: empty bags, B = 0, F = 0 or 1, weights, variable batch per key."""
    n_keys = draw(st.integers(min_keys, max_keys))
    keys = [f"f{i}" for i in range(n_keys)]
    vbe = draw(st.booleans()) if variable is None else variable
    is_weighted = draw(st.booleans()) if weighted is None else weighted
    spkpr: list[list[int]] | None = None
    if vbe:
        ranks = draw(st.integers(1, 2))
        spkpr = [[draw(st.integers(0, max_batch)) for _ in range(ranks)] for _ in range(n_keys)]
        strides = [sum(r) for r in spkpr]
    else:
        b = draw(st.integers(0, max_batch))
        strides = [b] * n_keys
    bags = [[draw(st.lists(st.integers(0, 1000), max_size=4)) for _ in range(s)] for s in strides]
    wbags = None
    if is_weighted:
        wbags = [[[float(v % 7) / 4 + 0.25 for v in bag] for bag in key] for key in bags]
    dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    return RefKJT(keys=keys, bags=bags, wbags=wbags, spkpr=spkpr, lengths_dtype=dtype)
