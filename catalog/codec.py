"""JSON of catalog state: topics, live files, garbage, leases (CATALOG.md §4-§5).

Decoding checks every field's type and raises ``CorruptCatalog`` naming what is wrong;
it is shared by checkpoints (``state_from_json``) and log entries (``catalog.delta``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compactor.catalog.config import TopicConfig
from compactor.catalog.errors import ConfigError, CorruptCatalog
from compactor.catalog.snapshot import (
    CATALOG_FORMAT,
    Garbage,
    Lease,
    LiveFile,
    Quarantine,
    Snapshot,
    Topic,
)
from compactor.catalog.summary import TopicSummary

Json = dict[str, Any]


def need_int(d: Mapping[str, Any], name: str, *, nullable: bool = False) -> Any:
    value = d.get(name) if nullable else _field(d, name)
    if value is None and nullable:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise CorruptCatalog(f"catalog field {name!r} must be an integer, not {value!r}")
    return value


def need_str(d: Mapping[str, Any], name: str) -> str:
    value = _field(d, name)
    if not isinstance(value, str):
        raise CorruptCatalog(f"catalog field {name!r} must be a string, not {value!r}")
    return value


def need_list(d: Mapping[str, Any], name: str) -> list[Any]:
    value = _field(d, name)
    if not isinstance(value, list):
        raise CorruptCatalog(f"catalog field {name!r} must be a list, not {type(value).__name__}")
    return value


def optional_list(d: Mapping[str, Any], name: str) -> list[Any]:
    """``need_list`` of a key written only when its list is not empty: [] when absent."""
    return need_list(d, name) if name in d else []


def need_dict(d: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = _field(d, name)
    if not isinstance(value, dict):
        raise CorruptCatalog(f"catalog field {name!r} must be an object, not {value!r}")
    return value


def _field(d: Mapping[str, Any], name: str) -> Any:
    if not isinstance(d, Mapping):
        raise CorruptCatalog(f"catalog entry must be an object, not {d!r}")
    if name not in d:
        raise CorruptCatalog(f"catalog entry lacks field {name!r}")
    return d[name]


# --- topics --------------------------------------------------------------------------------


def topic_to_json(t: Topic) -> Json:
    return {"partitions": t.partitions, "config": t.config.to_json()}


def topic_from_json(name: str, d: Mapping[str, Any]) -> Topic:
    try:
        config = TopicConfig.from_json(need_dict(d, "config"))
    except ConfigError as exc:
        raise CorruptCatalog(f"topic {name!r}: {exc}") from None
    return Topic(name, need_int(d, "partitions"), config)


# --- live files ----------------------------------------------------------------------------

_SUMMARY_INTS = (
    "sections",
    "record_count",
    "tombstones",
    "uncompressed_bytes",
    "max_section_bytes",
    "min_timestamp",
    "max_timestamp",
    "min_section_max_timestamp",
)


def summary_to_json(t: TopicSummary) -> Json:
    d: Json = {"topic": t.topic, "partitions": [list(r) for r in t.partitions]}
    d.update({name: getattr(t, name) for name in _SUMMARY_INTS})
    d["min_delete_horizon"] = t.min_delete_horizon
    return d


def summary_from_json(d: Mapping[str, Any]) -> TopicSummary:
    ranges = []
    previous = -2
    for r in need_list(d, "partitions"):
        if (
            not isinstance(r, list)
            or len(r) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in r)
            or not previous + 1 < r[0] <= r[1]
        ):
            raise CorruptCatalog(f"partition ranges {d.get('partitions')!r} are malformed")
        ranges.append((r[0], r[1]))
        previous = r[1]
    ints = {name: need_int(d, name) for name in _SUMMARY_INTS}
    return TopicSummary(
        topic=need_str(d, "topic"),
        partitions=tuple(ranges),
        min_delete_horizon=need_int(d, "min_delete_horizon", nullable=True),
        **ints,
    )


def file_to_json(f: LiveFile) -> Json:
    return {
        "id": f.id,
        "key": f.key,
        "level": f.level,
        "size": f.size,
        "created_ms": f.created_ms,
        "topics": [summary_to_json(t) for t in f.topics],
    }


def file_from_json(d: Mapping[str, Any]) -> LiveFile:
    return LiveFile(
        id=need_str(d, "id"),
        key=need_str(d, "key"),
        level=need_int(d, "level"),
        size=need_int(d, "size"),
        created_ms=need_int(d, "created_ms"),
        topics=tuple(summary_from_json(t) for t in need_list(d, "topics")),
    )


# --- garbage and leases --------------------------------------------------------------------


def garbage_to_json(g: Garbage) -> Json:
    return {"key": g.key, "replaced_ms": g.replaced_ms, "file_id": g.file_id}


def garbage_from_json(d: Mapping[str, Any]) -> Garbage:
    file_id = d.get("file_id")
    if file_id is not None and not isinstance(file_id, str):
        raise CorruptCatalog(f"garbage file id {file_id!r} is not a string")
    return Garbage(need_str(d, "key"), need_int(d, "replaced_ms"), file_id)


def lease_to_json(lease: Lease) -> Json:
    return {
        "job_id": lease.job_id,
        "owner": lease.owner,
        "inputs": list(lease.inputs),
        "taken_ms": lease.taken_ms,
        "expires_ms": lease.expires_ms,
    }


def lease_from_json(d: Mapping[str, Any]) -> Lease:
    inputs = need_list(d, "inputs")
    if not all(isinstance(i, str) for i in inputs):
        raise CorruptCatalog(f"lease inputs must be file ids: {inputs!r}")
    return Lease(
        job_id=need_str(d, "job_id"),
        owner=need_str(d, "owner"),
        inputs=tuple(inputs),
        taken_ms=need_int(d, "taken_ms"),
        expires_ms=need_int(d, "expires_ms"),
    )


def quarantine_to_json(q: Quarantine) -> Json:
    return {"file_id": q.file_id, "reason": q.reason, "since_ms": q.since_ms}


def quarantine_from_json(d: Mapping[str, Any]) -> Quarantine:
    return Quarantine(need_str(d, "file_id"), need_str(d, "reason"), need_int(d, "since_ms"))


def quarantined_from_json(d: Mapping[str, Any]) -> dict[str, Quarantine]:
    """A state's quarantined files (CATALOG.md §1): absent in a state that has none, so
    that a store that never quarantined a file writes the bytes it always did."""
    entries = [quarantine_from_json(x) for x in optional_list(d, "quarantined")]
    return {q.file_id: q for q in entries}


# --- whole state (checkpoints) -------------------------------------------------------------


def state_to_json(s: Snapshot, time_ms: int) -> Json:
    out: Json = {
        "format": CATALOG_FORMAT,
        "version": s.version,
        "time_ms": time_ms,
        "topics": {
            name: {
                **topic_to_json(t),
                "next_offsets": [s.next_offsets.get((name, p), 0) for p in range(t.partitions)],
            }
            for name, t in sorted(s.topics.items())
        },
        "files": [file_to_json(f) for f in s.files],
        "garbage": [garbage_to_json(g) for g in s.garbage],
        "leases": [lease_to_json(lease) for _, lease in sorted(s.leases.items())],
        "last_full_compaction_ms": s.last_full_compaction_ms,
    }
    if s.quarantined:
        out["quarantined"] = [quarantine_to_json(q) for _, q in sorted(s.quarantined.items())]
    return out


def state_from_json(d: Mapping[str, Any]) -> Snapshot:
    if need_int(d, "format") != CATALOG_FORMAT:
        raise CorruptCatalog(f"catalog format {d['format']} is not supported")
    topics: dict[str, Topic] = {}
    next_offsets: dict[tuple[str, int], int] = {}
    for name, t in need_dict(d, "topics").items():
        topics[name] = topic_from_json(name, t)
        offsets = need_list(t, "next_offsets")
        if len(offsets) != topics[name].partitions:
            raise CorruptCatalog(f"topic {name!r}: {len(offsets)} next offsets")
        for p, nxt in enumerate(offsets):
            if not isinstance(nxt, int) or isinstance(nxt, bool):
                raise CorruptCatalog(f"topic {name!r}: next offset {nxt!r}")
            next_offsets[(name, p)] = nxt
    leases = (lease_from_json(x) for x in need_list(d, "leases"))
    return Snapshot(
        version=need_int(d, "version"),
        topics=topics,
        next_offsets=next_offsets,
        files=tuple(file_from_json(f) for f in need_list(d, "files")),
        garbage=tuple(garbage_from_json(g) for g in need_list(d, "garbage")),
        leases={lease.job_id: lease for lease in leases},
        quarantined=quarantined_from_json(d),
        last_full_compaction_ms=need_int(d, "last_full_compaction_ms", nullable=True),
    )
