"""Catalog format 1: the whole state, sections included, in ``_catalog/catalog.json``.

Read as it is until the first commit upgrades the store (``Catalog.upgrade``, CATALOG.md
§9). The upgrade first *fences* the object: it rewrites it, If-Match the ETag it read,
as ``{"format": 2, "upgraded": <the format-1 object>}``, which format-1 code refuses to
read and so can no longer commit to; the checkpoint of the upgraded state is then
derived from that content alone, so whoever finishes an interrupted upgrade writes the
same objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from compactor.catalog.codec import need_dict, need_int, need_list, need_str, topic_from_json
from compactor.catalog.errors import CorruptCatalog
from compactor.catalog.manifests import section_from_json
from compactor.catalog.snapshot import Garbage, LiveFile, Snapshot, Topic, TopicPartition
from compactor.fileformat import SectionMeta

FORMAT_1 = 1


@dataclass(frozen=True)
class Format1:
    snapshot: Snapshot
    sections: Mapping[str, tuple[SectionMeta, ...]]
    """File id -> its sections, as format 1 kept them."""
    created_ms: int
    """The newest file's creation time (the upgrade's checkpoint time)."""


def fenced(original: Mapping[str, Any]) -> dict[str, Any]:
    return {"format": 2, "upgraded": original}


def read_format1(data: Mapping[str, Any], key: str) -> tuple[Format1, bool]:
    """The state in a format-1 object, or in the fence an upgrade left; True if fenced."""
    try:
        fence = need_int(data, "format") == 2
        original = need_dict(data, "upgraded") if fence else data
        if need_int(original, "format") != FORMAT_1:
            raise CorruptCatalog(f"catalog format {original['format']} is not supported")
        return _parse(original), fence
    except CorruptCatalog as exc:
        raise CorruptCatalog(f"{key}: {exc}") from None


def _parse(d: Mapping[str, Any]) -> Format1:
    topics: dict[str, Topic] = {}
    next_offsets: dict[TopicPartition, int] = {}
    for name, t in need_dict(d, "topics").items():
        topics[name] = topic_from_json(name, t)
        for p, nxt in enumerate(need_list(t, "next_offsets")):
            next_offsets[(name, p)] = int(nxt)
    files = []
    sections: dict[str, tuple[SectionMeta, ...]] = {}
    for f in need_list(d, "files"):
        file_id = need_str(f, "id")
        # Format 1 did not record the delete horizon: 11 fields per section.
        sections[file_id] = tuple(section_from_json(row) for row in need_list(f, "sections"))
        files.append(
            LiveFile.of_sections(
                file_id,
                need_str(f, "key"),
                need_int(f, "level"),
                need_int(f, "size"),
                need_int(f, "created_ms"),
                sections[file_id],
            )
        )
    garbage = tuple(
        Garbage(need_str(g, "key"), need_int(g, "replaced_ms")) for g in need_list(d, "garbage")
    )
    snap = Snapshot(
        version=need_int(d, "version"),
        topics=topics,
        next_offsets=next_offsets,
        files=tuple(files),
        garbage=garbage,
        last_full_compaction_ms=need_int(d, "last_full_compaction_ms", nullable=True),
    )
    newest = max((f.created_ms for f in files), default=0)
    return Format1(snap, sections, newest)
