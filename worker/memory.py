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
"""

from __future__ import annotations

import os
import sys
import threading

LEAN_POOL = "system"
_ENV = "ARROW_DEFAULT_MEMORY_POOL"

_lock = threading.Lock()
_switched = False


def prefer_lean_pool() -> bool:
    """Selects the lean pool for Arrow's C++ default, if pyarrow is not loaded yet and
    nobody chose one; returns whether Arrow will use it."""
    if _ENV not in os.environ and "pyarrow" not in sys.modules:
        os.environ[_ENV] = LEAN_POOL
    return os.environ.get(_ENV) == LEAN_POOL and "pyarrow" not in sys.modules


def use_lean_memory_pool() -> str:
    """Makes the lean pool pyarrow's default for Python-level allocations, unless an
    operator chose a pool; idempotent. Returns the default pool's backend name."""
    import pyarrow as pa

    global _switched
    with _lock:
        if not _switched:
            _switched = True
            if not os.environ.get(_ENV) and pa.default_memory_pool().backend_name == "mimalloc":
                pa.set_memory_pool(pa.system_memory_pool())
        return str(pa.default_memory_pool().backend_name)
