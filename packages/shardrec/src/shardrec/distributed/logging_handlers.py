"""The event-logging hook (TorchRec path `torchrec.distributed.logging_handlers`)."""

from shardrec_metrics.rec.events import EventLoggingHandler, TorchrecComponent

__all__ = ["EventLoggingHandler", "TorchrecComponent"]
