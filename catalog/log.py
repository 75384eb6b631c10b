"""The catalog's objects in the store and the JSON of a log entry (CATALOG.md §2-§6).

    _catalog/log/<version>.json          one immutable entry per commit (If-None-Match)
    _catalog/checkpoints/<version>.json  the whole state as of a version
    _catalog/_last_checkpoint            a hint: the newest checkpoint's version
    _catalog/files/<file id>.json        a live file's sections (``catalog.manifests``)
    _catalog/catalog.json                format 1 (one object), read and upgraded

Versions are written as 20 decimal digits, so keys sort as versions do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from compactor.catalog.codec import Json, need_dict, need_int, need_str
from compactor.catalog.delta import Delta, delta_from_json, delta_to_json
from compactor.catalog.errors import CorruptCatalog
from compactor.catalog.snapshot import CATALOG_FORMAT

PREFIX = "_catalog/"
LOG_PREFIX = PREFIX + "log/"
CHECKPOINT_PREFIX = PREFIX + "checkpoints/"
LAST_CHECKPOINT_KEY = PREFIX + "_last_checkpoint"
FORMAT1_KEY = PREFIX + "catalog.json"


def log_key(version: int) -> str:
    return f"{LOG_PREFIX}{version:020d}.json"


def checkpoint_key(version: int) -> str:
    return f"{CHECKPOINT_PREFIX}{version:020d}.json"


def version_of(key: str) -> int | None:
    """The version in a log or checkpoint key, None for any other key."""
    name = key.rpartition("/")[2]
    digits = name.removesuffix(".json")
    return int(digits) if len(digits) == 20 and digits.isdigit() else None


@dataclass(frozen=True)
class CommitRecord:
    """What a commit did, as ``history`` shows it: a kind (``topic``, ``ingest``,
    ``compaction``, ``lease``, ``garbage``, ``upgrade``) and its details."""

    kind: str
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LogEntry:
    version: int
    time_ms: int
    record: CommitRecord
    delta: Delta

    def history_json(self) -> Json:
        """The entry as ``compactor history --json`` prints it: its own ``id``,
        ``version``, ``kind`` and ``time_ms``, which no detail may hide, then its details. An
        upgrade's ``version`` detail (the format-1 version it upgraded from, CATALOG.md
        §5) is shown as ``from_version``."""
        shown: Json = {
            "id": str(self.version),
            "version": self.version,
            "kind": self.record.kind,
            "time_ms": self.time_ms,
        }
        for name, value in self.record.details.items():
            name = "from_version" if name == "version" else name
            shown.setdefault(name, value)
        return shown


def encode(data: Json) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=False).encode()


def decode(body: bytes, key: str) -> Mapping[str, Any]:
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise CorruptCatalog(f"{key} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CorruptCatalog(f"{key} is not a JSON object")
    return data


def entry_to_bytes(e: LogEntry, writer: str | None = None) -> bytes:
    """The entry's object. ``writer``, unique to the PUT that writes it (CATALOG.md §5),
    tells its committer this entry from an equal one another committer wrote."""
    d: Json = {
        "format": CATALOG_FORMAT,
        "version": e.version,
        "time_ms": e.time_ms,
        "commit": {"kind": e.record.kind, **e.record.details},
        "delta": delta_to_json(e.delta),
    }
    if writer is not None:
        d["writer"] = writer
    return encode(d)


def entry_from_bytes(body: bytes, key: str) -> LogEntry:
    d = decode(body, key)
    try:
        if need_int(d, "format") != CATALOG_FORMAT:
            raise CorruptCatalog(f"catalog format {d['format']} is not supported")
        commit = dict(need_dict(d, "commit"))
        kind = need_str(commit, "kind")
        del commit["kind"]
        entry = LogEntry(
            version=need_int(d, "version"),
            time_ms=need_int(d, "time_ms"),
            record=CommitRecord(kind, commit),
            delta=delta_from_json(need_dict(d, "delta")),
        )
    except CorruptCatalog as exc:
        raise CorruptCatalog(f"{key}: {exc}") from None
    if version_of(key) not in (None, entry.version):
        raise CorruptCatalog(f"{key} holds version {entry.version}")
    return entry
