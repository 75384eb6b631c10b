"""A live file's sections, one immutable object per file: ``_catalog/files/<id>.json``
(CATALOG.md §7).

Written before the commit that makes the file live, so every live file has one; read
only by those who need sections (a job for its inputs, ``verify``, ``dump``). A manifest
whose file never became live (a crash before the commit) is an orphan that the
catalog's garbage collection deletes once it is older than the grace period.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from compactor.catalog.codec import need_int, need_list, need_str
from compactor.catalog.errors import CorruptCatalog
from compactor.catalog.log import PREFIX, decode, encode
from compactor.catalog.snapshot import CATALOG_FORMAT
from compactor.fileformat import SectionMeta, _sections
from compactor.objectstore import ObjectNotFound, ObjectStore

MANIFEST_PREFIX = PREFIX + "files/"

SECTION_FIELDS = (
    "topic",
    "partition",
    "first_offset",
    "last_offset",
    "record_count",
    "uncompressed_bytes",
    "min_timestamp",
    "max_timestamp",
    "tombstones",
    "position",
    "length",
    "min_delete_horizon",
)
"""A section is a JSON array of these, in this order (the last may be null)."""


def manifest_key(file_id: str) -> str:
    return f"{MANIFEST_PREFIX}{file_id}.json"


def section_from_json(row: Any) -> SectionMeta:
    if not isinstance(row, list) or not len(SECTION_FIELDS) - 1 <= len(row) <= len(SECTION_FIELDS):
        raise CorruptCatalog(f"section entry {row!r} is not {len(SECTION_FIELDS)} fields")
    try:
        return SectionMeta.from_json(dict(zip(SECTION_FIELDS, row, strict=False)))
    except ValueError as exc:
        raise CorruptCatalog(str(exc)) from None


def manifest_bytes(
    file_id: str, key: str, written_ms: int, sections: Sequence[SectionMeta]
) -> bytes:
    """What ``encode`` makes of the manifest, its sections' rows written in one compiled
    pass (``_sections.json_rows``): a compaction at 10,000 partitions writes 10,000 rows
    at its commit, after its job, in 3 ms rather than json's 13."""
    head = encode({"format": CATALOG_FORMAT, "id": file_id, "key": key, "written_ms": written_ms})
    if len(_QUOTED) > _MAX_QUOTED:
        _QUOTED.clear()
    rows = _sections.json_rows(list(sections), SECTION_FIELDS, _quote, _QUOTED)
    return b"".join((head[:-1], b',"sections":', rows, b"}"))


_QUOTED: dict[str, bytes] = {}
"""Topics as JSON strings, for ``manifest_bytes``: a process's topics are few, and a
long-lived one starts again past ``_MAX_QUOTED``."""
_MAX_QUOTED = 4096
_quote = json.encoder.encode_basestring_ascii  # what json.dumps quotes a str with


def write_manifest(
    store: ObjectStore, file_id: str, key: str, written_ms: int, sections: Sequence[SectionMeta]
) -> None:
    """Idempotent: the same file always has the same manifest."""
    store.put(manifest_key(file_id), manifest_bytes(file_id, key, written_ms, sections))


def read_manifest(store: ObjectStore, file_id: str) -> tuple[SectionMeta, ...]:
    mkey = manifest_key(file_id)
    try:
        body, _ = store.get(mkey)
    except ObjectNotFound:
        raise CorruptCatalog(
            f"{store.url}/{mkey} is missing: live file {file_id} has no manifest"
        ) from None
    d = decode(body, mkey)
    try:
        if need_int(d, "format") != CATALOG_FORMAT or need_str(d, "id") != file_id:
            raise CorruptCatalog(f"not the format-{CATALOG_FORMAT} manifest of {file_id}")
        return tuple(section_from_json(row) for row in need_list(d, "sections"))
    except CorruptCatalog as exc:
        raise CorruptCatalog(f"{mkey}: {exc}") from None


def manifest_head(store: ObjectStore, file_id: str) -> tuple[int, str] | None:
    """When an (orphan candidate) manifest was written and the data object it describes,
    None if it is gone."""
    mkey = manifest_key(file_id)
    try:
        body, _ = store.get(mkey)
    except ObjectNotFound:
        return None
    head = decode(body, mkey)
    return int(need_int(head, "written_ms")), need_str(head, "key")
