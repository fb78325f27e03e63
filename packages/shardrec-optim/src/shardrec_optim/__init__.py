"""Keyed and combined optimizers, fused-optimizer specs and row-sparse update kernels."""

__all__: list[str] = []
