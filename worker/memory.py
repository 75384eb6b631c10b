"""The worker's Arrow memory pool.

pyarrow's default pool on Linux is mimalloc. Under the worker's pattern (batches of up
to a few MiB decoded, filtered, zstd-encoded and freed, over and over, partly on Arrow's
thread pool) mimalloc keeps 60-100 MiB of freed pages resident while Arrow itself holds
only a few MiB: a quarter to a third of the worker's memory budget (docs/ARCHITECTURE.md §7: key
buffer + 256 MiB) lost to an allocator cache. The system allocator returns that memory
and runs as fast here (measured on the bench workloads).

Arrow picks its C++ default pool once, from ``ARROW_DEFAULT_MEMORY_POOL``, when pyarrow
is first imported; the IPC writer's compression buffers and ``read_record_batch`` always
use that one. So the full effect needs ``prefer_lean_pool()`` before pyarrow's first
import (a process's entry point); ``use_lean_memory_pool()`` switches what can still be
switched later (the pool pyarrow's Python API and IPC stream readers allocate from).
An operator's explicit ``ARROW_DEFAULT_MEMORY_POOL`` is always left alone.

This module does not import pyarrow at import time, so an entry point can call
``prefer_lean_pool()`` first thing.

The system allocator, glibc's malloc, then needs one setting. By default it serves an
allocation over its mmap threshold (128 KiB, raised as big blocks are freed) with a fresh
mapping, and returns a freed heap top over 128 KiB to the kernel: a job's frame payloads
and decoded batches, hundreds of KiB each, then come back as new pages, one page fault per
4 KiB, over and over. On 64 MiB L1 files of lz4 sections that was 500,000 faults and a
second of system time in a 4-second job (``bench/README.md``, "A cheaper codec below the
top level"). ``keep_freed_batches()`` fixes the thresholds (``MMAP_THRESHOLD``,
``TRIM_THRESHOLD``), so those allocations reuse freed heap memory: 22,000 faults, the same
peak RSS. An operator's own malloc settings (``GLIBC_TUNABLES``, ``MALLOC_*_``) are left
alone.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading

LEAN_POOL = "system"
POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"
JEMALLOC_CONF_ENV = "JE_ARROW_MALLOC_CONF"
"""The configuration of the jemalloc bundled with pyarrow, read when pyarrow is loaded."""
NO_JEMALLOC_THREAD = "background_thread:false"
"""pyarrow's jemalloc otherwise starts a purging thread at import, even when no pool of
jemalloc's is used; a process with that thread may not fork a helper
(``worker.helper_process``)."""
MMAP_THRESHOLD = 4 << 20
"""Allocations up to this size come from the heap (a frame's payload, a decoded batch)."""
TRIM_THRESHOLD = 32 << 20
"""Freed memory at a heap's top is kept for reuse up to this size."""
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MALLOC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

_lock = threading.Lock()
_switched = False


def prefer_lean_pool() -> bool:
    """Selects the lean pool for Arrow's C++ default, if pyarrow is not loaded yet and
    nobody chose one; returns whether Arrow will use it. Unless jemalloc is the pool (or an
    operator configured it), also turns off jemalloc's purging thread, which would purge
    for nothing."""
    if "pyarrow" not in sys.modules:
        os.environ.setdefault(POOL_ENV, LEAN_POOL)
        if os.environ[POOL_ENV] != "jemalloc":
            os.environ.setdefault(JEMALLOC_CONF_ENV, NO_JEMALLOC_THREAD)
    return os.environ.get(POOL_ENV) == LEAN_POOL and "pyarrow" not in sys.modules


def pyarrow_starts_no_thread() -> bool:
    """Whether loading pyarrow starts no thread: jemalloc's purging thread is turned off
    (``prefer_lean_pool`` turns it off unless an operator configured jemalloc)."""
    return NO_JEMALLOC_THREAD in os.environ.get(JEMALLOC_CONF_ENV, "")


def use_lean_memory_pool() -> str:
    """Makes the lean pool pyarrow's default for Python-level allocations, unless an
    operator chose a pool; idempotent. Returns the default pool's backend name."""
    import pyarrow as pa

    global _switched
    with _lock:
        if not _switched:
            _switched = True
            if not os.environ.get(POOL_ENV) and pa.default_memory_pool().backend_name == "mimalloc":
                pa.set_memory_pool(pa.system_memory_pool())
            keep_freed_batches()
        return str(pa.default_memory_pool().backend_name)


def keep_freed_batches() -> bool:
    """Sets glibc malloc's thresholds (the module's doc), unless this is not glibc or an
    operator set malloc's own; returns whether they were set."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if platform.libc_ver()[0] != "glibc" or "glibc.malloc." in tunables:
        return False
    if any(name in os.environ for name in _MALLOC_ENV):
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    return bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
