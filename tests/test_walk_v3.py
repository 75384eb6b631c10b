"""The compiled walk of a version-3 file's frames (``fileformat._walk``) against today's
stream reader (docs/COMPILED_PATH.md, "The module's calls", item 1).

The reference is ``StreamReader.units`` over the same bytes with the object's size known,
as a job's phase-1 pointer reads an input (``keep_footer=False``, ``file_checks="all"``),
each framed section skipped, nothing decoded. For every fault of
``tests/test_job_corruption_v3.py``'s corpus (each byte flipped, each truncation) and a
few crafted files, the walk must report the reader's FormatError at the same position
and in the same words; on a valid file it must find the units the reader finds. It
declines a file of version 1 or 2 (so the one flip that makes GOOD's header say version
2), and a section table whose entries do not lay out in order, for today's reader.

Not compared: problems in a CRC-valid trailer, table or footer payload's content, which
the walk leaves to its caller (fileformat/_walk.c says which), and which today's reader
reports before any problem further on.
"""

from __future__ import annotations

import io
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compactor.fileformat import FormatError, _walk
from compactor.fileformat.block import encode_section_table, parse_section_table
from compactor.fileformat.framing import FRAME_HEADER, SECTION_END, encode_frame
from compactor.fileformat.reader import SharedRun, StreamReader
from compactor.fileformat.section import parse_trailer
from tests.test_job_corruption_v3 import (
    CLEAN,
    ENCODED,
    GOOD,
    PROTECTED,
    STRIDE,
    _boundaries,
    flipped,
)
from tests.test_shared_blocks import (
    BLOCK,
    BLOCK_META,
    SMALL,
    Spec,
    assemble,
    block_parts,
    frames_of,
    simple_records,
    write,
)

NAME = "data/L1/walked.cf"
GOLDEN = Path(__file__).parent / "golden"


@dataclass(frozen=True)
class Walked:
    """What the reference reader found: its units, as (kind, topic, partition, position,
    length, batch frame positions relative to the section) for a framed section and
    (kind, position, length, batch payload position, its length, the sections' keys)
    for a block; or its error."""

    units: list[tuple[object, ...]]
    error: tuple[int, str] | None


def reference(data: bytes) -> Walked:
    reader = StreamReader(
        io.BytesIO(data), object_name=NAME, size=len(data), keep_footer=False, file_checks="all"
    )
    units: list[tuple[object, ...]] = []
    try:
        for unit in reader.units():
            if isinstance(unit, SharedRun):
                block = unit.block
                keys = [(e.topic, e.partition) for e in block.sections.entries]
                payload = (block.payload_at, len(block.payload))
                units.append(("block", unit.position, unit.length, *payload, keys))
            else:
                unit.skip()
                m = unit.meta
                assert m is not None
                at = (m.position, m.length)
                units.append(("section", m.topic, m.partition, *at, unit.batch_positions))
    except FormatError as e:
        assert e.object_name == NAME
        return Walked(units, (e.position, e.reason))
    return Walked(units, None)


def comparable(data: bytes, walked: list[Any]) -> list[tuple[object, ...]]:
    """The walk's units in the reference's terms, each checked against the bytes on the
    way: a batch's payload follows its frame header, a section's trailer payload is the
    one its section end and batch index describe, a block's table is the frame after its
    batch's."""
    out: list[tuple[object, ...]] = []
    for unit in walked:
        if unit[0] == "section":
            _, topic, partition, position, length, batches, trailer_at, trailer_length = unit
            assert all(p == f + FRAME_HEADER.size for f, p, _ in batches)
            end = trailer_at + trailer_length
            assert end + SECTION_END.size == position + length
            trailer = parse_trailer(data[trailer_at:end], trailer_at, NAME, 3)
            relative = [f - position for f, _, _ in batches]
            assert [p for _, p in trailer.index] == relative
            out.append(("section", topic, partition, position, length, relative))
        else:
            _, position, length, batch_at, batch_length, table_at, table_length = unit
            assert table_at == batch_at + batch_length + FRAME_HEADER.size
            assert position + length == table_at + table_length + SECTION_END.size
            entries = parse_section_table(data[table_at : table_at + table_length], table_at, NAME)
            table = [(e.topic, e.partition) for e in entries.entries]
            out.append(("block", position, length, batch_at, batch_length, table))
    return out


def check(data: bytes) -> str:
    """That the walk agrees with the reference over ``data``; the walk's verdict."""
    expected = reference(data)
    got = _walk.walk(data, NAME)
    if data[:8] == GOOD[:8] and data[8:12] in (b"\1\0\0\0", b"\2\0\0\0"):
        # A header of version 1 or 2 (GOOD's version flipped): today's reader reads it,
        # with its own error if any, as it does any file the walk declines.
        assert got[0] == "decline" and "version" in got[1], got
        return got[0]
    if expected.error is not None:
        assert got == ("error", *expected.error)
    else:
        assert got[0] == "ok", got
        assert comparable(data, got[1]) == expected.units
    return got[0]


def framed_only() -> bytes:
    """A version-3 file without a block: every section weighs more than ``share_below``;
    topics of two- and three-byte UTF-8 characters, and batches of a section cut by the
    writer's batch size."""
    specs = [
        Spec("orders", 3, (tuple(simple_records(0, 20, value_size=40)),)),
        Spec("ü", 0, (tuple(simple_records(5, 3, value_size=30)),)),
        Spec("日本", 2, (tuple(simple_records(7, 4, value_size=30)),)),
    ]
    return write(specs, share_below=1, block_bytes=300, max_batch_bytes=400).data


VALID = {
    "good": GOOD,
    "clean": ENCODED[CLEAN][0],
    "small": SMALL,
    "block only": BLOCK,
    "framed only": framed_only(),
}


@pytest.mark.parametrize("name", VALID)
def test_a_valid_file_walks_to_the_units_the_reader_finds(name: str) -> None:
    data = VALID[name]
    assert check(data) == "ok"
    got = _walk.walk(bytearray(data), NAME)
    assert got[0] == "ok"
    kinds = {unit[0] for unit in got[1]}
    assert kinds == {"framed only": {"section"}, "block only": {"block"}}.get(
        name, {"section", "block"}
    )


def test_every_byte_flipped_is_the_readers_error() -> None:
    positions = [p for p in range(len(GOOD)) if p not in PROTECTED or p % STRIDE == 0]
    verdicts: Counter[str] = Counter()
    for pos in positions:
        try:
            verdicts[check(flipped(pos))] += 1
        except AssertionError as e:
            raise AssertionError(f"byte {pos} flipped: {e}") from e
    # The one flip that declines is the header's version 3 made 2.
    assert verdicts == {"error": len(positions) - 1, "decline": 1}, verdicts


def test_every_truncation_is_the_readers_error() -> None:
    cuts = sorted(_boundaries() | set(range(0, len(GOOD), STRIDE)))
    for n in cuts:
        try:
            assert check(GOOD[:n]) == "error"
        except AssertionError as e:
            raise AssertionError(f"cut at {n}: {e}") from e
    assert len(cuts) > len(GOOD) // STRIDE


def _pieces(data: bytes) -> dict[str, bytes]:
    """GOOD's header, blocks, framed section and the footer with the tail, by name."""
    frames = frames_of(data)
    starts = [at for at, tag, _ in frames if tag in (b"SHDR", b"SBLK", b"FOOT")]
    kinds = [tag for _, tag, _ in frames if tag in (b"SHDR", b"SBLK", b"FOOT")]
    ends = [*starts[1:], len(data)]
    out = {"header": data[: starts[0]]}
    for i, (start, end, tag) in enumerate(zip(starts, ends, kinds, strict=True)):
        out[f"{tag.decode()}{i}"] = data[start:end]
    return out


def crafted() -> dict[str, bytes]:
    """Faults no single flip or cut makes: tags that need quoting or escapes in a
    reason, units out of order, a section without batches, bytes after the tail."""
    out = {}
    first = frames_of(GOOD)[0][0]
    for tag in (b"'\"\\\x00", b"a'bc", b'a"bc', b"\t\n\r\x7f", b"\xff\x80 ~"):
        out[f"tag {tag!r}"] = GOOD[:first] + tag + GOOD[first + 4 :]
    p = _pieces(GOOD)
    header, block1, section, block2, footer = p.values()
    out["section twice"] = header + block1 + section + section + block2 + footer
    out["block twice"] = header + block1 + block1 + section + block2 + footer
    out["block after its successor"] = header + section + block1 + block2 + footer
    out["blocks swapped"] = header + block2 + section + block1 + footer
    frames = frames_of(section, 0)
    ends = [at for at, _, _ in frames[1:]] + [len(section)]
    no_batches = b"".join(
        section[at:end] for (at, tag, _), end in zip(frames, ends, strict=True) if tag != b"BTCH"
    )
    out["section without batches"] = header + block1 + no_batches + block2 + footer
    out["a byte after the tail"] = GOOD + b"\0"
    out["a trailer frame at the top"] = header + section[frames[-1][0] :] + footer
    out["bytes after the tail"] = header + block1 + section + block2 + footer + block1
    return out


@pytest.mark.parametrize("name", list(crafted()))
def test_a_crafted_fault_is_the_readers_error(name: str) -> None:
    assert check(crafted()[name]) == "error"


SECTION_HEADERS = {
    "empty": b"",
    "a byte": b"\1",
    "an empty topic": b"\0\0b\0\0\0\0",
    "a topic cut short": b"\5\0b\0\0",
    "a topic not UTF-8": b"\2\0\xff\xfe\0\0\0\0",
    "a partition cut short": b"\1\0b\0\0\0",
    "a negative partition": b"\1\0b\xff\xff\xff\xff",
    "a byte too many": b"\1\0b\0\0\0\0\0",
    "a key before the block's": b"\1\0a\1\0\0\0",
    "the block's last key": b"\1\0a\2\0\0\0",
}


@pytest.mark.parametrize("name", SECTION_HEADERS)
def test_a_crafted_section_header_is_the_readers_error(name: str) -> None:
    """CRC-valid section headers that parse_section_header or the order rejects."""
    p = _pieces(GOOD)
    header, block1, section, block2, footer = p.values()
    shdr_end = frames_of(section, 0)[1][0]
    shdr = encode_frame(b"SHDR", SECTION_HEADERS[name])
    assert check(header + block1 + shdr + section[shdr_end:] + block2 + footer) == "error"


def _table_file(table: bytes) -> bytes:
    parts = block_parts(BLOCK)
    return assemble(parts.batch, table, BLOCK_META.sections)[0]


def test_a_table_count_that_cannot_fit_is_the_readers_error() -> None:
    parts = block_parts(BLOCK)
    table = encode_section_table(parts.entries)
    for count in (0, 2**32 - 1, len(table)):
        assert check(_table_file(count.to_bytes(4, "little") + table[4:])) == "error"
    assert check(_table_file(b"\1\0")) == "error"


def test_a_table_not_laid_out_as_written_declines() -> None:
    """Entries out of order, trailing bytes, a topic not UTF-8, a trailer length past the
    table: today's reader rejects each (its words are parse_section_table's), the walk
    declines the file for it."""
    e = block_parts(BLOCK).entries
    tables = [
        encode_section_table([e[1], e[0], e[2]]),
        encode_section_table([e[0], e[0], e[2]]),
        encode_section_table(e) + b"\0",
    ]
    good = encode_section_table(e)
    topic_at = 4 + 2
    tables.append(good[:topic_at] + b"\xff" + good[topic_at + 1 :])
    length_at = 4 + 2 + len(e[0][0]) + 4
    tables.append(good[:length_at] + b"\xff\xff\0\0" + good[length_at + 4 :])
    for table in tables:
        data = _table_file(table)
        assert reference(data).error is not None
        got = _walk.walk(data, NAME)
        assert got[0] == "decline" and "section table" in got[1], got


def test_a_table_frame_is_checked_before_its_entries() -> None:
    """A wrong tag where the table should be, and a block end that does not record the
    table's frame, come before the entries' layout."""
    parts = block_parts(BLOCK)
    table = encode_section_table(parts.entries)
    renamed = assemble(parts.batch, table, BLOCK_META.sections, table_tag=b"STRL")[0]
    assert check(renamed) == "error"
    longer = assemble(parts.batch, table, BLOCK_META.sections, end_length=lambda n: n + 1)[0]
    assert check(longer) == "error"
    assert encode_frame(b"STBL", table) in BLOCK


@pytest.mark.parametrize("golden", ["v1.kcf", "v1-5col.kcf", "v2.kcf", "v2-zstd.kcf"])
def test_versions_1_and_2_decline(golden: str) -> None:
    data = (GOLDEN / golden).read_bytes()
    assert reference(data).error is None
    got = _walk.walk(data, NAME)
    assert got[0] == "decline" and "version" in got[1], got


def test_a_version_2_file_of_todays_writer_declines() -> None:
    specs = [Spec("a", 0, (tuple(simple_records(0, 3)),))]
    data = write(specs, share_below=0, block_bytes=300).data
    assert data[8] == 2
    assert _walk.walk(memoryview(data), NAME)[0] == "decline"


def test_what_is_not_a_file() -> None:
    assert check(b"") == "error"
    assert check(b"not a compactor file at all") == "error"
    assert check(GOOD[:8] + b"\4\0\0\0" + GOOD[12:]) == "error"
    assert check(GOOD[:12] + b"\1\0\0\0" + GOOD[16:]) == "error"
    with pytest.raises(TypeError):
        _walk.walk("text", NAME)


def test_frame_crcs_by_isal_where_the_build_had_libisal() -> None:
    """setup.py links ISA-L's CRC where its test compile finds libisal, else zlib's; .ci/run
    installs it and says so (``COMPACTOR_EXPECT_ISAL_CRC=1``), so CI fails if the probe
    stops finding it. Both give the same CRCs: every checksum mismatch above names the
    computed one."""
    expected = os.environ.get("COMPACTOR_EXPECT_ISAL_CRC")
    if expected is None:
        pytest.skip("no expectation set (COMPACTOR_EXPECT_ISAL_CRC)")
    assert ("isal" if expected == "1" else "zlib") == _walk.CRC
