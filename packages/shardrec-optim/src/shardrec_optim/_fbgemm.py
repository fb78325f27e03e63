"""Recognising fbgemm-gpu's enum members without importing fbgemm.

fbgemm is never required (its wheels pair with one torch build each). Users may still pass its
`EmbOptimType` / `WeightDecayMode` members; we read only their names and values, so a member is
recognised by the module its class comes from and fbgemm itself is never imported here.
"""

from __future__ import annotations

import enum


def is_fbgemm_enum_member(value: object) -> bool:
    """True when `value` is a member of an enum defined in an fbgemm_gpu module."""
    return isinstance(value, enum.Enum) and type(value).__module__.startswith("fbgemm_gpu")
