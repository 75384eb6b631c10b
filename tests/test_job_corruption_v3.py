"""Byte flips and truncations of a version-3 input, as a whole job meets them.

The input is small and holds each kind of unit a job reads: two shared blocks (one
lz4-compressed, one plain) around a framed section of two batches, with tombstones, null
keys and repeated keys. Its records have no headers: the compiled path of
docs/COMPILED_PATH.md declines records with headers, which it meets only once decoded,
so without them a fault past the first partitions meets its survivors and writer too.

For each fault, the job over it and a clean second input must end in a FormatError that
names the faulty object and a byte position inside it, and leave the catalog and every
object in the store as they were: nothing half-committed, no output or upload left
behind, no job thread left running. A flip in a frame's CRC field or payload is reported
as that frame's checksum mismatch, at the frame's first byte. The clean input compacts to what the
Kafka model says, and its materialized view is the one written.

These are also the reference a second implementation of the job's path is held to
(docs/COMPILED_PATH.md): ``fault_outcomes`` returns the error each fault gives, position
and words, so that another path's can be compared with it case by case.
"""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka_model import TopicRules, compact, view
from worker_scenarios import make_topics, read_live

from compactor.catalog import Catalog, CommitRecord, LiveFile
from compactor.catalog.changes import append_files
from compactor.fileformat import FileWriter, FormatError, Record, SectionMeta, records_to_batch
from compactor.fileformat.frame_walk import COMPILED_PATH_ENV
from compactor.fileformat.framing import FRAME_HEADER, SECTION_END
from compactor.objectstore import ObjectStore
from compactor.objectstore.local import LocalStore
from compactor.planner.job import Job, JobInput
from compactor.worker.kernel import KeyBuffer
from compactor.worker.pipeline import PHASE1_MODES, Phase1Mode
from compactor.worker.runner import run_job
from tests.test_fileformat_writer import encoding_threads_settled
from tests.test_shared_blocks import frames_of
from tests.test_worker_failures import JOB_THREADS

NOW = 1_700_000_000_000
TOPICS = {"a": 3, "b": 1, "c": 8}
FAULTY = "data/L1/f0.cf"
CLEAN = "data/L1/f1.cf"


def _records(first: int, n: int, value_size: int, seed: int) -> list[Record]:
    """``n`` records from offset ``first``, without headers: keys repeat (one in seven
    distinct), one in eleven is null, one in five is a tombstone (some with a horizon
    already past, which a job may drop)."""
    out = []
    for i in range(n):
        key = None if (i + seed) % 11 == 10 else b"k%d" % ((i + seed) % 7)
        tombstone = (i + seed) % 5 == 4
        out.append(
            Record(
                first + i,
                NOW - 10_000 + i,
                key,
                None if tombstone else bytes([(i + seed) % 256]) * value_size,
                (),
                NOW - 1 if tombstone and i % 2 == 0 else None,
            )
        )
    return out


# Each input's sections: (topic, partition) -> records. The faulty input's layout is that
# of tests/test_shared_blocks.py's version-3 corpus: blocks of three and two sections
# around a framed section of two batches.
INPUTS: dict[str, dict[tuple[str, int], list[Record]]] = {
    FAULTY: {
        ("a", 0): _records(0, 3, 20, 0),
        ("a", 1): _records(0, 2, 2, 1),
        ("a", 2): _records(0, 5, 5, 2),
        ("b", 0): _records(0, 16, 30, 3),
        ("c", 0): _records(0, 3, 3, 4),
        ("c", 7): _records(0, 2, 4, 5),
    },
}
INPUTS[CLEAN] = {
    tp: _records(records[-1].offset + 1, len(records) + 3, 6, 6 + i)
    for i, (tp, records) in enumerate(INPUTS[FAULTY].items())
}


def _encode(
    sections: dict[tuple[str, int], list[Record]], name: str
) -> tuple[bytes, list[SectionMeta]]:
    sink = io.BytesIO()
    writer = FileWriter(
        sink,
        object_name=name,
        compression="lz4",
        min_compress_bytes=120,
        max_batch_bytes=400,
        share_below=150,
        block_bytes=300,
    )
    for (topic, partition), records in sorted(sections.items()):
        # the framed section in two batches, as the writer's callers give them
        half = len(records) // 2 if topic == "b" else len(records)
        parts = [records[:half], records[half:]] if half < len(records) else [records]
        writer.write_section(topic, partition, [records_to_batch(p) for p in parts])
    meta = writer.finish()
    writer.close()
    return sink.getvalue(), list(meta.sections)


ENCODED = {key: _encode(sections, key) for key, sections in INPUTS.items()}
GOOD = ENCODED[FAULTY][0]


def _frame_of_crc_protected_byte() -> dict[int, int]:
    """Each byte of a frame's CRC field and payload -> its frame's start. A flip there
    leaves the file's layout as it was: only the frame's CRC check can see it."""
    return {
        pos: at
        for at, _, length in frames_of(GOOD)
        for pos in range(at + 8, at + FRAME_HEADER.size + length)
    }


PROTECTED = _frame_of_crc_protected_byte()


def test_the_faulty_input_has_every_kind_of_unit() -> None:
    tags = [tag for _, tag, _ in frames_of(GOOD)]
    assert tags.count(b"SBLK") == 2 and tags.count(b"STBL") == 2
    assert tags.count(b"SHDR") == 1 and tags.count(b"BTCH") == 2
    blocks = [GOOD[at + 12 : at + 12 + n] for at, tag, n in frames_of(GOOD) if tag == b"SBLK"]
    lz4_frame = b"\x04\x22\x4d\x18"
    assert sum(lz4_frame in payload for payload in blocks) == 1  # one compressed, one plain
    assert len(GOOD) < 8000


@dataclass(frozen=True)
class Outcome:
    """What a job over one faulty input ended in: the FormatError's position and words."""

    position: int
    reason: str


def _store(root: Path) -> tuple[LocalStore, Catalog, Job]:
    """A store whose catalog holds both inputs as they were written."""
    store = LocalStore(root)
    catalog = Catalog(store)
    make_topics(catalog, {t: (n, {"cleanup.policy": "compact"}) for t, n in TOPICS.items()})
    files = []
    for i, (key, (data, sections)) in enumerate(ENCODED.items()):
        store.put(key, data)
        live = LiveFile.of_sections(f"f{i}", key, 1, len(data), 0, sections)
        snap = catalog.snapshot()
        touched = {tp: snap.next_offsets[tp] for tp in INPUTS[key]}
        new_next = {tp: records[-1].offset + 1 for tp, records in INPUTS[key].items()}
        catalog.commit(
            lambda s, f=live, t=touched, n=new_next: append_files(s, [f], t, n),
            CommitRecord("ingest", {"files": [live.id]}),
            new_files={live.id: (live, sections)},
        )
        files.append(live)
    job = Job(tuple(JobInput(f.id, f.key, f.size) for f in files), 2, True)
    return store, catalog, job


def _objects(store: ObjectStore) -> dict[str, bytes]:
    return {o.key: store.get(o.key)[0] for o in store.list("")}


def fault_outcome(
    store: ObjectStore, catalog: Catalog, job: Job, faulty: bytes, phase1: Phase1Mode
) -> Outcome:
    """Puts ``faulty`` as the object FAULTY, runs the job and returns the FormatError it
    ended in, having checked that it changed nothing (so the next fault starts from the
    same store)."""
    store.put(FAULTY, faulty)
    snap_before, objects_before = catalog.snapshot(), _objects(store)
    try:
        run_job(store, catalog, job, KeyBuffer(1 << 16), now_ms=NOW, phase1=phase1)
    except FormatError as e:
        error = e
    else:
        raise AssertionError("the job succeeded")
    assert error.object_name == FAULTY, error
    assert 0 <= error.position <= len(faulty), error
    assert catalog.snapshot() == snap_before
    assert _objects(store) == objects_before
    assert not list(store.pending_uploads())
    assert not [t.name for t in threading.enumerate() if t.name.startswith(JOB_THREADS)]
    assert not encoding_threads_settled(False)
    return Outcome(error.position, error.reason)


def flipped(pos: int) -> bytes:
    bad = bytearray(GOOD)
    bad[pos] ^= 1 << (pos % 8)
    return bytes(bad)


def fault_outcomes(
    root: Path, faults: dict[str, bytes], phase1: Phase1Mode = "inline"
) -> dict[str, Outcome]:
    """Each fault's outcome, from one store under ``root`` (a failed job changes nothing)."""
    store, catalog, job = _store(root)
    outcomes = {}
    try:
        for name, data in faults.items():
            try:
                outcomes[name] = fault_outcome(store, catalog, job, data, phase1)
            except AssertionError as e:
                raise AssertionError(f"fault {name}: {e}") from e
    finally:
        store.close()
    return outcomes


def test_the_clean_inputs_compact_to_the_model(tmp_path: Path) -> None:
    store, catalog, job = _store(tmp_path)
    try:
        before = read_live(store, catalog)
        report = run_job(store, catalog, job, KeyBuffer(1 << 16), now_ms=NOW, phase1="inline")
        after = read_live(store, catalog)
        live = [f.key for f in catalog.snapshot().files]
    finally:
        store.close()
    assert report.committed and report.outputs == live
    assert set(after) <= set(before)
    rules = TopicRules()
    for tp, records in before.items():
        expected = compact(
            records,
            rules,
            deduplicate=True,
            now_ms=NOW,
            includes_oldest=True,
            includes_newest=True,
        )
        assert after.get(tp, []) == expected, tp
        assert view(after.get(tp, []), rules) == view(records, rules), tp
    stats = report.stats
    assert stats.records_in == sum(len(r) for r in before.values())
    assert stats.records_out == sum(len(r) for r in after.values()) < stats.records_in
    assert stats.dropped_superseded and stats.tombstones_removed and stats.null_keys


STRIDE = 3
"""Of the bytes whose faults take the same path (a flip in a frame's CRC field or payload,
a cut inside a frame), every STRIDE-th is tried: a job a fault, about 3 ms each here."""


def _boundaries() -> set[int]:
    """The first and last bytes of every frame and of what follows a frame."""
    out = {0, len(GOOD) - 1}
    for at, tag, length in frames_of(GOOD):
        end = (
            at + FRAME_HEADER.size + length + (SECTION_END.size if tag in (b"STRL", b"STBL") else 0)
        )
        out.update((at - 1, at, at + 1, end - 1, end, end + 1))
    return {pos for pos in out if 0 <= pos < len(GOOD)}


def on_both_paths(
    root: Path, monkeypatch: pytest.MonkeyPatch, faults: dict[str, bytes]
) -> dict[str, Outcome]:
    """Each fault's outcome on the compiled path (``fileformat.frame_walk``), having checked
    that today's Python path, the reference (``COMPACTOR_COMPILED_PATH=0``), ends each job
    in the same error: same position, same words."""
    monkeypatch.setenv(COMPILED_PATH_ENV, "0")
    reference = fault_outcomes(root / "reference", faults)
    monkeypatch.setenv(COMPILED_PATH_ENV, "1")
    compiled = fault_outcomes(root / "compiled", faults)
    differ = [
        (name, reference[name], compiled[name])
        for name in faults
        if reference[name] != compiled[name]
    ]
    assert not differ, f"{len(differ)} faults differ, first {differ[:3]}"
    return compiled


def test_every_byte_flipped_fails_the_job_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every byte outside a frame's CRC field and payload (the file's header, each frame's
    tag and length, the section and block ends, the tail), and every STRIDE-th byte
    inside one; on both paths."""
    positions = [p for p in range(len(GOOD)) if p not in PROTECTED or p % STRIDE == 0]
    faults = {str(pos): flipped(pos) for pos in positions}
    outcomes = on_both_paths(tmp_path, monkeypatch, faults)
    for name, outcome in outcomes.items():
        frame = PROTECTED.get(int(name))
        if frame is not None:
            assert "checksum mismatch" in outcome.reason, (name, outcome)
            assert outcome.position == frame, (name, outcome)


def test_every_truncation_fails_the_job_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every cut at or beside a frame's bounds, and every STRIDE-th byte (the catalog's
    size is the whole object's: the stream ends early); on both paths."""
    cuts = sorted(_boundaries() | set(range(0, len(GOOD), STRIDE)))
    outcomes = on_both_paths(tmp_path, monkeypatch, {str(n): GOOD[:n] for n in cuts})
    assert all("truncated" in o.reason for o in outcomes.values()), outcomes


@pytest.mark.parametrize("phase1", [m for m in PHASE1_MODES if m != "inline"])
def test_a_sample_of_faults_with_phase_1_ahead(tmp_path: Path, phase1: Phase1Mode) -> None:
    """Phase 1 a window ahead, on a thread or in a process of its own, ends in the same
    error as inline for a sample of the faults: in each frame, a flip of its tag's first
    byte, its length's, its CRC's and its payload's last, and a cut inside its length."""
    sample: dict[str, bytes] = {}
    for at, _, length in frames_of(GOOD):
        for pos in (at, at + 4, at + 8, at + FRAME_HEADER.size + length - 1):
            sample[f"flip {pos}"] = flipped(pos)
        sample[f"cut {at + 6}"] = GOOD[: at + 6]
    inline = fault_outcomes(tmp_path / "inline", sample)
    assert fault_outcomes(tmp_path / phase1, sample, phase1) == inline
