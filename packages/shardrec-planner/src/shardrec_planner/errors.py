"""The planner's own error type and TorchRec's classification of it."""

from __future__ import annotations

import enum


class PlannerErrorType(enum.Enum):
    """Why no plan was found (TorchRec's `PlannerErrorType`)."""

    INSUFFICIENT_STORAGE = "insufficient_storage"
    STRICT_CONSTRAINTS = "strict_constraints"
    PARTITION = "partition"
    OTHER = "other"
    PLANNER_INPUT_CONTEXT_MISMATCH = "planner_input_context_mismatch"
    PLAN_LOADING_FAILED = "plan_loading_failed"
    INVALID_RANK_ASSIGNMENT = "invalid_rank_assignment"
    INPUT_VALIDATION = "input_validation"
    MISSING_MODULE_IN_PLAN = "missing_module_in_plan"
    INVALID_COMPUTE_KERNEL = "invalid_compute_kernel"


class PlannerError(Exception):
    """No plan satisfies the model, the topology and the constraints.

    The message names the tables that cannot be placed, the memory they need against what the ranks
    have, and what to change (more ranks, a smaller dim, another sharding type). `error_type`
    classifies the failure as TorchRec does.
    """

    def __init__(self, message: str = "", error_type: PlannerErrorType = PlannerErrorType.OTHER):
        super().__init__(message)
        self.error_type = error_type


class InvalidValueError(ValueError, AssertionError):
    """A bad value where TorchRec asserts: a `ValueError` (our rule for bad values, naming the
    value and the fix) that TorchRec's callers, who expect an `AssertionError`, also catch."""
