"""Build (once) and load the native CPU kernels of `kernels.c` through ctypes.

The C file needs no torch headers, so it compiles in about a second with the system compiler
(`$CC`, else `cc`, `gcc`, `clang` on PATH) as
`-O3 -march=native -fno-math-errno -fopenmp -fPIC -shared` (no errno: `sqrtf` vectorises).
The shared library is cached in `$XDG_CACHE_HOME/shardrec/native` (default
`~/.cache/shardrec/native`) under a name hashing the source, the flags, the compiler's version
and the CPU (machine + /proc/cpuinfo flags), so a home directory shared by different machines
never loads a build for another CPU. Builds go to a temporary file renamed into place, which is
safe when several processes build at once.

`SHARDREC_NATIVE=0` turns the kernels off. Without a compiler, or when the build or the load
fails, one `NativeUnavailableWarning` names the cause and every lookup takes its torch path.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

__all__ = [
    "ENV_VAR",
    "NativeUnavailableWarning",
    "native_library",
    "native_library_at",
    "native_library_of",
]

ENV_VAR = "SHARDREC_NATIVE"
FLAGS = ("-std=c11", "-O3", "-march=native", "-fno-math-errno", "-fopenmp", "-fPIC", "-shared")
_SOURCE = Path(__file__).with_name("kernels.c")


class NativeUnavailableWarning(UserWarning):
    """The native kernels could not be built or loaded (or were turned off); lookups use torch."""


def _compiler() -> str | None:
    named = os.environ.get("CC")
    if named:
        return shutil.which(named) or (named if Path(named).is_file() else None)
    for candidate in ("cc", "gcc", "clang"):
        found = shutil.which(candidate)
        if found:
            return found
    return None


def _cpu_id() -> str:
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line.strip()
                    break
    except OSError:
        flags = platform.processor()
    return f"{platform.machine()}|{flags}"


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "shardrec" / "native"


def _build(compiler: str, source_path: Path = _SOURCE) -> Path:
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    source = source_path.read_bytes()
    digest = hashlib.sha256()
    for part in (source, " ".join(FLAGS).encode(), version.encode(), _cpu_id().encode()):
        digest.update(part)
        digest.update(b"\0")
    stem = "shardrec_kernels" if source_path == _SOURCE else f"shardrec_{source_path.stem}"
    target = _cache_dir() / f"{stem}_{digest.hexdigest()[:20]}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.stem, suffix=".so.tmp", dir=target.parent)
    os.close(fd)
    try:
        result = subprocess.run(
            [compiler, *FLAGS, "-o", tmp, str(source_path), "-lm"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {result.stderr.strip()[-500:]}")
        os.replace(tmp, target)  # atomic: concurrent builders each install a complete file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


@functools.cache
def native_library() -> ctypes.CDLL | None:
    """The loaded kernels, or None (after one warning) when they are off or cannot be built."""
    return native_library_of(_SOURCE.name)


@functools.cache
def native_library_of(source_name: str) -> ctypes.CDLL | None:
    """The library built from the C file `source_name` of this directory (`kernels.c`,
    `idmap.c`), or None (after one warning) when the kernels are off or cannot be built."""
    return native_library_at(_SOURCE.with_name(source_name))


@functools.cache
def native_library_at(source: Path) -> ctypes.CDLL | None:
    """The library built from the C file at `source` (another package's kernels, e.g.
    shardrec-tiered's store I/O), with the same flags, cache and off switch as
    `native_library_of`; None (after one warning) when off or not buildable."""
    if os.environ.get(ENV_VAR, "1").strip().lower() in ("0", "false", "off", "no"):
        _warn(f"{ENV_VAR}={os.environ[ENV_VAR]} turns them off")
        return None
    compiler = _compiler()
    if compiler is None:
        _warn("no C compiler found (set CC or install gcc/clang)")
        return None
    try:
        return ctypes.CDLL(str(_build(compiler, source)))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        _warn(f"building or loading them failed ({type(exc).__name__}: {exc})")
        return None


def _warn(cause: str) -> None:
    warnings.warn(
        f"shardrec native CPU kernels are unavailable: {cause}; embedding lookups use their "
        f"torch-native path ({ENV_VAR}=0 chooses that path on purpose)",
        NativeUnavailableWarning,
        stacklevel=4,
    )
