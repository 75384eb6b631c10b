"""One immutable state of the catalog: topics, next offsets, the live file sequence.

The live files form one sequence ordered by the age of their data (oldest first).
For every partition, the sections of that partition along the sequence have strictly
increasing, non-overlapping offset ranges; ``catalog.changes`` keeps it so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from compactor.catalog.config import TopicConfig
from compactor.catalog.errors import CorruptCatalog
from compactor.fileformat import SectionMeta

CATALOG_FORMAT = 1

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    partitions: int
    config: TopicConfig


@dataclass(frozen=True, slots=True)
class LiveFile:
    id: str
    key: str
    """The object's key in the store."""
    level: int
    size: int
    created_ms: int
    sections: tuple[SectionMeta, ...]

    @property
    def record_count(self) -> int:
        return sum(s.record_count for s in self.sections)

    @property
    def uncompressed_bytes(self) -> int:
        return sum(s.uncompressed_bytes for s in self.sections)

    @property
    def topics(self) -> frozenset[str]:
        return frozenset(s.topic for s in self.sections)


@dataclass(frozen=True, slots=True)
class Garbage:
    """A replaced file, deleted from the store once ``replaced_ms`` + grace has passed."""

    key: str
    replaced_ms: int


@dataclass(frozen=True)
class Snapshot:
    version: int = 0
    topics: Mapping[str, Topic] = field(default_factory=dict)
    next_offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    files: tuple[LiveFile, ...] = ()
    garbage: tuple[Garbage, ...] = ()
    last_full_compaction_ms: int | None = None
    """When the last full compaction committed: the clock of the planner's daily
    compaction. It starts at the first ingest, so the first one runs a day after data
    arrives; None while the store has never held data."""
    etag: str | None = None
    """The ETag the snapshot was read with; None for a store with no catalog yet."""

    @cached_property
    def _sections_by_partition(self) -> dict[TopicPartition, list[tuple[LiveFile, SectionMeta]]]:
        index: dict[TopicPartition, list[tuple[LiveFile, SectionMeta]]] = {}
        for live in self.files:
            for section in live.sections:
                index.setdefault((section.topic, section.partition), []).append((live, section))
        return index

    def sections_of(self, topic: str, partition: int) -> list[tuple[LiveFile, SectionMeta]]:
        """The partition's sections in live-sequence order (so in offset order)."""
        return list(self._sections_by_partition.get((topic, partition), ()))

    def partitions(self) -> Iterator[TopicPartition]:
        for name in sorted(self.topics):
            for p in range(self.topics[name].partitions):
                yield name, p

    def file(self, file_id: str) -> LiveFile:
        for live in self.files:
            if live.id == file_id:
                return live
        raise KeyError(file_id)


# --- JSON encoding -----------------------------------------------------------------------
# Sections are arrays, not objects: a catalog of 100,000 sections stays a few MB.
_SECTION_FIELDS = (
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
)


def _section_to_json(s: SectionMeta) -> list[Any]:
    return [getattr(s, name) for name in _SECTION_FIELDS]


def _section_from_json(row: list[Any]) -> SectionMeta:
    if len(row) != len(_SECTION_FIELDS):
        raise CorruptCatalog(
            f"section entry has {len(row)} fields, expected {len(_SECTION_FIELDS)}"
        )
    return SectionMeta(**dict(zip(_SECTION_FIELDS, row, strict=True)))


def snapshot_to_json(s: Snapshot) -> dict[str, Any]:
    return {
        "format": CATALOG_FORMAT,
        "version": s.version,
        "topics": {
            name: {
                "partitions": t.partitions,
                "config": t.config.to_json(),
                "next_offsets": [s.next_offsets.get((name, p), 0) for p in range(t.partitions)],
            }
            for name, t in sorted(s.topics.items())
        },
        "files": [
            {
                "id": f.id,
                "key": f.key,
                "level": f.level,
                "size": f.size,
                "created_ms": f.created_ms,
                "sections": [_section_to_json(sec) for sec in f.sections],
            }
            for f in s.files
        ],
        "garbage": [{"key": g.key, "replaced_ms": g.replaced_ms} for g in s.garbage],
        "last_full_compaction_ms": s.last_full_compaction_ms,
    }


def snapshot_from_json(data: dict[str, Any], etag: str | None) -> Snapshot:
    try:
        if data["format"] != CATALOG_FORMAT:
            raise CorruptCatalog(f"catalog format {data['format']} is not supported")
        topics: dict[str, Topic] = {}
        next_offsets: dict[TopicPartition, int] = {}
        for name, t in data["topics"].items():
            topics[name] = Topic(name, int(t["partitions"]), TopicConfig.from_json(t["config"]))
            for p, nxt in enumerate(t["next_offsets"]):
                next_offsets[(name, p)] = int(nxt)
        files = tuple(
            LiveFile(
                id=f["id"],
                key=f["key"],
                level=int(f["level"]),
                size=int(f["size"]),
                created_ms=int(f["created_ms"]),
                sections=tuple(_section_from_json(row) for row in f["sections"]),
            )
            for f in data["files"]
        )
        garbage = tuple(Garbage(g["key"], int(g["replaced_ms"])) for g in data["garbage"])
        last_full = data.get("last_full_compaction_ms")
        return Snapshot(
            version=int(data["version"]),
            topics=topics,
            next_offsets=next_offsets,
            files=files,
            garbage=garbage,
            last_full_compaction_ms=None if last_full is None else int(last_full),
            etag=etag,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptCatalog(f"catalog is malformed: {exc!r}") from exc
