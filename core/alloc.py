"""Keep freed memory for reuse during batched passes (glibc only).

A batched pass (a Jacobian, a Hessian, a block of finite differences) makes
and frees dozens of arrays of a few hundred kilobytes to a few megabytes.
glibc's malloc gives the top of its heap back to the system whenever more
than a small threshold (twice the largest freed block) is free, and the next
array then takes it back a page fault at a time.  On the benchmark machine that
churn doubled the time of ``jacobian`` of ``tanh(A @ x)`` with A 500×500
(6 ms against 3 ms) and of its ``check`` (20 ms against 12 ms).

:func:`keep_freed_memory` raises glibc's ``M_TOP_PAD`` once per process, so
that the heap keeps up to :data:`TOP_PAD` bytes of slack instead of returning
it.  It changes no result, only when memory goes back to the system; arrays
larger than glibc's mmap threshold are unaffected.  Elsewhere (macOS, musl,
Windows) it does nothing.  PyTorch and JAX get the same effect from their own
caching allocators.
"""
from __future__ import annotations

import sys

TOP_PAD = 64 << 20  # bytes
_M_TOP_PAD = -2  # from glibc's malloc.h
_done = False


def keep_freed_memory() -> None:
    """Ask glibc's malloc to keep TOP_PAD bytes of freed heap (once; a no-op elsewhere)."""
    global _done
    if _done:
        return
    _done = True
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes  # 3 ms to import: only batched passes pay for it
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt  # absent outside glibc (musl has no mallopt)
        mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        mallopt(_M_TOP_PAD, TOP_PAD)
    except (OSError, AttributeError):
        pass
