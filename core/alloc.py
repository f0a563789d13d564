"""Keep freed memory for reuse during batched passes (glibc only).

A batched pass (a Jacobian, a Hessian, a block of finite differences) makes
and frees dozens of arrays of a few hundred kilobytes to a few megabytes.
glibc's malloc serves such arrays with fresh mmap calls, or gives the top of
its heap back to the system whenever a little more than the largest freed
block is free, and each new array then faults its pages in again.  On the
benchmark machine that churn took most of the time of ``jacobian`` of
``tanh(A @ x)`` with A 500×500 (2-3 ms against 0.4 ms), of its ``check``
(17 ms against 9 ms) and of the Hessian of a 200-dimensional function
(1.7 ms against 0.8 ms).

Measured again for issue 14 (the library calls of bench W4, W5, W6 timed directly,
medians of 200, 100 and 200 calls, in 8 pairs of fresh processes alternating with and
without this tuning; a shared 2-core machine under load, so absolute times are high):
W4 ``jacobian`` 0.8 ms with it against 4.9 ms without (6×), W5 ``check`` 62 ms against
92 ms (1.5×), W6 ``hessian`` 1.0 ms against 1.2 ms (within the noise).  It stays.

:func:`keep_freed_memory` sets, once per process, glibc's mmap threshold to
:data:`MMAP_THRESHOLD` (arrays below it come from the heap) and its trim
threshold to :data:`TRIM_THRESHOLD` (freed heap stays until that much is
free).  It changes no result, only when memory goes back to the system.
Elsewhere (macOS, musl, Windows) it does nothing.  PyTorch and JAX get the
same effect from their own caching allocators.
"""
from __future__ import annotations

import functools
import sys

MMAP_THRESHOLD = 32 << 20  # bytes: glibc's largest; arrays below it come from the heap
TRIM_THRESHOLD = 128 << 20  # bytes of free heap kept before any is returned
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # from glibc's malloc.h


@functools.cache  # once per process: later calls return at once
def keep_freed_memory() -> None:
    """Ask glibc's malloc to serve and keep arrays of batched passes on its heap (once;
    a no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes  # 3 ms to import: only batched passes pay for it
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt  # absent outside glibc (musl has no mallopt)
        mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    except (OSError, AttributeError):
        pass
