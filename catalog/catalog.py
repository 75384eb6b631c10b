"""The catalog lives in the store, beside the data, as a log of commits (CATALOG.md).

A commit is one new immutable log entry, ``_catalog/log/<version>``, written with
If-None-Match: of all committers racing for a version exactly one writes it, and that
write is the commit's only atomic step. The entry records the commit's ``Delta``, so
its cost follows the change, not the store. Every ``CHECKPOINT_INTERVAL`` versions the
committer also writes the whole state as a checkpoint, so a reader needs the newest
checkpoint and the few entries after it: a bounded number of GETs.

A committer that loses the race reads only the entries it missed, re-applies its change
(a pure function that checks its own preconditions) to that newest state, and tries the
next version: no change is lost or applied twice, and changes that do not conflict (an
ingest and a compaction, or compactions of disjoint inputs) both commit. A change whose
preconditions no longer hold raises ``CommitConflict``. A refusal that answers the
store's retry of the committer's own PUT, which landed, is recognized: the entry holds
exactly its bytes, and the commit is done.
"""

from __future__ import annotations

import contextlib
import functools
import json
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

from compactor.catalog.codec import state_from_json, state_to_json
from compactor.catalog.delta import apply, diff
from compactor.catalog.errors import CatalogError, CommitConflict, CorruptCatalog
from compactor.catalog.legacy import Format1, fenced, read_format1
from compactor.catalog.log import (
    CHECKPOINT_PREFIX,
    FORMAT1_KEY,
    LAST_CHECKPOINT_KEY,
    LOG_PREFIX,
    CommitRecord,
    LogEntry,
    checkpoint_key,
    decode,
    encode,
    entry_from_bytes,
    entry_to_bytes,
    log_key,
    version_of,
)
from compactor.catalog.manifests import read_manifest, write_manifest
from compactor.catalog.snapshot import LiveFile, Snapshot
from compactor.fileformat import SectionMeta
from compactor.objectstore import ObjectNotFound, ObjectStore, PreconditionFailed

CATALOG_KEY = LOG_PREFIX
"""Where the catalog's commits live (the catalog is every object under ``_catalog/``)."""
CHECKPOINT_INTERVAL = 20
"""A checkpoint is written at every version divisible by this."""
GAP_WINDOW = 100
"""A reader that found no entry after its state lists at least this many versions past it
for entries that would mean a gap (``Catalog._listed_after``, CATALOG.md §3 step 4)."""
GAP_CHECK_INTERVAL_MS = 60_000
"""A kept reader looks for a gap (one LIST) at its first read and then at most once in
this long: a reader's requests are GETs, and a LIST costs as much as ten or more. A gap
is made by deleting log entries, which a lifecycle rule does by age, long after any
reader read past them."""

Change = Callable[[Snapshot], Snapshot]
NewFiles = Mapping[str, tuple[LiveFile, Sequence[SectionMeta]]]
"""File id -> (the file, its sections): the manifests a commit writes before its entry."""


def _unchanged_at(s: Snapshot, version: int) -> Snapshot:
    """The upgrade's own commit: nothing changes, and only right after the checkpoint."""
    if s.version != version:
        raise CommitConflict(f"the upgrade of version {version} was recorded already")
    return s


def _back_off(attempt: int) -> None:
    """After a lost race: from the third attempt on, a jittered sleep keeps many racing
    committers from lockstep."""
    if attempt >= 2:
        time.sleep(random.uniform(0, min(0.2, 0.002 * 2 ** min(attempt, 7))))


def _record(
    record: CommitRecord | Callable[[Snapshot], CommitRecord] | None, state: Snapshot
) -> CommitRecord:
    if record is None:
        return CommitRecord("change")
    return record(state) if callable(record) else record


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Catalog:
    """One store's catalog. Thread-safe; keeps the newest state it has read, so each
    ``snapshot`` or ``commit`` reads only the entries committed since."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        max_attempts: int = 200,
        checkpoint_interval: int = CHECKPOINT_INTERVAL,
        clock: Callable[[], int] = wall_ms,
    ) -> None:
        self.store = store
        self.max_attempts = max_attempts
        self.checkpoint_interval = checkpoint_interval
        self.clock = clock
        self._lock = threading.RLock()
        self._state: Snapshot | None = None
        self._format1: Format1 | None = None
        self._checkpoint_version = 0
        self._gap_checked_ms: int | None = None
        """When a read last found no gap after its state (None: never)."""

    # --- reading ------------------------------------------------------------------------

    def snapshot(self, *, refresh: bool = True) -> Snapshot:
        """The newest committed state. ``refresh`` False: the state this reader last read
        or committed, without a request, for a caller that has just read or committed
        through it (the first call reads whatever it is told)."""
        with self._lock:
            held = None if refresh else self._held()
            return self._refresh() if held is None else held

    def _held(self) -> Snapshot | None:
        """The state this reader holds, if it may stand for the newest without a read:
        None before the first read, and on a format-1 store (which every read upgrades)."""
        return self._state if self._format1 is None else None

    def sections(self, live: LiveFile) -> tuple[SectionMeta, ...]:
        """A live file's sections, from its manifest (one GET)."""
        if self._format1 is not None and live.id in self._format1.sections:
            return self._format1.sections[live.id]
        return read_manifest(self.store, live.id)

    def section(self, live: LiveFile, topic: str, partition: int) -> SectionMeta:
        """The file's section of ``topic``/``partition``, which it must hold."""
        for s in self.sections(live):
            if s.topic == topic and s.partition == partition:
                return s
        raise CorruptCatalog(f"{live.key}: its manifest has no section of {topic}/{partition}")

    def entry(self, version: int) -> LogEntry:
        """The log entry of commit ``version``; CatalogError once it has left the history."""
        key = log_key(version)
        try:
            body, _ = self.store.get(key)
        except ObjectNotFound:
            raise CatalogError(
                f"commit {version} is not in the history of {self.store.url} "
                "(never made, or older than the history retention)"
            ) from None
        return entry_from_bytes(body, key)

    def snapshot_at(self, version: int) -> Snapshot:
        """The state right after commit ``version`` (0: before the first), replayed from the
        newest checkpoint at or before it, or from the start of the log. CatalogError if
        what that needs has been collected (checkpoints superseded for longer than the
        grace period, log entries past the history retention)."""
        newest = self.snapshot()
        if not 0 <= version <= newest.version:
            raise CatalogError(
                f"no version {version} in the catalog of {self.store.url} "
                f"(its versions run to {newest.version})"
            )
        if version == newest.version:
            return newest
        older = [
            v
            for v in (version_of(o.key) for o in self.store.list(CHECKPOINT_PREFIX))
            if v is not None and v <= version
        ]
        state = self._read_checkpoint(max(older)) if older else Snapshot()
        for v in range(state.version + 1, version + 1):
            entry = self._read_entry(v)
            if entry is None:
                raise CatalogError(
                    f"the catalog of {self.store.url} can no longer rebuild version {version}: "
                    f"log entry {v} was collected (older than the history retention)"
                )
            state = apply(state, entry.delta, v)
        return state

    def history(self, limit: int | None = None) -> list[LogEntry]:
        """The commits still in the log, newest first (at most ``limit``): one LIST, then a
        GET of each entry shown, none of the older ones. Each is read as a snapshot's
        reader reads it (``_read_entry``), so one it cannot parse is refused
        (CorruptCatalog); so is a gap among the versions shown, which would leave a commit
        out. An empty log (a format-1 or empty store, or a history all folded into a
        checkpoint) is read as ``snapshot`` reads it, refusing a corrupt format-1 object."""
        listed = self.logged_versions()
        if not listed:
            self.snapshot()
            return []
        shown = listed[::-1][:limit]  # newest first
        if gaps := log_gaps(shown[::-1]):
            first, last = gaps[-1]  # the newest gap: listing newest first stops there
            if not self.store.exists(log_key(first - 1)):
                # The entry below it is gone too: garbage collection, which deletes the
                # oldest entries first, took the missing ones while the LIST went on
                # (a local listing checks its files one by one; S3's pages).
                return self._entries([v for v in shown if v > last])
            newer = sum(1 for v in shown if v > last)
            raise CorruptCatalog(
                _gap_message(
                    self.store.url,
                    first - 1,
                    last + 1,
                    f"history lists nothing that spans it until the missing entries are "
                    f"restored from a backup (--limit {newer} lists the newer commits)",
                )
            )
        return self._entries(shown)

    def _entries(self, versions: Sequence[int]) -> list[LogEntry]:
        """The entries of ``versions``, newest first, up to the first one gone: deleted
        since the LIST by garbage collection, which deletes the oldest entries first, so
        the older ones listed are gone too."""
        out = []
        for v in versions:
            entry = self._read_entry(v)
            if entry is None:
                break
            out.append(entry)
        return out

    def check_log(self, logged: Sequence[int] | None = None) -> list[str]:
        """Problems of the catalog's own objects (``verify``): every checkpoint present
        must equal the state replayed up to its version from the previous one (or from
        version 0), and the log entries present must run without a gap to the newest.
        ``logged``: the versions ``logged_versions`` listed, if the caller has them."""
        problems: list[str] = []
        logged = self.logged_versions() if logged is None else logged
        checkpoints = sorted(
            v for v in (version_of(o.key) for o in self.store.list(CHECKPOINT_PREFIX)) if v
        )
        if gaps := log_gaps(logged):
            problems.append(
                f"the log has gaps between versions {logged[0]} and {logged[-1]} (missing: "
                f"{_ranges_text(gaps)}); no object under data/ is judged stray until the "
                "missing entries are restored, as entries past a gap name committed files"
            )
        base: Snapshot | None = Snapshot() if logged and logged[0] == 1 else None
        replayed_to = 0
        for c in checkpoints:
            try:
                checkpoint = self._read_checkpoint(c)
            except (CatalogError, ObjectNotFound) as exc:
                problems.append(f"checkpoint {c}: {exc}")
                base = None
                continue
            if base is not None:
                try:
                    for v in range(replayed_to + 1, c + 1):
                        entry = self._read_entry(v)
                        if entry is None:
                            raise CorruptCatalog(f"log entry {v} is missing")
                        base = apply(base, entry.delta, v)
                    if base != checkpoint:
                        problems.append(f"checkpoint {c} differs from the log replayed to it")
                except CatalogError as exc:
                    problems.append(f"replaying the log to checkpoint {c}: {exc}")
            base, replayed_to = checkpoint, c
        return problems

    def logged_versions(self) -> list[int]:
        """The versions of the log entries present, in order (one LIST of the whole log)."""
        return sorted(v for v in (version_of(o.key) for o in self.store.list(LOG_PREFIX)) if v)

    def _refresh(self, *, check_gap: bool = True) -> Snapshot:
        """The newest state: entries read from the kept (or loaded) one until a GET answers
        404. With ``check_gap``, at the first read and then at most every
        ``GAP_CHECK_INTERVAL_MS``, that 404 is told from a gap in the log (CATALOG.md §3
        step 4, one LIST): a state that later entries exist past is then not returned."""
        if self._state is None or self._format1 is not None:
            self._state = self._load()
        state = self._state
        while True:
            while (entry := self._read_entry(state.version + 1)) is not None:
                state = self._advance(state, entry)
            self._state = state
            now = self.clock()
            checked = self._gap_checked_ms
            if not check_gap or (checked is not None and now - checked < GAP_CHECK_INTERVAL_MS):
                return state
            later = self._listed_after(state.version)
            if not later:
                self._gap_checked_ms = now
                return state
            # Committed between the GET's 404 and the LIST (a race, not a gap): read on.
            # Once an entry is listed, the one before it was written (a committer writes a
            # version only after reading the one before), so if that is missing still, it
            # was deleted since.
            if (entry := self._read_entry(state.version + 1)) is not None:
                state = self._advance(state, entry)
                continue
            # Entries exist past a missing one. A checkpoint past it holds the state the
            # missing entries made (their log entries were collected, or deleted): go on
            # from there, as a reader starting afresh would. Else the state is unknowable.
            checkpoint = self._listed_checkpoint()
            if checkpoint is None or checkpoint.version <= state.version:
                raise CorruptCatalog(_gap_message(self.store.url, state.version, later[0]))
            self._checkpoint_version = max(self._checkpoint_version, checkpoint.version)
            state = self._state = checkpoint

    def _listed_after(self, version: int) -> list[int]:
        """The versions above ``version`` among the log entries of the thousand versions
        holding version + 1 and, when that is in the last ``GAP_WINDOW`` of them, of the
        next thousand: a LIST by the key prefix they share (at most 1,000 keys, so one
        request), two for a tenth of the versions. Empty unless the log has a gap at
        version + 1."""
        first = version + 1
        blocks = [first // 1000]
        if first % 1000 >= 1000 - GAP_WINDOW:
            blocks.append(first // 1000 + 1)
        later: list[int] = []
        for block in blocks:
            listed = (version_of(o.key) for o in self.store.list(f"{LOG_PREFIX}{block:017d}"))
            later.extend(v for v in listed if v is not None and v > version)
        return sorted(later)

    def _listed_checkpoint(self) -> Snapshot | None:
        """The newest checkpoint by a LIST (the hint is not asked: it may be behind)."""
        versions = [version_of(o.key) for o in self.store.list(CHECKPOINT_PREFIX)]
        newest = max((v for v in versions if v is not None), default=None)
        return None if newest is None else self._read_checkpoint(newest)

    def _advance(self, state: Snapshot, entry: LogEntry) -> Snapshot:
        """``state`` with another committer's ``entry`` applied."""
        if entry.version % self.checkpoint_interval == 0:
            # Its committer wrote that checkpoint, or a later load finds it missing.
            self._checkpoint_version = entry.version
        return apply(state, entry.delta, entry.version)

    def _lost_to(self, state: Snapshot, version: int) -> None:
        """After the PUT of an entry as ``version`` on top of ``state`` was refused:
        ``self._state`` moved past the entry that took ``version``, read once here, so the
        refresh that follows starts after it. A refusal is never the committer's own PUT
        landed with its answer lost: the store tells that apart (``ObjectStore.put``), by
        the bytes, which the entry's ``writer`` makes the committer's alone."""
        key = log_key(version)
        with contextlib.suppress(ObjectNotFound):
            winner, _ = self.store.get(key)
            self._state = self._advance(state, entry_from_bytes(winner, key))

    def _read_entry(self, version: int) -> LogEntry | None:
        key = log_key(version)
        try:
            body, _ = self.store.get(key)
        except ObjectNotFound:
            return None
        return entry_from_bytes(body, key)

    def _load(self) -> Snapshot:
        """The newest checkpoint's state; else, for a store never checkpointed, the empty
        state (its log starts at version 1) or the format-1 object's."""
        self._format1 = None
        checkpoint = self._newest_checkpoint()
        if checkpoint is not None:
            self._checkpoint_version = checkpoint.version
            return checkpoint
        if self._read_entry(1) is not None:
            return Snapshot()
        try:
            body, _ = self.store.get(FORMAT1_KEY)
        except ObjectNotFound:
            return Snapshot()
        self._format1, _ = read_format1(decode(body, FORMAT1_KEY), FORMAT1_KEY)
        return self._format1.snapshot

    def _newest_checkpoint(self) -> Snapshot | None:
        try:
            hint, _ = self.store.get(LAST_CHECKPOINT_KEY)
            version = int(json.loads(hint)["version"])
            return self._read_checkpoint(version)
        except (ObjectNotFound, ValueError, KeyError, TypeError):
            pass  # no hint, a torn one, or its checkpoint collected: list them instead
        return self._listed_checkpoint()

    def _read_checkpoint(self, version: int) -> Snapshot:
        key = checkpoint_key(version)
        body, _ = self.store.get(key)
        try:
            state = state_from_json(decode(body, key))
        except CorruptCatalog as exc:
            raise CorruptCatalog(f"{key}: {exc}") from None
        if state.version != version:
            raise CorruptCatalog(f"{key} holds version {state.version}")
        return state

    # --- committing ---------------------------------------------------------------------

    def commit(
        self,
        change: Change,
        record: CommitRecord | Callable[[Snapshot], CommitRecord] | None = None,
        *,
        new_files: NewFiles | None = None,
        refresh: bool = True,
    ) -> Snapshot:
        """Apply ``change`` atomically to the newest state; returns the committed state.

        ``new_files`` are the files the change makes live: their manifests are written
        first (once, however many attempts the commit takes). ``record`` says what the
        commit did, for ``history``; a function of the state the change is applied to
        where that is what it says (the leases a lease commit drops as expired).

        ``refresh`` False, for a caller that has just read or committed through this
        reader (``snapshot``) and writes no manifest: the change is tried on the state it
        holds, without reading the next version first. The entry's conditional PUT still
        refuses a version committed meanwhile; the commit then reads on and tries again.

        Requests, uncontended: one GET (the 404 of the next version) and the entry's PUT,
        after the manifests' PUTs; a GET more when manifests were written, or the format-1
        object upgraded, since the first; no GET with ``refresh`` False.
        """
        with self._lock:
            held = None if refresh or new_files else self._held()
            # A full read refuses a log with a gap before anything is written.
            state = self._refresh() if held is None else held
            if self._format1 is not None or new_files:
                if self._format1 is not None:
                    self.upgrade()
                for live, sections in (new_files or {}).values():
                    write_manifest(self.store, live.id, live.key, self.clock(), sections)
                # Read on from the state just checked: entries past it were committed
                # while those were written, each on top of the one before, so the log has
                # no new gap to look for (§3).
                state = self._refresh(check_gap=False)
            for attempt in range(self.max_attempts):
                delta = diff(state, change(state))
                entry = LogEntry(state.version + 1, self.clock(), _record(record, state), delta)
                body = entry_to_bytes(entry, writer=uuid.uuid4().hex)
                try:
                    self.store.put(log_key(entry.version), body, if_none_match=True)
                except PreconditionFailed:
                    self._lost_to(state, entry.version)
                    _back_off(attempt)
                    state = self._refresh(check_gap=False)
                    continue
                state = self._state = apply(state, delta, entry.version)
                self._maybe_checkpoint(state, entry.time_ms)
                return state
        raise CatalogError(
            f"gave up committing to {self.store.url} after {self.max_attempts} attempts "
            "lost to concurrent commits"
        )

    def _maybe_checkpoint(self, state: Snapshot, time_ms: int) -> None:
        v = state.version
        if (
            v % self.checkpoint_interval
            and v - self._checkpoint_version < 2 * self.checkpoint_interval
        ):
            return
        self._write_checkpoint(state, time_ms)

    def _write_checkpoint(self, state: Snapshot, time_ms: int) -> None:
        # Written already (an upgrade finished twice) means the same content.
        with contextlib.suppress(PreconditionFailed):
            self.store.put(
                checkpoint_key(state.version),
                encode(state_to_json(state, time_ms)),
                if_none_match=True,
            )
        self.store.put(LAST_CHECKPOINT_KEY, encode({"version": state.version}))
        self._checkpoint_version = max(self._checkpoint_version, state.version)

    def upgrade(self) -> bool:
        """Upgrade a format-1 store in place (CATALOG.md §9); False if there is nothing to
        upgrade. Safe to run concurrently with format-1 writers, which it fences out, and
        to repeat after a crash."""
        with self._lock:
            while True:
                try:
                    body, etag = self.store.get(FORMAT1_KEY)
                except ObjectNotFound:
                    return False
                old, is_fenced = read_format1(decode(body, FORMAT1_KEY), FORMAT1_KEY)
                version = old.snapshot.version
                if is_fenced and self._read_entry(version + 1) is not None:
                    return False  # upgraded, and committed to since
                if not is_fenced:
                    fence = encode(fenced(json.loads(body)))
                    try:
                        self.store.put(FORMAT1_KEY, fence, if_match=etag)
                    except PreconditionFailed:
                        continue  # a format-1 commit came first: upgrade that state
                for live in old.snapshot.files:
                    write_manifest(
                        self.store, live.id, live.key, self.clock(), old.sections[live.id]
                    )
                self._write_checkpoint(old.snapshot, old.created_ms)
                self._state, self._format1 = None, None
                try:
                    self.commit(
                        functools.partial(_unchanged_at, version=version),
                        CommitRecord("upgrade", {"from_format": 1, "version": version}),
                    )
                except CommitConflict:
                    return False  # another upgrader recorded it first
                return True


def _gap_message(url: str, version: int, next_present: int, consequence: str | None = None) -> str:
    """One line: the log of ``url`` holds no entry ``version`` + 1 .. ``next_present`` - 1,
    while ``next_present`` (and maybe more) exists; then ``consequence``, by default a
    reader's (the state past ``version`` is unknowable)."""
    first, last = version + 1, next_present - 1
    missing = f"version {first} is" if first == last else f"versions {first} to {last} are"
    if consequence is None:
        consequence = (
            f"nothing after version {version} can be read, and nothing is committed until the "
            f"missing entries are restored from a backup"
        )
    return (
        f"the catalog log of {url} has a gap: {missing} missing while version {next_present} "
        f"exists (log entries deleted by hand or by a lifecycle rule?); {consequence}"
    )


def log_gaps(versions: Sequence[int]) -> list[tuple[int, int]]:
    """The inclusive ranges missing between consecutive ``versions`` (sorted)."""
    return [(a + 1, b - 1) for a, b in zip(versions, versions[1:], strict=False) if b > a + 1]


def _ranges_text(ranges: Sequence[tuple[int, int]]) -> str:
    parts = [str(a) if a == b else f"{a} to {b}" for a, b in ranges]
    single = len(ranges) == 1 and ranges[0][0] == ranges[0][1]
    return ("version " if single else "versions ") + ", ".join(parts)
