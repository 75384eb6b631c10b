"""The catalog lives in the store, beside the data, as one JSON object.

Every commit is a compare-and-swap of that object: ``If-None-Match: *`` for the first,
``If-Match: <etag read>`` after. A commit that loses the race re-reads the newest
snapshot and re-applies its change (a pure function), so no change is lost or applied
twice; a change whose preconditions no longer hold raises ``CommitConflict``.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from collections.abc import Callable

from compactor.catalog.errors import CatalogError, CorruptCatalog
from compactor.catalog.snapshot import Snapshot, snapshot_from_json, snapshot_to_json
from compactor.objectstore import ObjectNotFound, ObjectStore, PreconditionFailed

CATALOG_KEY = "_catalog/catalog.json"

Change = Callable[[Snapshot], Snapshot]


class Catalog:
    def __init__(self, store: ObjectStore, *, max_attempts: int = 200) -> None:
        self.store = store
        self.max_attempts = max_attempts

    def snapshot(self) -> Snapshot:
        try:
            data, etag = self.store.get(CATALOG_KEY)
        except ObjectNotFound:
            return Snapshot()
        try:
            parsed = json.loads(data)
        except ValueError as exc:
            raise CorruptCatalog(
                f"{self.store.url}/{CATALOG_KEY} is not valid JSON: {exc}"
            ) from None
        return snapshot_from_json(parsed, etag)

    def commit(self, change: Change) -> Snapshot:
        """Apply ``change`` atomically to the newest snapshot; returns the committed one."""
        for attempt in range(self.max_attempts):
            current = self.snapshot()
            proposed = change(current)
            body = json.dumps(
                snapshot_to_json(_next_version(proposed, current)), separators=(",", ":")
            ).encode()
            try:
                if current.etag is None:
                    etag = self.store.put(CATALOG_KEY, body, if_none_match=True)
                else:
                    etag = self.store.put(CATALOG_KEY, body, if_match=current.etag)
            except PreconditionFailed:
                # Jittered backoff keeps racing committers from colliding in lockstep.
                time.sleep(random.uniform(0, min(0.5, 0.005 * 2 ** min(attempt, 7))))
                continue
            return snapshot_from_json(json.loads(body), etag)
        raise CatalogError(
            f"gave up committing to {self.store.url} after {self.max_attempts} attempts "
            "lost to concurrent commits"
        )


def _next_version(proposed: Snapshot, current: Snapshot) -> Snapshot:
    return dataclasses.replace(proposed, version=current.version + 1)
