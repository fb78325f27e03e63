"""TorchRec path `torchrec.fx`: tracing that keeps the embedding collections whole."""

from shardrec_jagged import Tracer, symbolic_trace

__all__ = ["Tracer", "symbolic_trace"]
