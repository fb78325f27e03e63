"""Names users type for fused (in-backward) embedding optimizers.

`EmbOptimType` mirrors fbgemm's enum of the same name: the same member names and the same string
values, so each of these selects rowwise Adagrad::

    EmbOptimType.EXACT_ROWWISE_ADAGRAD
    EmbOptimType("exact_row_wise_adagrad")     # fbgemm's value string
    EmbOptimType("EXACT_ROWWISE_ADAGRAD")      # the member name, any case
    EmbOptimType(fbgemm_gpu.split_embedding_configs.EmbOptimType.EXACT_ROWWISE_ADAGRAD)
"""

from __future__ import annotations

import enum

from shardrec_optim._fbgemm import is_fbgemm_enum_member


class EmbOptimType(enum.StrEnum):
    """Optimizer applied to embedding rows inside backward (fbgemm's `EmbOptimType` values)."""

    SGD = "sgd"
    EXACT_SGD = "exact_sgd"
    EXACT_ADAGRAD = "exact_adagrad"
    EXACT_ROWWISE_ADAGRAD = "exact_row_wise_adagrad"
    ROWWISE_ADAGRAD = "row_wise_adagrad"
    ADAM = "adam"
    PARTIAL_ROWWISE_ADAM = "partial_row_wise_adam"
    LAMB = "lamb"
    PARTIAL_ROWWISE_LAMB = "partial_row_wise_lamb"
    LARS_SGD = "lars_sgd"

    @classmethod
    def _missing_(cls, value: object) -> EmbOptimType | None:
        given = value
        if is_fbgemm_enum_member(value):
            value = getattr(value, "value", value)
            for member in cls:
                if member.value == value:
                    return member
        if isinstance(value, str):
            by_name = value.strip().upper()
            if by_name in cls.__members__:
                return cls.__members__[by_name]
            for member in cls:
                if member.value == value.strip().lower():
                    return member
        valid = ", ".join(m.name for m in cls)
        raise ValueError(f"unknown fused optimizer {given!r}; valid optimizers: {valid}")


class WeightDecayMode(enum.StrEnum):
    """How `weight_decay` enters rowwise Adagrad (fbgemm's `WeightDecayMode` NONE/L2/DECOUPLE).

    L2 adds `weight_decay * w` to the gradient; DECOUPLE shrinks the row by
    `1 - learning_rate * weight_decay` before the Adagrad step.
    """

    NONE = "none"
    L2 = "l2"
    DECOUPLE = "decouple"

    @classmethod
    def _missing_(cls, value: object) -> WeightDecayMode | None:
        if is_fbgemm_enum_member(value):
            value = getattr(value, "name", value)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2:
            return list(cls)[value]
        if isinstance(value, str):
            key = value.strip().lower()
            key = "decouple" if key == "decoupled" else key
            for member in cls:
                if member.value == key:
                    return member
        raise ValueError(
            f"unknown weight_decay_mode {value!r}; valid modes: none, l2, decouple (or 0, 1, 2)"
        )
