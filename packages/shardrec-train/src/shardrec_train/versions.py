"""`shardrec --version` (one line, no torch import) and `shardrec version` (the full report).

The report lists every shardrec distribution installed here (each package keeps its own
version), torch's version, and which kernel backend each kernel family loaded: fbgemm when
fbgemm_gpu imports and registers its operators, else the torch-native kernels (the optional
backend is only reported here, never warned about).
"""

from __future__ import annotations

import importlib.metadata
import platform
import warnings

DISTRIBUTIONS = (
    "shardrec",
    "shardrec-jagged",
    "shardrec-collectives",
    "shardrec-embedding",
    "shardrec-optim",
    "shardrec-planner",
    "shardrec-sharding",
    "shardrec-dmp",
    "shardrec-models",
    "shardrec-data",
    "shardrec-metrics",
    "shardrec-train",
    "shardrec-testing",
)
"""Every package of the repository, by layer (shardrec-testing only where tests are installed)."""


def installed_version(distribution: str) -> str | None:
    """The installed version of `distribution`, or None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def version_line() -> str:
    """`shardrec 0.1.0` (the umbrella's version, else this package's): `shardrec --version`."""
    umbrella = installed_version("shardrec")
    if umbrella is not None:
        return f"shardrec {umbrella}"
    return f"shardrec-train {installed_version('shardrec-train') or 'unknown'}"


def backend_rows() -> list[tuple[str, str]]:
    """(kernel family, backend) as the first call of each would choose it: fbgemm for the
    jagged ops and the fused backward, the native C kernels for CPU lookups, Triton for CUDA
    lookups (imports torch, tries each optional backend once; their warnings are the report)."""
    from shardrec_embedding._native import native_available
    from shardrec_embedding.triton import triton_available
    from shardrec_jagged import fbgemm_available

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # each row below says what a warning would say
        no_fbgemm = "torch-native (fbgemm_gpu not loadable: pip install fbgemm-gpu-cpu==1.8.0)"
        return [
            ("jagged kernels", "fbgemm" if fbgemm_available() else no_fbgemm),
            ("fused embedding backward", _backward_backend(native_available(), no_fbgemm)),
            (
                "CPU pooled lookup",
                "native C kernels"
                if native_available()
                else "torch-native (no C compiler, or SHARDREC_NATIVE=0)",
            ),
            (
                "CUDA pooled lookup",
                "triton" if triton_available() else "torch-native (triton not importable)",
            ),
        ]


def _backward_backend(native: bool, no_fbgemm: str) -> str:
    """What `backend="auto"` runs a fused update on (shardrec_optim.rules): the native C
    kernels first for SGD, Adagrad and rowwise Adagrad, then fbgemm, then torch."""
    from shardrec_optim.fbgemm_kernels import fbgemm_tbe_available

    if native:
        return "native C kernels (SGD, Adagrad, rowwise Adagrad; torch for the others)"
    return "fbgemm" if fbgemm_tbe_available() else no_fbgemm


def version_report() -> str:
    """`shardrec version`: packages, torch, Python, kernel backends; one `name  value` a line."""
    import torch

    rows = [(d, v) for d in DISTRIBUTIONS if (v := installed_version(d)) is not None]
    rows.append(("torch", str(torch.__version__)))
    rows.append(("python", platform.python_version()))
    rows += backend_rows()
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)
