"""Python's cyclic garbage collector, kept out of a job's way.

A job makes a few short-lived container objects per section (tuples, a section's table
entry, its stats), hundreds of thousands of them at 10,000 partitions, nearly all freed
by reference counting as soon as they are used. The collector does not know that: at its
default threshold (a young collection every 700 new objects) it scanned them about 300
times in an ingest-10kp job, and each older collection also walked every object the
process had made before the job (modules, the catalog's snapshot): 3-4% of the job's
process in py-spy profiles. Inside ``rare_collections()`` those older objects are frozen
out of every scan (``gc.freeze``) and young collections run every ``YOUNG_THRESHOLD``
objects. Objects in real cycles are still collected, only later; a job's memory bound
(docs/ARCHITECTURE.md §7) is measured with this in place.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 50_000
"""New container objects between two young collections while a job runs (default 700)."""

_lock = threading.Lock()
_active = 0
_saved: tuple[int, int, int] | None = None
_frozen_before = False  # objects someone else froze: then nothing is unfrozen at the end


@contextmanager
def rare_collections() -> Iterator[None]:
    """The collector as the module's doc says, until the last of the jobs that asked for
    it (a process may run several at once, on threads) ends; then as it was, except that
    objects frozen before are left frozen, with the job's, if anything else froze some."""
    global _active, _saved, _frozen_before
    with _lock:
        if _active == 0:
            _saved = gc.get_threshold()
            _frozen_before = gc.get_freeze_count() > 0
            gc.freeze()
            gc.set_threshold(YOUNG_THRESHOLD, _saved[1], _saved[2])
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _saved is not None:
                gc.set_threshold(*_saved)
                if not _frozen_before:
                    gc.unfreeze()
