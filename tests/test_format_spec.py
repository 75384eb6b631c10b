"""FORMAT.md against the code, and the golden files of tests/golden.

The specification is read, not restated: the byte layouts come from the field tables of
FORMAT.md (offsets, widths, integer types), the record schema from its section 6.3 table,
and the worked example's sizes, parts and bytes from section 10. From those this module
assembles files itself (struct packing, zlib's CRC-32, a roaring serializer written from
the RoaringFormatSpec, and pyarrow only for the Arrow IPC messages) and compares them byte
for byte with what the writer produces. The golden files are walked with the same tables,
decoded with pyarrow alone and with the readers, and checked against the records written
out below; the version-2 one must also be what the writer writes today.
"""

from __future__ import annotations

import ast
import io
import re
import struct
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc
import pytest

from compactor.fileformat import (
    FileMeta,
    Record,
    SectionMeta,
    StreamReader,
    batch_to_records,
    read_footer,
    read_section,
    read_section_offsets,
    records_to_batch,
    verify_stream,
    write_file,
)
from compactor.fileformat import ipc as ipc_module
from compactor.fileformat.errors import FormatError
from compactor.fileformat.records import RECORD_SCHEMA, RECORD_SCHEMA_V1

SPEC = Path(ipc_module.__file__).with_name("FORMAT.md").read_text(encoding="utf-8")
GOLDEN = Path(__file__).resolve().parent / "golden"
INT64_MAX = 2**63 - 1
EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
"""The Arrow IPC end-of-stream marker."""


# --- reading FORMAT.md ------------------------------------------------------------------


def spec_section(number: str, text: str = SPEC) -> str:
    """The text of section ``number`` ("6.4", "10"), up to the next heading at its level or
    above."""
    level = "##" if "." not in number else "###"
    match = re.search(rf"^{level} {re.escape(number)}\.? .*$", text, re.M)
    assert match is not None, f"FORMAT.md has no section {number}"
    rest = text[match.end() :]
    end = re.search(rf"^#{{2,{len(level)}}} ", rest, re.M)
    return rest[: end.start()] if end else rest


def spec_tables(text: str) -> list[list[list[str]]]:
    """The Markdown tables in ``text``: rows of cells, header row first, separator dropped."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if current is None:
                current = []
                tables.append(current)
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        else:
            current = None
    return tables


def spec_number(pattern: str, text: str = SPEC) -> int:
    """The one number (digits, maybe with thousands commas) captured by ``pattern``."""
    found = re.findall(pattern, text)
    assert len(found) == 1, f"{pattern!r} matches {len(found)} times in FORMAT.md"
    return int(found[0].replace(",", ""))


@dataclass(frozen=True)
class Row:
    """One row of a FORMAT.md field table."""

    offset: str
    width: str
    name: str
    description: str


def layout(number: str, index: int = 0) -> list[Row]:
    """Table ``index`` of section ``number``, as field rows (Offset, Width, Field, ...)."""
    table = spec_tables(spec_section(number))[index]
    assert table[0][0].startswith("Offset") and table[0][1] == "Width", table[0]
    return [Row(*cells[:4]) for cells in table[1:]]


INT_TYPES = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q", "i32": "i", "i64": "q"}


def int_code(row: Row) -> str | None:
    """The struct code of an integer field ("u32, ..." in the description), else None."""
    first = re.split(r"[ ,]", row.description, maxsplit=1)[0]
    return INT_TYPES.get(first)


def literal(row: Row) -> bytes | None:
    """The fixed bytes a description starts with (`89 4B ...`), else None."""
    m = re.match(r"`((?:[0-9A-F]{2} ?)+)`", row.description)
    return bytes.fromhex(m.group(1)) if m else None


def evaluate(expr: str, env: dict[str, int]) -> int | None:
    """A table's offset or width ("2+n", "16·b", "64+16b", "length"); None for "rest" and
    "…" (the remainder) or a name ``env`` does not give."""
    if expr in ("rest", "…"):
        return None
    expr = re.sub(r"(\d)([a-z])", r"\1*\2", expr.replace("·", "*"))

    def value(node: ast.expr) -> int | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            return env.get(node.id)
        assert isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult), expr
        left, right = value(node.left), value(node.right)
        if left is None or right is None:
            return None
        return left + right if isinstance(node.op, ast.Add) else left * right

    return value(ast.parse(expr, mode="eval").body)


SIZE_NAMES = {"topic_length": "n", "batch_count": "b", "length": "length", "trailer_length": "t"}
"""Fields whose value later offsets and widths of the same table refer to."""


def pack(
    rows: Sequence[Row],
    values: dict[str, int | bytes],
    env: dict[str, int] | None = None,
    omit: Sequence[str] = (),
) -> bytes:
    """Lays out ``values`` by a FORMAT.md table: integers by their type, fixed bytes from
    the table, zeros for "MUST be zero", bytes as given; each field must land at the
    table's offset (fields in ``omit``, absent in this version, shift the later ones)."""
    env = dict(env or {})
    out = bytearray()
    shift = 0
    for row in rows:
        width = evaluate(row.width, env)
        if row.name in omit:
            assert width is not None
            shift += width
            continue
        at = evaluate(row.offset, env)
        assert at is not None and at - shift == len(out), (row, len(out), shift)
        code, fixed = int_code(row), literal(row)
        if code is not None:
            value = values[row.name]
            assert isinstance(value, int)
            data = struct.pack("<" + code, value)
            if row.name in SIZE_NAMES:
                env[SIZE_NAMES[row.name]] = value
        elif fixed is not None:
            data = fixed
            assert values.get(row.name, fixed) == fixed, row
        elif row.description.startswith("MUST be zero"):
            assert width is not None
            data = bytes(width)
        else:
            raw = values[row.name]
            assert isinstance(raw, bytes)
            data = raw
        assert width is None or len(data) == width, (row, len(data))
        out += data
    return bytes(out)


def unpack(
    rows: Sequence[Row], data: bytes, env: dict[str, int] | None = None, omit: Sequence[str] = ()
) -> tuple[dict[str, int | bytes], int]:
    """The inverse of ``pack`` on the start of ``data``: (fields, bytes used). A field of
    width "rest" takes what is left; "…" stops the walk (the caller reads on)."""
    env = dict(env or {})
    fields: dict[str, int | bytes] = {}
    pos = 0
    shift = 0
    for row in rows:
        width = evaluate(row.width, env)
        if row.name in omit:
            assert width is not None
            shift += width
            continue
        at = evaluate(row.offset, env)
        assert at is not None and at - shift == pos, (row, pos)
        if row.width == "…":
            break
        code, fixed = int_code(row), literal(row)
        if code is not None:
            st = struct.Struct("<" + code)
            assert width == st.size, row
            (value,) = st.unpack_from(data, pos)
            fields[row.name] = value
            if row.name in SIZE_NAMES:
                env[SIZE_NAMES[row.name]] = value
            pos += st.size
            continue
        n = len(data) - pos if width is None else width
        raw = data[pos : pos + n]
        assert len(raw) == n, f"{row.name}: truncated"
        if fixed is not None:
            assert raw == fixed, f"{row.name}: {raw.hex()} is not {fixed.hex()}"
        if row.description.startswith("MUST be zero"):
            assert raw == bytes(n), f"{row.name} is not zero"
        fields[row.name] = raw
        pos += n
    return fields, pos


HEADER = layout("4")
FRAME = layout("5")
SHDR = layout("6.1")
TRAILER = layout("6.4", 0)
INDEX_ENTRY = layout("6.4", 1)
SECTION_END = layout("6.6")
FOOTER = layout("7", 0)
FOOTER_ENTRY = layout("7", 1)
TAIL = layout("8")
MAGIC = next(m for r in HEADER if r.name == "magic" and (m := literal(r)) is not None)
HORIZON = "min_delete_horizon"
"""The field version 1 lacks, in the trailer and in footer entries (section 11.2)."""


def spec_schema() -> pa.Schema:
    """RECORD_SCHEMA as the table of FORMAT.md section 6.3 gives it."""
    item = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
    types = {
        "int64": pa.int64(),
        "binary": pa.binary(),
        "list<item: struct<key: utf8 not null, value: binary>>": pa.list_(
            pa.field("item", item, nullable=False)
        ),
    }
    table = spec_tables(spec_section("6.3"))[0]
    assert table[0][:4] == ["#", "Field", "Arrow type", "Nullable"]
    fields = []
    for i, (number, name, arrow_type, nullable) in enumerate(r[:4] for r in table[1:]):
        assert int(number) == i
        type_name = re.match(r"`([^`]+)`", arrow_type)
        assert type_name is not None
        fields.append(
            pa.field(name.strip("`"), types[type_name.group(1)], nullable.startswith("yes"))
        )
    return pa.schema(fields)


SCHEMA = spec_schema()
SCHEMA_V1 = pa.schema(list(SCHEMA)[:5])
"""Section 11.2: RECORD_SCHEMA without its last field."""


# --- roaring bitmaps, from the RoaringFormatSpec ----------------------------------------

SERIAL_COOKIE_NO_RUN = 12346
SERIAL_COOKIE = 12347
NO_OFFSET_THRESHOLD = 4


def _runs(lows: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for v in lows:
        if runs and runs[-1][0] + runs[-1][1] == v:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((v, 1))
    return runs


def roaring32(values: Sequence[int]) -> bytes:
    """The portable serialization of a run-optimized 32-bit roaring bitmap: a container
    becomes a run container when that is strictly smaller than an array or bitset (the
    tie, 2·runs = cardinality, is left alone: CRoaring resolves it by the container's
    history, so this refuses it)."""
    containers: dict[int, list[int]] = {}
    for v in sorted(set(values)):
        assert 0 <= v < 2**32
        containers.setdefault(v >> 16, []).append(v & 0xFFFF)
    kinds: list[str] = []
    bodies: list[bytes] = []
    for lows in containers.values():
        runs = _runs(lows)
        card = len(lows)
        plain = 2 * card if card <= 4096 else 8192
        assert card > 4096 or 2 * len(runs) != card, "ambiguous run optimization"
        if 4 * len(runs) + 2 < plain + (2 if card <= 4096 else 0):
            kinds.append("run")
            bodies.append(
                struct.pack(
                    f"<H{2 * len(runs)}H", len(runs), *(x for s, n in runs for x in (s, n - 1))
                )
            )
        elif card <= 4096:
            kinds.append("array")
            bodies.append(struct.pack(f"<{card}H", *lows))
        else:
            bits = 0
            for v in lows:
                bits |= 1 << v
            kinds.append("bitset")
            bodies.append(bits.to_bytes(8192, "little"))
    n = len(containers)
    has_runs = "run" in kinds
    if has_runs:
        flags = sum(1 << i for i, k in enumerate(kinds) if k == "run")
        head = struct.pack("<I", SERIAL_COOKIE | (n - 1) << 16) + flags.to_bytes(
            (n + 7) // 8, "little"
        )
    else:
        head = struct.pack("<II", SERIAL_COOKIE_NO_RUN, n)
    head += b"".join(struct.pack("<HH", k, len(v) - 1) for k, v in containers.items())
    if not has_runs or n >= NO_OFFSET_THRESHOLD:
        at = len(head) + 4 * n
        for body in bodies:
            head += struct.pack("<I", at)
            at += len(body)
    return head + b"".join(bodies)


def read_roaring32(data: bytes) -> tuple[list[int], int]:
    """(the values, bytes used) of a portable 32-bit roaring bitmap at the start of data."""
    (cookie,) = struct.unpack_from("<I", data, 0)
    if cookie & 0xFFFF == SERIAL_COOKIE:
        n = (cookie >> 16) + 1
        flags = int.from_bytes(data[4 : 4 + (n + 7) // 8], "little")
        pos = 4 + (n + 7) // 8
    else:
        assert cookie == SERIAL_COOKIE_NO_RUN, f"cookie {cookie}"
        (n,) = struct.unpack_from("<I", data, 4)
        flags, pos = 0, 8
    headers = [struct.unpack_from("<HH", data, pos + 4 * i) for i in range(n)]
    pos += 4 * n
    if not flags or n >= NO_OFFSET_THRESHOLD:
        pos += 4 * n
    values: list[int] = []
    for i, (key, card_minus_1) in enumerate(headers):
        card = card_minus_1 + 1
        if flags >> i & 1:
            (nruns,) = struct.unpack_from("<H", data, pos)
            pairs = struct.unpack_from(f"<{2 * nruns}H", data, pos + 2)
            pos += 2 + 4 * nruns
            lows = [
                s + j for s, m in zip(pairs[::2], pairs[1::2], strict=True) for j in range(m + 1)
            ]
        elif card <= 4096:
            lows = list(struct.unpack_from(f"<{card}H", data, pos))
            pos += 2 * card
        else:
            bits = int.from_bytes(data[pos : pos + 8192], "little")
            lows = [j for j in range(65536) if bits >> j & 1]
            pos += 8192
        assert len(lows) == card
        values += [key << 16 | v for v in lows]
    return values, pos


def read_roaring64(data: bytes) -> tuple[list[int], int]:
    """The 64-bit extension: u64 count, then (u32 high, 32-bit bitmap of the lows)."""
    (count,) = struct.unpack_from("<Q", data, 0)
    pos = 8
    values: list[int] = []
    for _ in range(count):
        (high,) = struct.unpack_from("<I", data, pos)
        lows, used = read_roaring32(data[pos + 4 :])
        values += [high << 32 | v for v in lows]
        pos += 4 + used
    return values, pos


# --- records, stats and files as the specification defines them -------------------------


def logical_size(r: Record) -> int:
    """Section 6.3."""
    size = 16 + len(r.key or b"") + len(r.value or b"")
    return size + sum(len(k.encode()) + len(v or b"") for k, v in r.headers)


def min_delete_horizon(records: Sequence[Record]) -> int | None:
    """Section 6.3: the smallest non-null delete_horizon of a tombstone, INT64_MAX none."""
    found = [r.delete_horizon for r in records if r.value is None and r.delete_horizon is not None]
    earliest = min(found, default=None)
    return None if earliest == INT64_MAX else earliest


def stats(records: Sequence[Record]) -> dict[str, int]:
    """The trailer's stats fields (section 6.4) of a section holding ``records``."""
    horizon = min_delete_horizon(records)
    return {
        "first_offset": records[0].offset,
        "last_offset": records[-1].offset,
        "record_count": len(records),
        "tombstones": sum(r.value is None for r in records),
        "uncompressed_bytes": sum(logical_size(r) for r in records),
        "min_timestamp": min(r.timestamp for r in records),
        "max_timestamp": max(r.timestamp for r in records),
        HORIZON: INT64_MAX if horizon is None else horizon,
    }


def arrow_batch(schema: pa.Schema, records: Sequence[Record]) -> pa.RecordBatch:
    rows = [
        {
            "offset": r.offset,
            "timestamp": r.timestamp,
            "key": r.key,
            "value": r.value,
            "headers": [{"key": k, "value": v} for k, v in r.headers],
            "delete_horizon": r.delete_horizon,
        }
        for r in records
    ]
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def arrow_message(schema: pa.Schema, records: Sequence[Record]) -> bytes:
    """The batch's encapsulated IPC message, cut out of an IPC stream as section 6.2 says:
    the stream is the schema message, the batch message, the end-of-stream marker."""
    stream = pa.BufferOutputStream()
    with pa.ipc.new_stream(stream, schema) as writer:
        writer.write_batch(arrow_batch(schema, records))
    empty = pa.BufferOutputStream()
    pa.ipc.new_stream(empty, schema).close()
    schema_message = empty.getvalue().to_pybytes()[: -len(EOS)]
    data = stream.getvalue().to_pybytes()
    assert data.startswith(schema_message) and data.endswith(EOS)
    return bytes(data[len(schema_message) : -len(EOS)])


def frame(tag: bytes, payload: bytes) -> bytes:
    """Section 5: the CRC covers tag ‖ length ‖ payload."""
    length = struct.pack("<I", len(payload))
    crc = zlib.crc32(tag + length + payload)
    return pack(FRAME, {"tag": tag, "length": len(payload), "crc": crc, "payload": payload})


Parts = dict[str, tuple[int, int]]


def assemble(
    sections: Sequence[tuple[str, int, Sequence[Sequence[Record]]]],
    version: int,
    schema: pa.Schema,
    trailer_version: int | None = None,
) -> tuple[bytes, Parts]:
    """A whole file from the tables of FORMAT.md: ``sections`` are (topic, partition,
    batches), each batch written as one frame. Returns the bytes and the position and
    length of each part, named as in the table of section 10. ``trailer_version`` lays
    the trailers out as another version would (a malformed file)."""
    omit = () if version == 2 else (HORIZON,)
    trailer_version = version if trailer_version is None else trailer_version
    trailer_omit = () if trailer_version == 2 else (HORIZON,)
    out = bytearray(pack(HEADER, {"version": version, "flags": 0}))
    parts: Parts = {"file header": (0, len(out))}
    entries = []

    def add(name: str, data: bytes) -> None:
        parts[name] = (len(out), len(data))
        out.extend(data)

    for topic, partition, batches in sections:
        name = f"{topic}/{partition}"
        start = len(out)
        raw = topic.encode()
        shdr = pack(SHDR, {"topic_length": len(raw), "topic": raw, "partition": partition})
        add(f"{name} `SHDR` frame", frame(b"SHDR", shdr))
        index = b""
        for k, batch in enumerate(batches):
            message = arrow_message(schema, batch)
            suffix = "" if len(batches) == 1 else f" {k}"
            index += pack(
                INDEX_ENTRY, {"first_offset": batch[0].offset, "position": len(out) - start}
            )
            at = len(out)
            add(f"{name} `BTCH` frame{suffix}", frame(b"BTCH", message))
            (meta_length,) = struct.unpack_from("<i", message, 4)
            parts[f"{name} Arrow metadata{suffix}"] = (at + 20, meta_length)
            parts[f"{name} Arrow body{suffix}"] = (
                at + 20 + meta_length,
                len(message) - 8 - meta_length,
            )
        records = [r for batch in batches for r in batch]
        section_stats = stats(records)
        span = records[-1].offset - records[0].offset
        assert span < 2**32, "this assembler writes 32-bit bitmaps only"
        bitmap = roaring32([r.offset - records[0].offset for r in records])
        trailer = pack(
            TRAILER,
            {
                **section_stats,
                "batch_count": len(batches),
                "bitmap_kind": 1,
                "flags": 1 if trailer_version == 2 else 0,
                "batch index": index,
                "offset bitmap": bitmap,
            },
            omit=trailer_omit,
        )
        strl = frame(b"STRL", trailer)
        add(f"{name} `STRL` frame", strl)
        add(f"{name} section end", pack(SECTION_END, {"trailer_length": len(strl)}))
        parts[f"section {name}"] = (start, len(out) - start)
        entries.append(
            pack(
                FOOTER_ENTRY,
                {
                    "topic_length": len(raw),
                    "topic": raw,
                    "partition": partition,
                    "position": start,
                    "length": len(out) - start,
                    **section_stats,
                },
                omit=omit,
            )
        )
    footer, tail = footer_and_tail(entries, version)
    add("`FOOT` frame", footer)
    add("file tail", tail)
    parts["whole file"] = (0, len(out))
    return bytes(out), parts


def footer_and_tail(entries: Sequence[bytes], version: int) -> tuple[bytes, bytes]:
    """Sections 7 and 8: the `FOOT` frame of these entries (led by `footer_version` in
    version 3 only) and the tail that locates it."""
    fields: dict[str, int | bytes] = {"section_count": len(entries), "entries": b"".join(entries)}
    if version >= 3:
        fields["footer_version"] = version
    omit = () if version >= 3 else ("footer_version",)
    footer = frame(b"FOOT", pack(FOOTER, fields, omit=omit))
    (footer_crc,) = struct.unpack_from("<I", footer, 8)
    tail = {"footer_length": len(footer), "footer_crc": footer_crc, "version": version}
    return footer, pack(TAIL, {**tail, "magic": MAGIC})


def written(
    sections: Sequence[tuple[str, int, Sequence[Sequence[Record]]]], **kwargs: object
) -> bytes:
    """What the writer writes for ``sections``, each inner sequence one write_batch."""
    sink = io.BytesIO()
    write_file(
        sink,
        [(t, p, [records_to_batch(b) for b in batches]) for t, p, batches in sections],
        **kwargs,  # type: ignore[arg-type]
    )
    return sink.getvalue()


def records_of(data: bytes) -> dict[tuple[str, int], list[Record]]:
    """Every record of a file, by a verifying stream read."""
    out: dict[tuple[str, int], list[Record]] = {}
    reader = StreamReader(io.BytesIO(data), object_name="f", size=len(data), verify=True)
    for section in reader.sections():
        out[(section.topic, section.partition)] = [
            r for b in section.batches() for r in batch_to_records(b)
        ]
    return out


# --- section 10, the worked example -----------------------------------------------------

EXAMPLE = [
    (
        "orders",
        0,
        [
            [
                Record(5, 1700000000000, b"k1", b"v1"),
                Record(7, 1700000000001, b"k2", None, delete_horizon=1700086400001),
            ]
        ],
    ),
    ("orders", 1, [[Record(0, 1700000000002, None, b"hello", (("h", b"x"),))]]),
]


def example_parts() -> Parts:
    """The table of parts of section 10."""
    table = spec_tables(spec_section("10"))[0]
    assert table[0] == ["Part", "Position", "Length"]
    return {part: (int(at), int(n)) for part, at, n in table[1:]}


@dataclass
class DumpLine:
    position: int | None
    data: bytes
    meaning: str


def example_dump() -> list[DumpLine]:
    """The lines of section 10's byte dump: a line starting with a decimal position gives
    it; the bytes column runs to column 57 and holds hex pairs only; a line with bytes but
    no position continues the previous one."""
    block = re.search(r"```\n(.*?)```", spec_section("10"), re.S)
    assert block is not None
    lines = block.group(1).splitlines()
    assert lines[0].split() == ["pos", "bytes", "meaning"]
    out: list[DumpLine] = []
    position: int | None = None
    for line in lines[1:]:
        head, meaning = line[:57], line[57:].strip()
        tokens = head.split()
        if head[:1].isdigit():
            position = int(tokens.pop(0))
        assert all(re.fullmatch(r"[0-9A-F]{2}", t) for t in tokens), line
        data = bytes.fromhex("".join(tokens))
        if data:
            assert position is not None, line
            out.append(DumpLine(position, data, meaning))
            position += len(data)
        else:
            out.append(DumpLine(None, b"", meaning))
    return out


def test_worked_example_is_what_the_writer_writes() -> None:
    expected, parts = assemble(EXAMPLE, 2, SCHEMA)
    assert written(EXAMPLE, compression=None) == expected
    assert parts == example_parts()
    assert len(expected) == spec_number(r"\(size ([\d,]+)\)", spec_section("10"))


def test_worked_example_dump_shows_the_file() -> None:
    data, parts = assemble(EXAMPLE, 2, SCHEMA)
    shown = bytearray(len(data))
    for line in example_dump():
        if line.position is None:
            continue
        at, n = line.position, len(line.data)
        assert data[at : at + n] == line.data, f"bytes at {at}: {line.meaning}"
        assert not any(shown[at : at + n]), f"bytes at {at} shown twice"
        shown[at : at + n] = b"\1" * n
    hidden = [i for i, s in enumerate(shown) if not s]
    arrow = [i for part, (at, n) in parts.items() if "Arrow" in part for i in range(at, at + n)]
    assert hidden == sorted(arrow), "the dump shows every byte but the Arrow messages' own"


def test_worked_example_dump_says_what_its_bytes_say() -> None:
    """The numbers in the dump's meaning column are those of the bytes on their line and
    of the table of parts."""
    parts = example_parts()
    seen: Counter[str] = Counter()
    sections = iter(["orders/0", "orders/1"])
    trailers = iter(["orders/0 `STRL` frame", "orders/1 `STRL` frame"])
    for line in example_dump():
        if m := re.match(r'"(\w{4})", (\d+) bytes, crc 0x([0-9A-F]{8})$', line.meaning):
            tag, length, crc = struct.unpack("<4sII", line.data)
            assert (tag.decode(), length, crc) == (m[1], int(m[2]), int(m[3], 16))
            frame_part = (line.position, 12 + length)
            assert any(f"`{m[1]}`" in k and v == frame_part for k, v in parts.items()), line
            seen["frame"] += 1
        elif m := re.match(r"--- (\S+): position (\d+), length (\d+)$", line.meaning):
            assert m[1] == next(sections)
            assert parts[f"section {m[1]}"] == (int(m[2]), int(m[3]))
            seen["section"] += 1
        elif m := re.match(r"--- (footer|tail): position (\d+)$", line.meaning):
            assert parts["`FOOT` frame" if m[1] == "footer" else "file tail"][0] == int(m[2])
            seen[f"{m[1]} position"] += 1
        elif (m := re.match(r"(\w+) (\d+)$", line.meaning)) and len(line.data) in (4, 8):
            assert int.from_bytes(line.data, "little", signed=True) == int(m[2]), line
            seen["field"] += 1
        elif line.meaning.endswith("INT64_MAX: none"):
            assert line.data == struct.pack("<q", INT64_MAX)
            seen["no horizon"] += 1
        elif m := re.search(r"(trailer|footer) frame (\d+) bytes", line.meaning):
            (length,) = struct.unpack_from("<I", line.data)
            part = "`FOOT` frame" if m[1] == "footer" else next(trailers)
            assert length == int(m[2]) == parts[part][1]
            seen[m[1]] += 1
    assert seen == {
        "frame": 7,
        "section": 2,
        "footer position": 1,
        "tail position": 1,
        "footer": 1,
        "trailer": 2,
        "field": 20,
        "no horizon": 2,
    }
    bodies = re.findall(r"(\d+) metadata bytes, then a (\d+)-byte body", spec_section("10"))
    assert [(int(a), int(b)) for a, b in bodies] == [
        (parts[f"orders/{p} Arrow metadata"][1], parts[f"orders/{p} Arrow body"][1]) for p in (0, 1)
    ]


# --- section 13, shared blocks ----------------------------------------------------------

TABLE = layout("13.1", 0)
TABLE_ENTRY = layout("13.1", 1)
BLOCK_END = layout("13.1", 2)


def assemble_shared(
    sections: Sequence[tuple[str, int, Sequence[Sequence[Record]]]],
) -> tuple[bytes, Parts]:
    """A version-3 file whose sections all share one block, from the tables of FORMAT.md
    (sections 4 to 8 and 13); the parts are named as in the table of section 13.3."""
    out = bytearray(pack(HEADER, {"version": 3, "flags": 0}))
    parts: Parts = {"file header": (0, len(out))}

    def add(name: str, data: bytes) -> None:
        parts[name] = (len(out), len(data))
        out.extend(data)

    start = len(out)
    everything = [r for _, _, batches in sections for batch in batches for r in batch]
    message = arrow_message(SCHEMA, everything)
    add("`SBLK` frame", frame(b"SBLK", message))
    (meta_length,) = struct.unpack_from("<i", message, 4)
    parts["Arrow metadata"] = (start + 20, meta_length)
    parts["Arrow body"] = (start + 20 + meta_length, len(message) - 8 - meta_length)
    entries, footer_stats = [], []
    for topic, partition, batches in sections:
        records = [r for batch in batches for r in batch]
        section_stats = stats(records)
        footer_stats.append((topic.encode(), partition, section_stats))
        trailer = pack(
            TRAILER,
            {
                **section_stats,
                "batch_count": 1,
                "bitmap_kind": 1,
                "flags": 1,
                "batch index": pack(
                    INDEX_ENTRY, {"first_offset": records[0].offset, "position": 0}
                ),
                "offset bitmap": roaring32([r.offset - records[0].offset for r in records]),
            },
        )
        raw = topic.encode()
        entries.append(
            pack(
                TABLE_ENTRY,
                {
                    "topic_length": len(raw),
                    "topic": raw,
                    "partition": partition,
                    "trailer_length": len(trailer),
                    "trailer": trailer,
                },
            )
        )
    table = pack(TABLE, {"section_count": len(entries), "entries": b"".join(entries)})
    stbl = frame(b"STBL", table)
    add("`STBL` frame", stbl)
    add("block end", pack(BLOCK_END, {"table_length": len(stbl)}))
    parts["block"] = (start, len(out) - start)
    footer_entries = [
        pack(
            FOOTER_ENTRY,
            {
                "topic_length": len(raw),
                "topic": raw,
                "partition": partition,
                "position": start,
                "length": len(out) - start,
                **section_stats,
            },
        )
        for raw, partition, section_stats in footer_stats
    ]
    footer, tail = footer_and_tail(footer_entries, 3)
    add("`FOOT` frame", footer)
    add("file tail", tail)
    return bytes(out), parts


def test_shared_block_worked_example() -> None:
    """Section 13.3: the writer, sharing both sections of section 10's example, writes the
    bytes the tables of section 13 give, with the parts and size of its table."""
    expected, parts = assemble_shared(EXAMPLE)
    assert written(EXAMPLE, compression=None, share_below=1 << 10) == expected
    table = spec_tables(spec_section("13.3"))[0]
    assert table[0] == ["Part", "Position", "Length"]
    assert parts == {p: (int(a.replace(",", "")), int(n.replace(",", ""))) for p, a, n in table[1:]}
    assert len(expected) == spec_number(r"\(size ([\d,]+)\)", spec_section("13.3"))
    assert records_of(expected) == {
        (t, p): [r for batch in batches for r in batch] for t, p, batches in EXAMPLE
    }
    meta = read_footer(lambda a, b: expected[a:b], len(expected), object_name="f")
    assert meta.format_version == 3
    assert {(s.position, s.length) for s in meta.sections} == {parts["block"]}


def test_worked_example_in_version_1() -> None:
    """Section 10's sizes of the example as a version-1 file, with either record schema,
    and section 11.2's reading of it: the readers give the same records (with null
    delete horizons where the batches have no such column) and no min delete horizon."""
    text = spec_section("10")
    v1, parts = assemble(EXAMPLE, 1, SCHEMA)
    v1_5, parts_5 = assemble(EXAMPLE, 1, SCHEMA_V1)
    assert len(v1) == spec_number(r"same records take ([\d,]+) bytes", text)
    m = re.search(r"sections of (\d+) and (\d+) bytes, a\s+`FOOT` frame of (\d+) bytes", text)
    assert m is not None
    assert (
        parts["section orders/0"][1],
        parts["section orders/1"][1],
        parts["`FOOT` frame"][1],
    ) == tuple(map(int, m.groups()))
    assert len(v1_5) == spec_number(r"they take ([\d,]+) bytes", text)
    metadata = spec_number(r"Arrow metadata is (\d+) bytes", text)
    assert (
        parts_5["orders/0 Arrow metadata"][1] == parts_5["orders/1 Arrow metadata"][1] == metadata
    )
    m = re.search(r"\((\d+) and (\d+)\s+bytes\), giving sections of (\d+) and (\d+) bytes", text)
    assert m is not None
    assert (
        parts_5["orders/0 Arrow body"][1],
        parts_5["orders/1 Arrow body"][1],
        parts_5["section orders/0"][1],
        parts_5["section orders/1"][1],
    ) == tuple(map(int, m.groups()))
    evolution = spec_section("11.1")
    assert len(v1) == spec_number(r"and ([\d,]+) bytes in\s+version 1", evolution)
    assert len(assemble(EXAMPLE, 2, SCHEMA)[0]) == spec_number(
        r"is ([\d,]+) bytes in version 2", evolution
    )

    for data, schema in ((v1, SCHEMA), (v1_5, SCHEMA_V1)):

        def read_range(a: int, b: int, data: bytes = data) -> bytes:
            return data[a:b]

        meta = verify_stream(io.BytesIO(data), object_name="f", size=len(data))
        assert meta.format_version == 1
        assert [s.min_delete_horizon for s in meta.sections] == [None, None]
        footer = read_footer(read_range, len(data), object_name="f")
        assert footer == meta
        assert [s.min_delete_horizon for s in footer.sections] == [None, None]
        expected = {
            (t, p): [
                r if "delete_horizon" in schema.names else replace(r, delete_horizon=None)
                for batch in batches
                for r in batch
            ]
            for t, p, batches in EXAMPLE
        }
        assert records_of(data) == expected
        for s in footer.sections:
            ranged = read_section(read_range, s, object_name="f")
            assert [r for b in ranged for r in batch_to_records(b)] == expected[
                (s.topic, s.partition)
            ]


def arrow_counts(schema: pa.Schema) -> tuple[int, list[int]]:
    """(field nodes, buffers per node) by the rules of section 6.3: validity + data for
    int64, validity + offsets + data for binary and utf8, validity + offsets for a list,
    validity for a struct; nodes depth first."""
    per_type = {pa.int64(): 2, pa.binary(): 3, pa.string(): 3}
    buffers: list[int] = []

    def visit(t: pa.DataType) -> None:
        if pa.types.is_list(t):
            buffers.append(2)
            visit(t.value_type)
        elif pa.types.is_struct(t):
            buffers.append(1)
            for i in range(t.num_fields):
                visit(t.field(i).type)
        else:
            buffers.append(per_type[t])

    for f in schema:
        visit(f.type)
    return len(buffers), buffers


def test_field_nodes_and_buffers() -> None:
    """6.2's counts for RECORD_SCHEMA and RECORD_SCHEMA_V1 follow from 6.3's table and
    rules, and are those ipc.py checks; every count printed in FORMAT.md is one of them."""
    assert SCHEMA.equals(RECORD_SCHEMA, check_metadata=True)
    assert SCHEMA_V1.equals(RECORD_SCHEMA_V1, check_metadata=True)
    nodes, buffers = arrow_counts(SCHEMA)
    nodes_v1, buffers_v1 = arrow_counts(SCHEMA_V1)
    printed = re.findall(r"(\d+) field nodes and (\d+) buffers", spec_section("6.2"))
    assert [(int(a), int(b)) for a, b in printed] == [
        (nodes, sum(buffers)),
        (nodes_v1, sum(buffers_v1)),
    ]
    assert (nodes, sum(buffers)) == (ipc_module.FIELD_NODES, ipc_module.BUFFERS)
    assert (nodes_v1, sum(buffers_v1)) == (ipc_module.FIELD_NODES_V1, ipc_module.BUFFERS_V1)
    m = re.search(r"((?:\d+ \+ )+\d+) = (\d+)", spec_section("6.3"))
    assert m is not None
    assert [int(x) for x in m[1].split(" + ")] == buffers
    assert int(m[2]) == sum(buffers)
    pairs = re.findall(r"(\d+) field nodes(?:,| and) (\d+) buffers", SPEC.replace("\n", " "))
    assert len(pairs) >= 5
    assert {(int(a), int(b)) for a, b in pairs} == {
        (nodes, sum(buffers)),
        (nodes_v1, sum(buffers_v1)),
    }


def test_smallest_file() -> None:
    data, _ = assemble([], 2, SCHEMA)
    assert len(data) == spec_number(r"= (\d+) bytes", spec_section("8"))
    assert written([], compression=None) == data
    assert read_footer(lambda a, b: data[a:b], len(data), object_name="f") == FileMeta(
        (), len(data), 2
    )


def test_stream_reader_rejects_version_1_trailers_in_a_version_2_file() -> None:
    """Section 6.4: a trailer's flags are those of the file's version."""
    plain = [
        (t, p, [[replace(r, delete_horizon=None) for r in b] for b in bs]) for t, p, bs in EXAMPLE
    ]
    for schema in (SCHEMA, SCHEMA_V1):
        data, _ = assemble(plain, 2, schema, trailer_version=1)
        with pytest.raises(FormatError, match="in a version-2 file"):
            verify_stream(io.BytesIO(data), object_name="f", size=len(data))
    data, _ = assemble(plain, 1, SCHEMA, trailer_version=2)
    with pytest.raises(FormatError, match="trailer flags 0x1 in a version-1 file"):
        verify_stream(io.BytesIO(data), object_name="f", size=len(data))


# --- the golden files -------------------------------------------------------------------

T = 1_700_000_000_000
DAY = 86_400_000
Sections = list[tuple[str, int, list[list[Record]]]]

BASIC: Sections = [
    (
        "orders",
        0,
        [
            [
                Record(3, T, b"alice", b"v1"),
                Record(4, T + 1, b"bob", b"v2", (("trace", b"abc"),)),
                Record(6, T + 5, b"carol", None, delete_horizon=T + 5 + DAY),
            ],
            [
                Record(7, T + 6, b"dave", None),
                Record(9, T + 2, b"erin", b"v5"),
                Record(10, T + 9, b"alice", None, delete_horizon=T + 3 + DAY),
            ],
        ],
    ),
    (
        "orders",
        1,
        [
            [
                Record(0, T + 10, None, b"hello", (("h", b"x"),)),
                Record(1, T + 11, b"k", b""),
                Record(2, T + 12, b"", b"v"),
                Record(3, T + 13, b"k", b"w", (("\u00e9", None), ("h", b""))),
                Record(4, T + 14, b"k", None),
            ]
        ],
    ),
    (
        "payments-\u20ac",
        2,
        [
            [
                Record(100, T + 20, b"p1", b"paid", delete_horizon=T + 99),
                Record(2**32 + 105, T + 21, b"p2", None),
            ]
        ],
    ),
]
"""The records of v2.kcf, v1.kcf and (without delete horizons) v1-5col.kcf, as the
writer was given them (tests/golden/make_goldens.py), one inner list per write_batch."""
BASIC_MAX_BATCH_BYTES = 80
BASIC_BATCHES = {("orders", 0): [3, 6, 7], ("orders", 1): [0, 3], ("payments-\u20ac", 2): [100]}
"""The first offset of each batch frame, by section 6.2's batching weight (logical size +
8 per header) and max_batch_bytes 80, greedy within each write_batch: orders/0 weighs
23, 37, 21 | 20, 22, 21; orders/1 31, 17, 17, 36, 17; payments-€/2 22, 18."""

ZSTD: Sections = [
    (
        "orders",
        0,
        [
            [
                Record(
                    i,
                    T + i,
                    b"key-%d" % (i % 3),
                    None if i == 4 else b"value " * 40,
                    delete_horizon=T + DAY if i == 4 else None,
                )
                for i in range(6)
            ]
        ],
    )
]
"""The records of v2-zstd.kcf and (without the delete horizon) v1-5col-zstd.kcf, written
with zstd and min_compress_bytes 0: one batch; and of v2-lz4-as-is.kcf, written with
lz4."""


FRAME_MAGIC = {"zstd": bytes.fromhex("28b52ffd"), "lz4": bytes.fromhex("04224d18")}
"""The magic numbers that open a zstd frame and an LZ4 frame (little-endian)."""


@dataclass(frozen=True)
class Golden:
    name: str
    version: int
    inputs: Sections
    columns: int
    """6: RECORD_SCHEMA batches; 5: RECORD_SCHEMA_V1 (version 1 only)."""
    codec: str | None
    """The codec of its batches' compressed buffers (each frame format's magic number is
    looked for in the payloads)."""
    batches: dict[tuple[str, int], list[int]] = field(default_factory=dict)

    @property
    def data(self) -> bytes:
        return (GOLDEN / self.name).read_bytes()

    def records(self) -> dict[tuple[str, int], list[Record]]:
        """What a reader returns: a 5-column batch's records have no delete horizon."""
        return {
            (t, p): [
                r if self.columns == 6 else replace(r, delete_horizon=None)
                for batch in batches
                for r in batch
            ]
            for t, p, batches in self.inputs
        }

    def section_horizon(self, records: Sequence[Record]) -> int | None:
        """Section 11.2: a version-1 file records no min delete horizon."""
        return min_delete_horizon(records) if self.version == 2 else None


GOLDENS = [
    Golden("v2.kcf", 2, BASIC, 6, None, BASIC_BATCHES),
    Golden("v2-zstd.kcf", 2, ZSTD, 6, "zstd", {("orders", 0): [0]}),
    Golden("v2-lz4-as-is.kcf", 2, ZSTD, 6, "lz4", {("orders", 0): [0]}),
    Golden("v1.kcf", 1, BASIC, 6, None, BASIC_BATCHES),
    Golden("v1-5col.kcf", 1, BASIC, 5, None, BASIC_BATCHES),
    Golden("v1-5col-zstd.kcf", 1, ZSTD, 5, "zstd", {("orders", 0): [0]}),
]
golden_params = pytest.mark.parametrize("golden", GOLDENS, ids=[g.name for g in GOLDENS])


@dataclass
class WalkedSection:
    topic: str
    partition: int
    position: int
    length: int
    batches: list[tuple[int, bytes]]
    """(frame position relative to the section, payload)."""
    trailer: dict[str, int | bytes]
    index: list[tuple[int, int]]
    offsets: list[int]


@dataclass
class Walked:
    version: int
    sections: list[WalkedSection]
    entries: list[dict[str, int | bytes]]
    parts: Parts


def walk_frame(data: bytes, at: int) -> tuple[bytes, bytes, int]:
    """(tag, payload, frame length) of the frame at ``at``, its CRC checked (section 5)."""
    fields, used = unpack(FRAME, data[at:])
    tag, payload = fields["tag"], fields["payload"]
    assert isinstance(tag, bytes) and isinstance(payload, bytes)
    assert fields["crc"] == zlib.crc32(data[at : at + 8] + payload), f"CRC of the frame at {at}"
    return tag, payload, used


def walk(data: bytes) -> Walked:
    """A file read by the tables of FORMAT.md alone (no code of the package)."""
    header, at = unpack(HEADER, data)
    version = header["version"]
    assert version in (1, 2) and header["flags"] == 0
    omit = () if version == 2 else (HORIZON,)
    parts: Parts = {"file header": (0, at)}
    sections: list[WalkedSection] = []
    while True:
        tag, payload, used = walk_frame(data, at)
        if tag == b"FOOT":
            break
        assert tag == b"SHDR", tag
        start = at
        shdr, n = unpack(SHDR, payload)
        assert n == len(payload)
        topic = shdr["topic"]
        assert isinstance(topic, bytes)
        name = f"{topic.decode()}/{int(shdr['partition'])}"
        parts[f"{name} `SHDR` frame"] = (at, used)
        at += used
        batches: list[tuple[int, bytes]] = []
        while True:
            tag, payload, used = walk_frame(data, at)
            if tag != b"BTCH":
                break
            parts[f"{name} `BTCH` frame {len(batches)}"] = (at, used)
            batches.append((at - start, payload))
            at += used
        assert tag == b"STRL", tag
        parts[f"{name} `STRL` frame"] = (at, used)
        trailer, n = unpack(TRAILER, payload, omit=omit)
        assert n == len(payload)
        assert trailer["flags"] == (1 if version == 2 else 0)
        raw_index = trailer["batch index"]
        assert isinstance(raw_index, bytes)
        index = []
        for k in range(0, len(raw_index), 16):
            entry, _ = unpack(INDEX_ENTRY, raw_index[k : k + 16])
            index.append((int(entry["first_offset"]), int(entry["position"])))
        bitmap = trailer["offset bitmap"]
        assert isinstance(bitmap, bytes)
        relative, n = (read_roaring32 if trailer["bitmap_kind"] == 1 else read_roaring64)(bitmap)
        assert n == len(bitmap), "the bitmap fills the rest of the trailer"
        first = int(trailer["first_offset"])
        at += used
        end, n = unpack(SECTION_END, data[at : at + 8])
        assert end["trailer_length"] == used
        parts[f"{name} section end"] = (at, n)
        at += n
        parts[f"section {name}"] = (start, at - start)
        sections.append(
            WalkedSection(
                topic.decode(),
                int(shdr["partition"]),
                start,
                at - start,
                batches,
                trailer,
                index,
                [first + r for r in relative],
            )
        )
    parts["`FOOT` frame"] = (at, used)
    footer, pos = unpack(FOOTER, payload, omit=("footer_version",))
    entries = []
    for _ in range(int(footer["section_count"])):
        entry, n = unpack(FOOTER_ENTRY, payload[pos:], omit=omit)
        entries.append(entry)
        pos += n
    assert pos == len(payload), "the entries fill the footer"
    at += used
    tail, n = unpack(TAIL, data[at:])
    assert tail["magic"] == MAGIC
    assert (tail["footer_length"], tail["version"]) == (used, version)
    assert tail["footer_crc"] == struct.unpack_from("<I", data, parts["`FOOT` frame"][0] + 8)[0]
    parts["file tail"] = (at, n)
    assert at + n == len(data), "nothing after the tail"
    parts["whole file"] = (0, len(data))
    return Walked(int(version), sections, entries, parts)


@golden_params
def test_golden_layout_follows_the_spec(golden: Golden) -> None:
    """Each golden, walked by FORMAT.md's tables and decoded by pyarrow alone, holds the
    records it was written with, and its trailers and footer say what 6.4 and 7 say."""
    data = golden.data
    walked = walk(data)
    assert walked.version == golden.version
    expected = golden.records()
    assert [(s.topic, s.partition) for s in walked.sections] == list(expected)
    schema = SCHEMA if golden.columns == 6 else SCHEMA_V1
    for s, entry in zip(walked.sections, walked.entries, strict=True):
        records = expected[(s.topic, s.partition)]
        want = stats(records)
        if golden.version == 1:
            del want[HORIZON]
        trailer = {k: v for k, v in s.trailer.items() if k in want}
        assert trailer == want
        span = records[-1].offset - records[0].offset
        assert s.trailer["bitmap_kind"] == (1 if span < 2**32 else 2)
        assert s.trailer["batch_count"] == len(s.batches)
        assert s.offsets == [r.offset for r in records]
        assert [o for o, _ in s.index] == golden.batches[(s.topic, s.partition)]
        assert [p for _, p in s.index] == [p for p, _ in s.batches]
        decoded: list[Record] = []
        for _, payload in s.batches:
            batch = pa.ipc.read_record_batch(pa.py_buffer(payload), schema)
            batch.validate(full=True)
            assert [c for c, magic in FRAME_MAGIC.items() if magic in payload] == (
                [golden.codec] if golden.codec else []
            )
            for row in batch.to_pylist():
                decoded.append(
                    Record(
                        row["offset"],
                        row["timestamp"],
                        row["key"],
                        row["value"],
                        tuple((h["key"], h["value"]) for h in row["headers"]),
                        row.get("delete_horizon"),
                    )
                )
        assert decoded == records
        raw_topic = s.topic.encode()
        assert entry == {
            "topic_length": len(raw_topic),
            "topic": raw_topic,
            "partition": s.partition,
            "position": s.position,
            "length": s.length,
            **want,
        }


@golden_params
def test_golden_reads_back(golden: Golden) -> None:
    """The readers (streaming with and without the size, footer, ranged, partial decode)
    give each golden's records and section fields."""
    data = golden.data
    walked = walk(data)
    expected = golden.records()

    def read_range(a: int, b: int) -> bytes:
        return data[a:b]

    want = [
        SectionMeta(
            topic=t,
            partition=p,
            first_offset=records[0].offset,
            last_offset=records[-1].offset,
            record_count=len(records),
            uncompressed_bytes=sum(logical_size(r) for r in records),
            min_timestamp=min(r.timestamp for r in records),
            max_timestamp=max(r.timestamp for r in records),
            tombstones=sum(r.value is None for r in records),
            position=s.position,
            length=s.length,
            min_delete_horizon=golden.section_horizon(records),
        )
        for ((t, p), records), s in zip(expected.items(), walked.sections, strict=True)
    ]
    for size in (len(data), None):
        meta = verify_stream(io.BytesIO(data), object_name=golden.name, size=size)
        assert meta == FileMeta(tuple(want), len(data), golden.version)
        assert [m.to_json() for m in meta.sections] == [m.to_json() for m in want]
    footer = read_footer(read_range, len(data), object_name=golden.name)
    assert [m.to_json() for m in footer.sections] == [m.to_json() for m in want]
    assert footer.format_version == golden.version
    assert records_of(data) == expected

    for s in footer.sections:
        records = expected[(s.topic, s.partition)]
        ranged = read_section(read_range, s, object_name=golden.name)
        assert [r for b in ranged for r in batch_to_records(b)] == records
        offsets = read_section_offsets(read_range, s, object_name=golden.name)
        assert list(offsets) == [r.offset for r in records]
        for start in sorted({r.offset for r in records} | {r.offset + 1 for r in records}):
            got = read_section(read_range, s, object_name=golden.name, from_offset=start)
            assert [r for b in got for r in batch_to_records(b)] == [
                r for r in records if r.offset >= start
            ]

    reader = StreamReader(io.BytesIO(data), object_name=golden.name)
    for section in reader.sections():
        records = expected[(section.topic, section.partition)]
        partial = [b.to_pydict() for b in section.batches(["key", "delete_horizon"])]
        assert [k for d in partial for k in d] == ["offset", "key", "delete_horizon"] * len(partial)
        assert [(o, k, h) for d in partial for o, k, h in zip(*d.values(), strict=True)] == [
            (r.offset, r.key, r.delete_horizon) for r in records
        ]


def test_writer_reproduces_the_version_2_golden() -> None:
    golden = GOLDENS[0]
    assert golden.name == "v2.kcf"
    assert written(BASIC, compression=None, max_batch_bytes=BASIC_MAX_BATCH_BYTES) == golden.data


def readme_parts() -> Parts:
    """The offset table of tests/golden/README.md (v2.kcf)."""
    text = (GOLDEN / "README.md").read_text(encoding="utf-8")
    table = next(t for t in spec_tables(text) if t[0][:3] == ["Position", "Length", "Part"])
    return {part: (int(at), int(n)) for at, n, part, *_ in table[1:]}


def test_golden_readme_offsets() -> None:
    assert readme_parts() == walk(GOLDENS[0].data).parts


def test_every_golden_is_tested() -> None:
    assert sorted(p.name for p in GOLDEN.glob("*.kcf")) == sorted(g.name for g in GOLDENS)


def test_golden_readme_trailer_fields() -> None:
    """The README's field table of orders/0's trailer in v2.kcf: contiguous, filling the
    STRL payload, each integer what the file holds there."""
    data = GOLDENS[0].data
    text = (GOLDEN / "README.md").read_text(encoding="utf-8")
    table = next(t for t in spec_tables(text) if t[0] == ["Position", "Length", "Field", "Value"])
    frame_at, frame_length = walk(data).parts["orders/0 `STRL` frame"]
    at = frame_at + 12
    integers = 0
    for position, length, name, value in table[1:]:
        assert int(position) == at, name
        raw = data[at : at + int(length)]
        if re.fullmatch(r"-?\d+", value):
            assert int.from_bytes(raw, "little", signed=True) == int(value), name
            integers += 1
        at += int(length)
    assert at == frame_at + frame_length
    assert integers == len(table) - 2  # every row but the header and the bitmap
