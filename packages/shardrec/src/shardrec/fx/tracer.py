"""TorchRec path `torchrec.fx.tracer`: the tracer that keeps the embedding collections whole."""

from shardrec_jagged import Tracer, is_fx_tracing, symbolic_trace

__all__ = ["Tracer", "is_fx_tracing", "symbolic_trace"]
