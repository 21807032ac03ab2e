"""llama.cpp's library as rmjudge loads it, for the engines and for the model files made with it
(the embedded judge's Q8_0 copy): the backend initialized once with its logs silenced
(`llama_backend`), and the weights of every model kept in llama.cpp's plain CPU buffers
(`plain_buffers` for the low-level loader, `plain_weight_buffers` for llama-cpp-python's
`Llama` and its server)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys

from rmjudge.core.interrupts import c_callback


_BACKEND_READY = False


def llama_backend():
    """llama_cpp, with its backend initialized once and its logs silenced."""
    import llama_cpp

    global _BACKEND_READY
    if not _BACKEND_READY:
        _silence_logs(llama_cpp)
        llama_cpp.llama_backend_init()
        _BACKEND_READY = True
    return llama_cpp


_LOG_CB = None


def _silence_logs(llama_cpp) -> None:
    """Keep llama.cpp's own log lines off the user's terminal unless RMJUDGE_DEBUG is set (then
    they go to stderr). Either way the callback is rmjudge's, marked as called from C, so a
    Ctrl-C that arrives while llama.cpp logs is not lost (rmjudge.core.interrupts)."""
    global _LOG_CB
    debug = bool(os.environ.get("RMJUDGE_DEBUG"))

    @c_callback
    def _log(level, text, user_data):  # pragma: no cover - called from C
        if debug and text:
            sys.stderr.write(text.decode("utf-8", errors="replace"))

    _LOG_CB = llama_cpp.llama_log_callback(_log)
    llama_cpp.llama_log_set(_LOG_CB, ctypes.c_void_p(0))


def plain_buffers(params):
    """Model parameters that keep the weights in llama.cpp's plain CPU buffers.

    By default llama.cpp copies the weights of a CPU run into "extra" buffer types, repacked
    for the CPU's matrix units: AMX tiles on Intel Xeons from Sapphire Rapids on, interleaved
    blocks for AVX2/AVX-512/NEON (CPU_REPACK). rmjudge turns this off, for two reasons:

    - the AMX kernels crash (SIGSEGV on the first decode of more than one token) on Sapphire
      Rapids virtual machines, llama.cpp issue 20824, unfixed in llama-cpp-python 0.3.36;
    - repacked kernels take another path when a matrix has fewer than four rows (gemv against
      gemm), so a sequence's numbers would depend on how many sequences share its decode call,
      which rmjudge's reproducibility excludes (docs/engine.md).

    The plain kernels compute each row alone. The cost is the repacked kernels' speed-up on
    models whose types they cover (Q4_0, Q4_K, IQ4_NL, Q8_0); the embedded Q4_1 model has none
    on AVX2."""
    if hasattr(params, "use_extra_bufts"):
        params.use_extra_bufts = False
    return params


@contextlib.contextmanager
def plain_weight_buffers():
    """While open, every model that llama-cpp-python's high-level `Llama` (or its server)
    loads keeps its weights in plain buffers (see `plain_buffers`): `Llama` takes its model
    parameters from `llama_cpp.llama_cpp.llama_model_default_params` and has no argument for
    this one."""
    import llama_cpp.llama_cpp as low

    original = low.llama_model_default_params

    def defaults():
        return plain_buffers(original())

    low.llama_model_default_params = defaults
    try:
        yield
    finally:
        low.llama_model_default_params = original
