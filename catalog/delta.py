"""What one commit changed: the difference between two snapshots (CATALOG.md §6).

A log entry stores a ``Delta``, not the change that produced it: the change (a pure
function in ``catalog.changes``) runs once, against the newest state, and its effect is
recorded. Invariant: ``apply(old, diff(old, new)) == new`` for every ``new`` a change
can produce from ``old``, version aside.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from compactor.catalog.codec import (
    Json,
    file_from_json,
    file_to_json,
    garbage_from_json,
    garbage_to_json,
    lease_from_json,
    lease_to_json,
    need_dict,
    need_int,
    need_list,
    need_str,
    optional_list,
    quarantine_from_json,
    quarantine_to_json,
    topic_from_json,
    topic_to_json,
)
from compactor.catalog.errors import CatalogError, CorruptCatalog
from compactor.catalog.snapshot import (
    Garbage,
    Lease,
    LiveFile,
    Quarantine,
    Snapshot,
    Topic,
    TopicPartition,
)

_UNCHANGED: Any = object()


@dataclass(frozen=True)
class Delta:
    topics: Mapping[str, Topic] = field(default_factory=dict)
    """Topics created or reconfigured (a topic is never removed)."""
    next_offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    """Partitions whose next offset changed, and the new one."""
    removed_files: tuple[str, ...] = ()
    added_files: tuple[tuple[str | None, LiveFile], ...] = ()
    """(the id of the file it follows in the new sequence, None for the first; the file),
    in sequence order, so an anchor is always present when its file is inserted."""
    garbage_added: tuple[Garbage, ...] = ()
    garbage_removed: tuple[str, ...] = ()
    leases_set: tuple[Lease, ...] = ()
    leases_removed: tuple[str, ...] = ()
    last_full_compaction_ms: int | None = _UNCHANGED
    quarantine_set: tuple[Quarantine, ...] = ()
    """Files set aside (CATALOG.md §5: absent from an entry that sets none)."""
    quarantine_removed: tuple[str, ...] = ()
    """File ids released."""

    @property
    def empty(self) -> bool:
        return self == Delta()


def diff(old: Snapshot, new: Snapshot) -> Delta:
    """The delta that turns ``old`` into ``new``. ``new`` must keep the relative order of
    the files it keeps, and never change a file or drop a topic."""
    if not set(old.topics) <= set(new.topics):
        raise CatalogError("a change may not remove a topic")
    old_files = {f.id: f for f in old.files}
    new_ids = {f.id for f in new.files}
    kept_old = [f.id for f in old.files if f.id in new_ids]
    kept_new = [f.id for f in new.files if f.id in old_files]
    if kept_old != kept_new:
        raise CatalogError("a change may not reorder live files")
    added: list[tuple[str | None, LiveFile]] = []
    previous: str | None = None
    for f in new.files:
        if f.id in old_files:
            if old_files[f.id] != f:
                raise CatalogError(f"a change may not rewrite live file {f.id}")
        else:
            added.append((previous, f))
        previous = f.id
    old_garbage = {g.key for g in old.garbage}
    new_garbage = {g.key for g in new.garbage}
    return Delta(
        topics={n: t for n, t in new.topics.items() if old.topics.get(n) != t},
        next_offsets={
            tp: n for tp, n in new.next_offsets.items() if old.next_offsets.get(tp, 0) != n
        },
        removed_files=tuple(f.id for f in old.files if f.id not in new_ids),
        added_files=tuple(added),
        garbage_added=tuple(g for g in new.garbage if g.key not in old_garbage),
        garbage_removed=tuple(g.key for g in old.garbage if g.key not in new_garbage),
        leases_set=tuple(
            lease for j, lease in sorted(new.leases.items()) if old.leases.get(j) != lease
        ),
        leases_removed=tuple(sorted(j for j in old.leases if j not in new.leases)),
        quarantine_set=tuple(
            q for i, q in sorted(new.quarantined.items()) if old.quarantined.get(i) != q
        ),
        quarantine_removed=tuple(sorted(i for i in old.quarantined if i not in new.quarantined)),
        last_full_compaction_ms=(
            new.last_full_compaction_ms
            if new.last_full_compaction_ms != old.last_full_compaction_ms
            else _UNCHANGED
        ),
    )


def apply(s: Snapshot, d: Delta, version: int) -> Snapshot:
    """``s`` with ``d`` applied, as catalog ``version``. CorruptCatalog if ``d`` does not
    fit ``s`` (a log that does not chain)."""
    removed = set(d.removed_files)
    files = [f for f in s.files if f.id not in removed]
    if len(files) != len(s.files) - len(removed):
        raise CorruptCatalog(f"version {version} removes a file that is not live")
    for anchor, f in d.added_files:
        if anchor is None:
            at = 0
        else:
            at = next((i + 1 for i, g in enumerate(files) if g.id == anchor), -1)
            if at < 0:
                raise CorruptCatalog(f"version {version} adds {f.id} after unknown {anchor}")
        files.insert(at, f)
    garbage_gone = set(d.garbage_removed)
    garbage = tuple(g for g in s.garbage if g.key not in garbage_gone) + d.garbage_added
    leases = {j: lease for j, lease in s.leases.items() if j not in set(d.leases_removed)}
    leases.update({lease.job_id: lease for lease in d.leases_set})
    # A file's quarantine ends with the file (a writer that predates quarantines may
    # replace one): every quarantined file is live.
    gone = set(d.quarantine_removed) | removed
    quarantined = {i: q for i, q in s.quarantined.items() if i not in gone}
    quarantined.update({q.file_id: q for q in d.quarantine_set})
    topics = {**s.topics, **d.topics}
    next_offsets = dict(s.next_offsets)
    for name, t in d.topics.items():
        for p in range(t.partitions):
            next_offsets.setdefault((name, p), 0)
    next_offsets.update(d.next_offsets)
    last_full = s.last_full_compaction_ms
    if d.last_full_compaction_ms is not _UNCHANGED:
        last_full = d.last_full_compaction_ms
    return dataclasses.replace(
        s,
        version=version,
        topics=topics,
        next_offsets=next_offsets,
        files=tuple(files),
        garbage=garbage,
        leases=leases,
        quarantined=quarantined,
        last_full_compaction_ms=last_full,
    )


def delta_to_json(d: Delta) -> Json:
    offsets: dict[str, dict[str, int]] = {}
    for (topic, p), n in sorted(d.next_offsets.items()):
        offsets.setdefault(topic, {})[str(p)] = n
    out: Json = {
        "topics": {name: topic_to_json(t) for name, t in sorted(d.topics.items())},
        "next_offsets": offsets,
        "removed_files": list(d.removed_files),
        "added_files": [{"after": a, "file": file_to_json(f)} for a, f in d.added_files],
        "garbage_added": [garbage_to_json(g) for g in d.garbage_added],
        "garbage_removed": list(d.garbage_removed),
        "leases_set": [lease_to_json(lease) for lease in d.leases_set],
        "leases_removed": list(d.leases_removed),
    }
    if d.quarantine_set:
        out["quarantine_set"] = [quarantine_to_json(q) for q in d.quarantine_set]
    if d.quarantine_removed:
        out["quarantine_removed"] = list(d.quarantine_removed)
    if d.last_full_compaction_ms is not _UNCHANGED:
        out["last_full_compaction_ms"] = d.last_full_compaction_ms
    return out


def delta_from_json(d: Mapping[str, Any]) -> Delta:
    next_offsets: dict[TopicPartition, int] = {}
    for topic, by_partition in need_dict(d, "next_offsets").items():
        for p, n in need_dict({"o": by_partition}, "o").items():
            if not p.isdigit() or not isinstance(n, int) or isinstance(n, bool):
                raise CorruptCatalog(f"next offset {topic}/{p}: {n!r}")
            next_offsets[(topic, int(p))] = n
    added = []
    for a in need_list(d, "added_files"):
        anchor = need_dict({"a": a}, "a").get("after")
        if anchor is not None and not isinstance(anchor, str):
            raise CorruptCatalog(f"added file anchor {anchor!r} is not a file id")
        added.append((anchor, file_from_json(need_dict(a, "file"))))
    strings = {
        name: tuple(_strings(need_list(d, name), name))
        for name in ("removed_files", "garbage_removed", "leases_removed")
    }
    last_full = (
        need_int(d, "last_full_compaction_ms", nullable=True)
        if "last_full_compaction_ms" in d
        else _UNCHANGED
    )
    return Delta(
        topics={n: topic_from_json(n, t) for n, t in need_dict(d, "topics").items()},
        next_offsets=next_offsets,
        removed_files=strings["removed_files"],
        added_files=tuple(added),
        garbage_added=tuple(garbage_from_json(g) for g in need_list(d, "garbage_added")),
        garbage_removed=strings["garbage_removed"],
        leases_set=tuple(lease_from_json(x) for x in need_list(d, "leases_set")),
        leases_removed=strings["leases_removed"],
        quarantine_set=tuple(quarantine_from_json(q) for q in optional_list(d, "quarantine_set")),
        quarantine_removed=tuple(
            _strings(optional_list(d, "quarantine_removed"), "quarantine_removed")
        ),
        last_full_compaction_ms=last_full,
    )


def _strings(values: list[Any], name: str) -> list[str]:
    for v in values:
        need_str({name: v}, name)
    return values
