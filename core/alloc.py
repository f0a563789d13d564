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
from typing import NamedTuple

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


#: A run looks at the memory left each time what it made has grown by this much, or by a 16th of
#: the memory there is in all where that is less (see run.Interpreter.step): a loop of large
#: arrays can take gigabytes between two loop steps' worth of --max-steps.
MEMORY_LOOK_EVERY = 128 << 20
#: A run stops with an error once less than this is left, or an 8th of the memory there is in
#: all where that is less (a small CI container): twice the growth between two looks, so that
#: the kernel's out-of-memory killer, which ends a process with no message, never acts first.
MEMORY_RESERVE = 256 << 20
#: Memory that a recorded scalar operation takes (its equation, value, shape and variable:
#: about 350 bytes measured on a scalar loop), for the growth a run's equations make.
EQUATION_BYTES = 400

#: Per version of control groups: the line of /proc/self/cgroup that names the process's group
#: (its hierarchy field), where the groups are mounted, and the group's files: its limit, its
#: usage, its statistics, and the key there of the page cache it can give back.
_CGROUPS = (
    ("", "sys/fs/cgroup", "memory.max", "memory.current", "memory.stat", "inactive_file"),
    ("memory", "sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat",
     "total_inactive_file"),
)


class Memory(NamedTuple):
    left: int  # bytes the process can still take
    total: int  # bytes there are in all: the machine's, or its control group's limit where smaller


def memory_left(root: str = "/") -> int | None:
    """memory(root)'s bytes left, or None."""
    found = memory(root)
    return None if found is None else found.left


def memory(root: str = "/") -> Memory | None:
    """What the process can still take before the machine, or the control group it runs in
    (a CI job's container), has none to give, and what there is in all; None where that cannot
    be told (not Linux).

    The machine's is /proc/meminfo's MemAvailable (what can be had without swapping) of its
    MemTotal; a control group's is its limit less its usage, the page cache it could give back
    not counted as used: the process's own group, or where that is not mounted as named (a
    container without its own view of the groups), the group at the mount's top."""
    import os
    left, total = _meminfo(os.path.join(root, "proc/meminfo"), ("MemAvailable:", "MemTotal:"))
    own = _own_groups(os.path.join(root, "proc/self/cgroup"))
    for hierarchy, mount, limit_file, usage_file, stat_file, cache_key in _CGROUPS:
        for group in dict.fromkeys((own.get(hierarchy, "/"), "/")):
            where = os.path.join(root, mount, group.lstrip("/"))
            limit = _number_in(os.path.join(where, limit_file))
            used = _number_in(os.path.join(where, usage_file))
            if limit is None or used is None:
                continue
            if limit < 1 << 60:  # (v1 writes no limit as 2^63 rounded down to a page)
                in_group = limit - max(0, used - _stat(os.path.join(where, stat_file), cache_key))
                left = in_group if left is None else min(left, in_group)
                total = limit if total is None else min(total, limit)
            break
    return None if left is None else Memory(left, left if total is None else total)


def _own_groups(path: str) -> dict:
    """{hierarchy: the process's group in it}: "" for version 2's single one, "memory" for
    version 1's memory controller (/proc/self/cgroup's lines: id:controllers:path)."""
    groups = {}
    try:
        with open(path) as f:
            for line in f:
                _, controllers, group = line.rstrip("\n").split(":", 2)
                for name in controllers.split(","):
                    groups[name] = group
    except (OSError, ValueError):
        pass
    return groups


def _meminfo(path: str, keys: tuple) -> list:
    """The bytes /proc/meminfo gives for each of keys (None for one it does not give)."""
    found = dict.fromkeys(keys)
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key in found:
                    found[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return list(found.values())


def _number_in(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):  # (absent, or "max")
        return None


def _stat(path: str, key: str) -> int:
    try:
        with open(path) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0
