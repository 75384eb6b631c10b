"""Deleting replaced files once readers can no longer hold them.

A replaced file stays in the store for a grace period after the commit that replaced
it, since a reader may have planned its reads on an older snapshot. Objects are deleted
before the catalog forgets them: a crash in between leaves entries whose deletion is
simply repeated (deleting a missing key is not an error), never an object nobody tracks.
"""

from __future__ import annotations

from compactor.catalog.catalog import Catalog
from compactor.catalog.changes import expired_garbage, forget_garbage

DEFAULT_GRACE_MS = 10 * 60 * 1000


def collect_garbage(catalog: Catalog, now_ms: int, grace_ms: int = DEFAULT_GRACE_MS) -> list[str]:
    """Delete every replaced file whose grace period has passed; returns their keys."""
    due = expired_garbage(catalog.snapshot(), now_ms, grace_ms)
    if not due:
        return []
    for g in due:
        catalog.store.delete(g.key)
    catalog.commit(lambda s: forget_garbage(s, due))
    return [g.key for g in due]
