"""What a file says about itself: per-section metadata and the file's footer index."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


def section_key(topic: str, partition: int) -> tuple[bytes, int]:
    """The order sections take in a file: topic by its UTF-8 bytes, then partition.

    Comparing UTF-8 bytes gives the same order as comparing code points (Python's ``str``
    order), so callers may sort by ``(topic, partition)`` directly.
    """
    return (topic.encode("utf-8"), partition)


@dataclass(frozen=True, slots=True)
class SectionMeta:
    """One section: the records of one topic-partition within one file.

    ``uncompressed_bytes`` is the logical size of the records (FORMAT.md, "Logical size"):
    per record 16 + len(key) + len(value) + sum over headers of len(UTF-8 key) + len(value),
    a null key or value counting 0. ``tombstones`` counts records whose value is null.
    ``position`` and ``length`` are the section's byte range in the file.

    ``min_delete_horizon`` is the earliest ``delete_horizon`` of the section's tombstones
    (the time from which a compaction may start dropping them), None if none has one or
    the file is of version 1, which does not record it. It takes no part in equality: a
    section described by a catalog that predates it cannot know it.
    """

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    record_count: int
    uncompressed_bytes: int
    min_timestamp: int
    max_timestamp: int
    tombstones: int
    position: int
    length: int
    min_delete_horizon: int | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SectionMeta:
        """Inverse of ``to_json``; ValueError if a field is missing, extra or mistyped.

        ``min_delete_horizon`` may be missing (JSON written before it existed): None.
        """
        names = [f.name for f in fields(cls)]
        if not set(names) - {"min_delete_horizon"} <= set(d) <= set(names):
            raise ValueError(f"section metadata fields {sorted(d)} are not {sorted(names)}")
        topic = d["topic"]
        if not isinstance(topic, str):
            raise ValueError(f"section topic must be a string, not {topic!r}")
        horizon = d.get("min_delete_horizon")
        if horizon is not None and not _is_int(horizon):
            raise ValueError(f"section min_delete_horizon must be an integer or null: {horizon!r}")
        ints: dict[str, int] = {}
        for name in names[1:-1]:
            value = d[name]
            if not _is_int(value):
                raise ValueError(f"section field {name} must be an integer, not {value!r}")
            ints[name] = value
        return cls(topic=topic, **ints, min_delete_horizon=horizon)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class FileMeta:
    """A whole file: its sections in file order, its size in bytes, its format version."""

    sections: tuple[SectionMeta, ...]
    size: int
    format_version: int

    def to_json(self) -> dict[str, object]:
        return {
            "sections": [s.to_json() for s in self.sections],
            "size": self.size,
            "format_version": self.format_version,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> FileMeta:
        sections = d.get("sections")
        size = d.get("size")
        version = d.get("format_version")
        if not isinstance(sections, list):
            raise ValueError("file metadata needs a list of sections")
        if not isinstance(size, int) or not isinstance(version, int):
            raise ValueError("file metadata needs integer size and format_version")
        return cls(tuple(SectionMeta.from_json(s) for s in sections), size, version)
