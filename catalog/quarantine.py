"""Setting a damaged live file aside: confirmed by a read of its own, then committed.

``compactor catalog quarantine`` (an operator) and a queue worker run with
``--quarantine-after`` both commit a quarantine through ``set_aside``. The worker does so
only for a file whose damage ``file_damage`` confirms: a job's failure alone could be the
job's (a bug, a cut connection misread), and a healthy file set aside would hold back
every run beside it. The confirming read is the file's own, front to back, as ``verify``
reads it, outside any job; a job still opens exactly two GET streams per input.
"""

from __future__ import annotations

import time
import unicodedata

from compactor.catalog.catalog import Catalog
from compactor.catalog.changes import quarantine_file
from compactor.catalog.log import CommitRecord
from compactor.catalog.snapshot import LiveFile
from compactor.fileformat import FormatError, verify_stream
from compactor.objectstore import ObjectStore
from compactor.objectstore.throttle import ReadThrottle, ThrottledStream

LONGEST_REASON = 500
"""A reason is kept in the catalog's state, so in every checkpoint while the file is set
aside, and quoted by every error that meets the file: a line, not a document."""

NOT_DAMAGE = ("unsupported ", "unknown header flags", "Arrow cannot decode batch")
"""FormatError reasons that may be the reader's, not the file's: a version, header flag
or codec newer than this build (an upgrade rolling out), or Arrow failing after the
batch's checksum held (its MemoryError and OSError are reported so). ``file_damage``
never confirms them: a worker that cannot read a healthy file must not set it aside."""


def set_aside(catalog: Catalog, live: LiveFile, reason: str) -> int:
    """Commits ``live``'s quarantine with ``reason`` (one line, at most ``LONGEST_REASON``
    characters: the caller's to check or fit); returns its ``since_ms``, the committer's
    wall clock. CatalogError if the file is no longer live or is set aside already."""
    since_ms = int(time.time() * 1000)
    catalog.commit(
        lambda s: quarantine_file(s, live.id, reason, since_ms),
        CommitRecord("quarantine", {"action": "set", "file": live.id, "key": live.key,
                                    "reason": reason}),
    )  # fmt: skip
    return since_ms


def is_control(c: str) -> bool:
    """Whether character ``c`` has no place in a one-line reason: a control, format or
    other Unicode "C" character (a newline, a tab, a zero-width joiner)."""
    return unicodedata.category(c).startswith("C")


def fitted_reason(text: str) -> str:
    """``text`` as a reason: control characters (a traceback's newlines) made spaces, and
    cut to ``LONGEST_REASON`` characters."""
    line = "".join(" " if is_control(c) else c for c in text).strip()
    if len(line) <= LONGEST_REASON:
        return line
    return line[: LONGEST_REASON - 3] + "..."


def file_damage(
    store: ObjectStore, live: LiveFile, throttle: ReadThrottle | None = None
) -> str | None:
    """Reads ``live`` once, front to back (paced by ``throttle``), checking what
    ``verify`` checks of a data file: its size against the catalog's, every checksum,
    batch, section trailer and the footer. The damage found, in one line, or None if the
    file reads clean. StoreError passes (a store that cannot be read says nothing about
    the file), and so does a FormatError whose reason may be the reader's (``NOT_DAMAGE``)."""
    info = store.head(live.key)
    if info.size != live.size:
        return f"{live.key}: {info.size} bytes in the store, catalog says {live.size}"
    try:
        with store.open_stream(live.key) as stream:
            source = stream if throttle is None else ThrottledStream(stream, throttle)
            verify_stream(source, object_name=live.key, size=info.size)
    except FormatError as e:
        if any(e.reason.startswith(kind) for kind in NOT_DAMAGE):
            raise
        return str(e)
    return None
