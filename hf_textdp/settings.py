"""Every environment variable hf-textdp reads, read here only (as ``datasets/config.py``).

Each switch is read at each call, so a variable changed while the process runs counts. None of them
changes a release: the same seed gives the same output whatever they say; they choose a code path, a
folder or how much is logged. The rest of the package asks the functions below, never ``os.environ``.

===================================  ======================================================================
variable                             meaning
===================================  ======================================================================
``HF_TEXTDP_VERBOSITY``              the library logger's level: debug, info, warning (default), error, critical
``HF_TEXTDP_CACHE``                  folder of derived public files (compiled kernels, vector parses);
                                     default ``$HF_HOME/hf_textdp``, else the user cache folder's (``~/.cache``)
``HF_TEXTDP_VECTOR_CACHE``           ``0``: parse a GloVe/word2vec file every time (no parse cache)
``HF_TEXTDP_NATIVE``                 ``0``/``false``/``no``/``off``: no compiled CPU kernel; torch runs everything
``HF_TEXTDP_TRITON``                 ``0``: no Triton kernel on CUDA; ``interpret``: run them on CPU tensors under
                                     ``TRITON_INTERPRET=1`` (the tests); default ``1``
``HF_TEXTDP_CUDA_TILES``             the exact search's CUDA filter tiles, ``"BM,BN,BK,warps,stages[,p|l]"``
``HF_TEXTDP_CUDA_INT_TILES``         the int8 exponential sampler's CUDA tiles, ``"BM,BN,BK,warps,stages"``
``HF_TEXTDP_SEARCH_FILTER``          the exact search's filter where an index says ``auto``: auto, int8, bf16 or fp32
``HF_TEXTDP_CPU_ISA``                ``avx2``: hide the CPU's AVX-512 and AMX flags from the kernels' choice (the
                                     AVX2 kernels run, as on an AVX2-only CPU); ``native`` (default)
``HF_TEXTDP_RELEASE_SERVICE``        set by the release service for its workers ("address:authkey hex"), never
                                     by hand
``HF_TEXTDP_RELEASE_SERVICE_OFF``    ``1``: every GPU worker holds its own CUDA context and releases itself
``HF_TEXTDP_RELEASE_GATHER_MS``      the release service waits up to this many ms (0–10000, default 0) for
                                     other workers' batches before a call
``HF_TEXTDP_BENCH_TEXT``             ``hf-textdp bench``'s default text file
``HF_TEXTDP_SENTEVAL_DIR``           the folder of the SentEval task files (``hf-textdp evaluate``)
===================================  ======================================================================
"""

from __future__ import annotations

import os


__all__ = [
    "BENCH_TEXT",
    "CACHE",
    "CPU_ISA",
    "CUDA_INT_TILES",
    "CUDA_TILES",
    "NATIVE",
    "RELEASE_GATHER_MS",
    "RELEASE_SERVICE",
    "RELEASE_SERVICE_OFF",
    "SEARCH_FILTER",
    "SENTEVAL_DIR",
    "TRITON",
    "VECTOR_CACHE",
    "VERBOSITY",
    "bench_text",
    "cache_root",
    "cpu_isa",
    "cuda_int_tiles",
    "cuda_tiles",
    "native_enabled",
    "release_gather_s",
    "release_service",
    "release_service_off",
    "search_filter",
    "senteval_dir",
    "triton_mode",
    "vector_cache_enabled",
    "verbosity",
]

VERBOSITY = "HF_TEXTDP_VERBOSITY"
CACHE = "HF_TEXTDP_CACHE"
VECTOR_CACHE = "HF_TEXTDP_VECTOR_CACHE"
NATIVE = "HF_TEXTDP_NATIVE"
TRITON = "HF_TEXTDP_TRITON"
CUDA_TILES = "HF_TEXTDP_CUDA_TILES"
CUDA_INT_TILES = "HF_TEXTDP_CUDA_INT_TILES"
SEARCH_FILTER = "HF_TEXTDP_SEARCH_FILTER"
CPU_ISA = "HF_TEXTDP_CPU_ISA"
RELEASE_SERVICE = "HF_TEXTDP_RELEASE_SERVICE"
RELEASE_SERVICE_OFF = "HF_TEXTDP_RELEASE_SERVICE_OFF"
RELEASE_GATHER_MS = "HF_TEXTDP_RELEASE_GATHER_MS"
BENCH_TEXT = "HF_TEXTDP_BENCH_TEXT"
SENTEVAL_DIR = "HF_TEXTDP_SENTEVAL_DIR"


def verbosity() -> str:
    """:data:`VERBOSITY`, lower-cased ('' when unset)."""
    return os.environ.get(VERBOSITY, "").lower()


def cache_root() -> str:
    """:data:`CACHE`; else ``$HF_HOME/hf_textdp`` when ``HF_HOME`` is set (as the Hub's own caches); else
    ``hf_textdp`` in the platform's user cache folder (``platformdirs``: ``$XDG_CACHE_HOME`` or ``~/.cache`` on
    Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows)."""
    if os.environ.get(CACHE):
        return os.environ[CACHE]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.path.expanduser(os.environ["HF_HOME"]), "hf_textdp")
    import platformdirs

    return platformdirs.user_cache_dir("hf_textdp", appauthor=False)


def vector_cache_enabled() -> bool:
    """False when :data:`VECTOR_CACHE` is ``0``."""
    return os.environ.get(VECTOR_CACHE, "1") != "0"


def cpu_isa() -> str:
    """:data:`CPU_ISA`, lower-cased; ``"native"`` when unset or empty (checked by ``cpu.features.isa_override``)."""
    return os.environ.get(CPU_ISA, "").strip().lower() or "native"


def native_enabled() -> bool:
    """False when :data:`NATIVE` is ``0``/``false``/``no``/``off``."""
    return os.environ.get(NATIVE, "1").strip().lower() not in ("0", "false", "no", "off")


def triton_mode() -> str:
    """:data:`TRITON`: ``"1"`` (default), ``"0"`` or ``"interpret"``."""
    return os.environ.get(TRITON, "1")


def cuda_tiles() -> str | None:
    """:data:`CUDA_TILES` when set (non-empty)."""
    return os.environ.get(CUDA_TILES) or None


def cuda_int_tiles() -> str | None:
    """:data:`CUDA_INT_TILES` when set (non-empty)."""
    return os.environ.get(CUDA_INT_TILES) or None


def search_filter() -> str:
    """:data:`SEARCH_FILTER` (default ``"auto"``); the search checks its value."""
    return os.environ.get(SEARCH_FILTER, "auto")


def release_service() -> str | None:
    """:data:`RELEASE_SERVICE` ("address:authkey hex") when this process is a release service's worker."""
    return os.environ.get(RELEASE_SERVICE) or None


def release_service_off() -> bool:
    """True when :data:`RELEASE_SERVICE_OFF` is set to anything but ``0``."""
    return os.environ.get(RELEASE_SERVICE_OFF, "") not in ("", "0")


def release_gather_s() -> float:
    """:data:`RELEASE_GATHER_MS` in seconds (default 0); a ValueError names the variable when it is not a
    number of milliseconds in [0, 10000]."""
    raw = os.environ.get(RELEASE_GATHER_MS, "").strip()
    try:
        ms = float(raw) if raw else 0.0
    except ValueError:
        ms = -1.0
    if not 0 <= ms <= 10_000:
        raise ValueError(f"{RELEASE_GATHER_MS} must be a number of milliseconds in [0, 10000], got {raw!r}.")
    return ms / 1000


def bench_text() -> str | None:
    """:data:`BENCH_TEXT` when set (non-empty)."""
    return os.environ.get(BENCH_TEXT) or None


def senteval_dir() -> str | None:
    """:data:`SENTEVAL_DIR` when set (non-empty)."""
    return os.environ.get(SENTEVAL_DIR) or None
