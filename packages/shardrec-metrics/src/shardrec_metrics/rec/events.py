"""TorchRec's event-logging hook (`EventLoggingHandler`): where metric events are reported.

Every `RecMetric.update` reports the sizes of the batch it adds (once per batch for a whole
`RecMetricList`), and `RecMetricModule` reports its `update`/`compute` calls. The handler of an
open-source build, as TorchRec's, records nothing: a job that wants the events replaces the
classmethods (or patches them in a test); the calls and their keywords are the interface.

    EventLoggingHandler.n_batch_log_event = classmethod(my_sink)   # receives component=,
                                                                    # event_name=, metadata=, ...
"""

from __future__ import annotations

import contextlib
import enum
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = ["EventLoggingHandler", "EventType", "TorchrecComponent"]

_F = TypeVar("_F", bound=Callable[..., Any])


class EventType(enum.Enum):
    """The lifecycle point an event marks."""

    START = "START"
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    INFO = "INFO"


class TorchrecComponent(enum.Enum):
    """The component an event comes from (the metrics report as `rec_metrics`)."""

    REC_METRICS = "rec_metrics"


class EventLoggingHandler:
    """No-op event sink with TorchRec's classmethods; replace them to record events."""

    @classmethod
    def log_event(
        cls,
        component: str,
        event_name: str,
        event_type: EventType,
        metadata: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        """One event."""

    @classmethod
    def n_batch_log_event(
        cls,
        component: str,
        event_name: str,
        event_type: EventType,
        n: int = 1,
        metadata: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        """One per-batch event (a real sink keeps every n-th)."""

    @classmethod
    @contextlib.contextmanager
    def log_event_context(
        cls, component: str, event_name: str, metadata: dict[str, str] | None = None, **kwargs: Any
    ) -> Iterator[None]:
        """START on entry, then SUCCESS, or FAILURE when the block raises (the error goes on)."""
        cls.log_event(component, event_name, EventType.START, metadata)
        try:
            yield
        except BaseException as e:
            cls.log_event(component, event_name, EventType.FAILURE, metadata, error_message=str(e))
            raise
        cls.log_event(component, event_name, EventType.SUCCESS, metadata)

    @classmethod
    def event_logger(cls, component: TorchrecComponent, prefix: str = "") -> Callable[[_F], _F]:
        """Decorator: each call of the method is an event named `<prefix><qualname>`."""

        def decorator(func: _F) -> _F:
            @functools.wraps(func)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with cls.log_event_context(component.value, f"{prefix}{func.__qualname__}"):
                    return func(*args, **kwargs)

            return wrapper  # type: ignore[return-value]

        return decorator
