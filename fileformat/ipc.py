"""Batch frames' payloads: one Arrow IPC encapsulated RecordBatch message each.

Encoding uses pyarrow's stream writer (the schema message it writes first is dropped: the
schema is fixed by the format version). Decoding never hands Arrow unchecked bytes: the
frame's CRC has been verified by the caller, and ``decode_batch`` first walks the message's
flatbuffer metadata itself (``check_message``) to bound what Arrow will allocate, then
decodes, then fully validates the batch.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Sequence
from typing import Any, Final, NamedTuple, Protocol

import pyarrow as pa
import pyarrow.ipc

from compactor.fileformat import _encoder, _sections
from compactor.fileformat.batches import BatchStats, checked_stats
from compactor.fileformat.errors import FormatError
from compactor.fileformat.framing import (
    FORMAT_VERSION,
    MAX_DECODED_BATCH,
    MAX_EXPANSION,
    Payload,
)
from compactor.fileformat.records import RECORD_SCHEMA, RECORD_SCHEMA_V1
from compactor.fileformat.second_read import MEMO, Role

COMPRESSIONS: Final = (None, "zstd", "lz4")

CONTINUATION: Final = 0xFFFFFFFF
METADATA_V5: Final = 4
HEADER_RECORD_BATCH: Final = 3
CODEC_LZ4_FRAME: Final = 0
CODEC_ZSTD: Final = 1
CODEC_NAMES: Final = {CODEC_LZ4_FRAME: "lz4", CODEC_ZSTD: "zstd"}
"""Arrow's codecs by their ``CompressionType``, named as ``COMPRESSIONS`` names them."""
FIELD_NODES: Final = 9
"""offset, timestamp, key, value, headers (list), its struct, header key, header value,
delete_horizon."""
BUFFERS: Final = 21
"""Validity + data for the three int64 columns, validity + offsets + data for each of the four
binary/string columns, validity + offsets for the list, validity for the struct."""
FIELD_NODES_V1: Final = 8
BUFFERS_V1: Final = 19
"""Field nodes and buffers of RECORD_SCHEMA_V1 (no delete_horizon), found in version 1."""
_SCHEMAS: Final = {
    (FIELD_NODES, BUFFERS): RECORD_SCHEMA,
    (FIELD_NODES_V1, BUFFERS_V1): RECORD_SCHEMA_V1,
}
_SCHEMA_OF_NODES: Final = {nodes: schema for (nodes, _), schema in _SCHEMAS.items()}
MIN_ROW_BYTES: Final = 16
"""The least a row of a batch decodes to (its offset and timestamp): a message claiming
more rows than ``MAX_DECODED_BATCH // MIN_ROW_BYTES`` is rejected before decoding."""

_PREFIX = struct.Struct("<Ii")
_U8 = struct.Struct("<B")
_I8 = struct.Struct("<b")
_I16 = struct.Struct("<h")
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")


class _StreamEncoder:
    """Batches encoded as the batch messages of an Arrow IPC stream in ``compression`` (or
    none), by compiled code (``_encoder``): on the calling thread, or in order on the
    encoder's own thread, which never holds the GIL (``submit``). The options are those
    pyarrow's stream writer was given here before: the codec's default level, compressed
    on the calling thread (handing each buffer to Arrow's thread pool costs a wake-up per
    buffer and, with phase 1's process on the other core, buys no parallelism:
    bench/README.md, "Phase 1 in a process of its own")."""

    def __init__(self, compression: str | None) -> None:
        self._encoder = _encoder.Encoder(compression or "none")

    def encode(self, batch: pa.RecordBatch) -> bytes:
        return self._encoder.encode(batch.__arrow_c_array__())

    def submit(self, batch: pa.RecordBatch) -> _encoder.Encoding:
        return self._encoder.submit(batch.__arrow_c_array__())

    def close(self) -> None:
        self._encoder.close()


class Pending(Protocol):
    """A payload being encoded on another thread: a ``Future[bytes]``, or ``_Checked``."""

    def done(self) -> bool: ...

    def result(self) -> bytes: ...


class _Checked:
    """A batch's payload from the encoder's thread (``BatchEncoder.submit``), checked when
    it is taken as ``BatchEncoder.encode`` checks its own."""

    __slots__ = ("_owner", "_encoding", "_batch")

    def __init__(
        self, owner: BatchEncoder, encoding: _encoder.Encoding, batch: pa.RecordBatch
    ) -> None:
        self._owner, self._encoding, self._batch = owner, encoding, batch

    def done(self) -> bool:
        return self._encoding.done()

    def result(self) -> bytes:
        payload = self._owner.checked(self._encoding.result(), self._batch)
        self._batch = None
        return payload


MIN_SAVINGS: Final = {"lz4": 0.25}
"""The codecs whose batches are encoded buffer by buffer (``_BufferWise``), each with the
share of a buffer's bytes it must save for the buffer to be stored compressed; otherwise
the buffer is stored as it is, its length prefix -1 (FORMAT.md 6.2). lz4 is the codec
chosen for CPU (below the top level): on this system's benchmark workloads it saved
nothing on random values and 14% on keys, and took most of a job's decoding and most of
its own encoding on them. zstd, chosen for bytes at the top level, is left to Arrow's
IPC writer, which compresses every buffer: zstd halves keys and values alike, and made
buffer by buffer it stored the same bytes for no steady gain in CPU (``bench.codecs``;
bench/README.md, "lz4 where it pays")."""

MIN_SAVINGS_INTEGERS: Final = {"lz4": 0.6}
"""The share of ``MIN_SAVINGS`` for the data of the int64 columns (offsets, timestamps,
delete horizons). lz4 halves increasing offsets and timestamps, and decompressing them
was most of what was left of its share of a decode (10 µs a message each at 1,000
records, ``bench.ipc_decode``); stored as they are, an L0 workload's files grew 5% and a
full compaction of them took 7% less CPU, an L0 -> L1 job 11% less (bench/README.md,
"Offsets and timestamps stored as they are"). A column of zeros (no delete horizons)
lz4 still shrinks to almost nothing, and keeps."""


class BatchEncoder:
    """Turns record batches into batch frame payloads (encapsulated IPC messages).

    Batches of fewer than ``min_compress_bytes`` logical bytes are stored uncompressed: Arrow
    compresses each buffer separately, which for a few records costs more time (a codec
    context per buffer) and space than it saves. A compressed batch whose decoded body would
    exceed MAX_EXPANSION times its payload (readers reject those) is stored uncompressed too.
    With a ``min_savings`` (by default the codec's in ``MIN_SAVINGS``, if any, and for
    int64 data its ``MIN_SAVINGS_INTEGERS``), a compressed batch is encoded buffer by
    buffer (``_BufferWise``): a buffer that its codec shrinks by less than that share is
    stored as it is, and readers then take it without decompressing it. Otherwise Arrow's
    IPC writer compresses every buffer. A ``min_savings`` given applies to every buffer.
    """

    def __init__(
        self,
        compression: str | None,
        min_compress_bytes: int = 0,
        min_savings: float | None = None,
    ) -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {COMPRESSIONS}, not {compression!r}")
        min_savings_integers = min_savings
        if min_savings is None and compression is not None:
            min_savings = MIN_SAVINGS.get(compression)
            min_savings_integers = MIN_SAVINGS_INTEGERS.get(compression, min_savings)
        if min_savings is not None and not 0.0 <= min_savings <= 1.0:
            raise ValueError(f"min_savings must be within [0, 1], not {min_savings!r}")
        self._compression = compression
        self._compressing: _StreamEncoder | _BufferWise | None = None
        if compression is not None:
            self._compressing = (
                _StreamEncoder(compression)
                if min_savings is None
                else _BufferWise(compression, min_savings, min_savings_integers)
            )
        self._min_compress_bytes = min_compress_bytes

    def compresses(self, logical_bytes: int) -> bool:
        """Whether a batch of ``logical_bytes`` is compressed (if it gains)."""
        return self._compressing is not None and logical_bytes >= self._min_compress_bytes

    def codec_for(self, logical_bytes: int) -> str | None:
        """The codec a batch of ``logical_bytes`` is compressed with, if it gains."""
        return self._compression if self.compresses(logical_bytes) else None

    def encode(self, batch: pa.RecordBatch, logical_bytes: int) -> bytes:
        if not self.compresses(logical_bytes):
            return _encode_plain(batch)
        assert self._compressing is not None
        return self.checked(self._compressing.encode(batch), batch)

    def checked(self, payload: bytes, batch: pa.RecordBatch) -> bytes:
        """``payload``, the compressed encoding of ``batch``; ``batch`` uncompressed where
        its decoded body would be more than MAX_EXPANSION times that (readers reject it)."""
        decoded = inspect_message(payload, 0, "<encoder>", check_expansion=False).decoded
        if decoded > MAX_EXPANSION * len(payload):
            return _encode_plain(batch)
        return payload

    @property
    def submits(self) -> bool:
        """Whether ``submit`` can take a batch ``compresses`` accepts: whether this codec's
        batches are encoded by compiled code (not ``_BufferWise``)."""
        return isinstance(self._compressing, _StreamEncoder)

    def submit(self, batch: pa.RecordBatch) -> Pending:
        """``encode(batch, ...)`` of a batch this encoder compresses, in order with the
        others submitted, on a thread of its own that never holds the GIL (``submits``
        must be true). ``close`` stops the thread."""
        assert isinstance(self._compressing, _StreamEncoder)
        return _Checked(self, self._compressing.submit(batch), batch)

    def close(self) -> None:
        """Stops the thread of ``submit`` (the payloads not yet made are dropped; their
        ``result()`` raises RuntimeError). ``encode`` still works."""
        if isinstance(self._compressing, _StreamEncoder):
            self._compressing.close()


RETRY_EVERY: Final = 16
"""How often a ``_BufferWise`` encoder tries its codec again on the buffers that did not
pay: the first batch and every 16th after it."""


class _Layout(NamedTuple):
    """Where the parts of a batch message that the encoder writes are, as positions in
    the payload: its body's start, the ``bodyLength`` field, the row count, the field
    nodes' vector and the buffers' vector; and the buffers' (offset, length) pairs."""

    body_start: int
    body_length_at: int
    rows_at: int
    nodes_at: int
    nodes: int
    buffers_at: int
    spans: tuple[int, ...]


def _layout(payload: bytes | memoryview) -> _Layout:
    """The layout of a message of Arrow's IPC writer (trusted: not checked)."""
    body_start = _PREFIX.size + _PREFIX.unpack_from(payload, 0)[1]
    fb = _Flatbuffer(bytes(payload[_PREFIX.size : body_start]), _PREFIX.size, "<encoder>")
    message = fb.table(fb.read(_U32, 0))
    batch = fb.table(fb.ref(message, 2))
    nodes_at, nodes = fb.vector(batch, 1, 16)
    buffers_at, buffers = fb.vector(batch, 2, 16)
    spans = struct.unpack_from(f"<{2 * buffers}q", fb.data, buffers_at)
    body_length_at, rows_at = fb.field(message, 3), fb.field(batch, 0)
    if not (body_length_at and rows_at and nodes_at and buffers_at):
        raise ValueError("a message whose body length, row count, nodes or buffers are absent")
    at = _PREFIX.size
    return _Layout(
        body_start,
        at + body_length_at,
        at + rows_at,
        at + nodes_at,
        nodes,
        at + buffers_at,
        spans,
    )


class _BufferWise:
    """Compressed batch messages, made buffer by buffer from Arrow's uncompressed message
    of the batch: each buffer compressed with the codec (Arrow's own, as its IPC writer
    calls it) where that saves at least ``min_savings`` of its bytes, else stored as it
    is, its length prefix -1 (FORMAT.md 6.2).

    The metadata is Arrow's for a compressed message of RECORD_SCHEMA in the codec: taken
    once a process, from the stream writer's message for a batch of one record
    (``_template``), then given each batch's row count, field nodes, buffers and body
    length. Its layout does not depend on those values (fixed-size fields, vectors of
    fixed counts) as long as none is left out as a default: a row count of 0 would be,
    so an empty batch is refused.

    A buffer (by its place in the message) that did not pay is stored as it is without
    trying the codec, until the next retry (``RETRY_EVERY``): lz4 spent most of its
    time on the keys and values that it could not shrink by a quarter on this system's
    benchmark workloads (``bench.codecs``), so the writer would pay for trying what the
    readers are spared."""

    def __init__(
        self, compression: str, min_savings: float, min_savings_integers: float | None = None
    ) -> None:
        self._compression = compression
        self._codec = pa.Codec(compression)
        integers = min_savings if min_savings_integers is None else min_savings_integers
        integer_data = _integer_data(RECORD_SCHEMA)
        self._keep_at_most = [
            1.0 - (integers if k in integer_data else min_savings) for k in range(BUFFERS)
        ]
        self._pays = [True] * BUFFERS
        self._batches = 0

    def encode(self, batch: pa.RecordBatch) -> bytes:
        if not batch.num_rows:
            raise ValueError("a batch message needs at least one row (FORMAT.md 6.2)")
        view = memoryview(batch.serialize())  # Arrow's uncompressed message, read in place
        p = _layout(view)
        template, t = _template(self._compression)
        if (p.nodes, len(p.spans)) != (t.nodes, len(t.spans)):
            raise ValueError(f"a batch of {p.nodes} field nodes, not RECORD_SCHEMA's")
        retry = self._batches % RETRY_EVERY == 0
        self._batches += 1
        head = bytearray(template)
        parts: list[bytes | bytearray | memoryview] = [head]
        spans: list[int] = []
        size = 0
        for k in range(len(p.spans) // 2):
            start, length = p.body_start + p.spans[2 * k], p.spans[2 * k + 1]
            if length:
                stored = self._buffer(k, view[start : start + length], retry)
                length = sum(map(len, stored))
                parts += stored
            spans += (size, length)
            size += length
            if length % 8:
                parts.append(bytes(8 - length % 8))
                size += 8 - length % 8
        head[t.rows_at : t.rows_at + 8] = view[p.rows_at : p.rows_at + 8]
        nodes = 16 * p.nodes
        head[t.nodes_at : t.nodes_at + nodes] = view[p.nodes_at : p.nodes_at + nodes]
        struct.pack_into(f"<{len(spans)}q", head, t.buffers_at, *spans)
        _I64.pack_into(head, t.body_length_at, size)
        return b"".join(parts)

    def _buffer(self, k: int, raw: memoryview, retry: bool) -> tuple[bytes, bytes | memoryview]:
        """Buffer ``k`` of a message as stored: its length prefix and its bytes,
        compressed where that pays, tried where it paid last time or at a retry."""
        if retry or self._pays[k]:
            packed = self._codec.compress(raw, asbytes=True)
            self._pays[k] = len(packed) <= self._keep_at_most[k] * len(raw)
            if self._pays[k]:
                return _I64.pack(len(raw)), packed
        return _STORED_AS_IS, raw


_STORED_AS_IS = _I64.pack(-1)


def _integer_data(schema: pa.Schema) -> frozenset[int]:
    """The buffer indices of a message of ``schema`` that hold an int64 column's data."""
    found, at = set(), 0
    for field in schema:
        if pa.types.is_int64(field.type):
            found.add(at + 1)  # after its validity
        at += _buffer_count(field.type)
    return frozenset(found)


_templates: dict[str, tuple[bytes, _Layout]] = {}


def _template(compression: str) -> tuple[bytes, _Layout]:
    """Arrow's metadata of a compressed message of one record in ``compression`` (the
    payload up to its body), with its layout; made the first time it is asked for."""
    found = _templates.get(compression)
    if found is None:
        one = pa.RecordBatch.from_pylist(
            [{"offset": 0, "timestamp": 0, "key": b"", "value": b"", "headers": []}],
            schema=RECORD_SCHEMA,
        )
        arrow = _StreamEncoder(compression).encode(one)
        layout = _layout(arrow)
        found = _templates[compression] = (arrow[: layout.body_start], layout)
    return found


def _encode_plain(batch: pa.RecordBatch) -> bytes:
    """An uncompressed batch's message: what a stream writer without compression writes
    for it (the same IPC writer with default options), in one call."""
    return bytes(batch.serialize().to_pybytes())


class _Flatbuffer:
    """Bounds-checked reads of a flatbuffer (the Arrow message metadata) from untrusted bytes."""

    __slots__ = ("data", "base", "object_name")

    def __init__(self, data: bytes, base: int, object_name: str) -> None:
        self.data = data
        self.base = base
        self.object_name = object_name

    def error(self, reason: str, at: int = 0) -> FormatError:
        return FormatError(self.object_name, self.base + at, f"Arrow message metadata: {reason}")

    def read(self, st: struct.Struct, pos: int) -> Any:
        if pos < 0 or pos + st.size > len(self.data):
            raise self.error(f"reference to byte {pos} outside its {len(self.data)} bytes")
        return st.unpack_from(self.data, pos)[0]

    def table(self, pos: int) -> tuple[int, tuple[int, ...]]:
        """A table: (its position, the positions of its fields, 0 for absent ones)."""
        vt = pos - self.read(_I32, pos)
        size = self.read(_U16, vt)
        if size < 4 or size % 2 or vt + size > len(self.data):
            raise self.error(f"bad vtable of {size} bytes", vt)
        slots = struct.unpack_from(f"<{(size - 4) // 2}H", self.data, vt + 4)
        return pos, tuple(pos + s if s else 0 for s in slots)

    @staticmethod
    def field(table: tuple[int, tuple[int, ...]], index: int) -> int:
        fields = table[1]
        return fields[index] if index < len(fields) else 0

    def scalar(
        self, table: tuple[int, tuple[int, ...]], index: int, st: struct.Struct, default: int
    ) -> int:
        pos = self.field(table, index)
        return int(self.read(st, pos)) if pos else default

    def ref(self, table: tuple[int, tuple[int, ...]], index: int) -> int:
        """The position a table or vector field points to, or 0 when absent."""
        pos = self.field(table, index)
        return pos + int(self.read(_U32, pos)) if pos else 0

    def vector(
        self, table: tuple[int, tuple[int, ...]], index: int, elem_size: int
    ) -> tuple[int, int]:
        """(position of the first element, element count) of a vector field; (0, 0) if absent."""
        pos = self.ref(table, index)
        if not pos:
            return 0, 0
        count = int(self.read(_U32, pos))
        if pos + 4 + count * elem_size > len(self.data):
            raise self.error(f"vector of {count} elements overruns the metadata", pos)
        return pos + 4, count


class Message(NamedTuple):
    """What ``inspect_message`` learnt of a message it accepted."""

    rows: int
    decoded: int
    """The body's bytes once decompressed."""
    codec: str | None
    """The body's compression, one of ``COMPRESSIONS``."""
    schema: pa.Schema
    """RECORD_SCHEMA, or RECORD_SCHEMA_V1 for a version-1 batch without delete_horizon."""

    @property
    def compressed(self) -> bool:
        return self.codec is not None


_CHECKED_LIMIT = 4096
_checked: dict[tuple[bytes, int], Message] = {}
"""Uncompressed messages ``inspect_message`` accepted, by their prefix and metadata and the
payload's length (all that the check reads of an uncompressed message): the two pointers of
a job read every batch twice, and the second check of the same bytes is then a dictionary
hit. Bounded (cleared when full); only ever holds accepted messages, so every rejection is
computed afresh."""


def check_message(
    payload: Payload,
    position: int,
    object_name: str,
    *,
    check_expansion: bool = True,
    version: int = FORMAT_VERSION,
) -> tuple[int, int]:
    """Checks that ``payload`` is one RecordBatch message Arrow can decode within bounds.

    Verifies the encapsulation, metadata version, message type, body length, the field-node
    and buffer counts of RECORD_SCHEMA (or, in a ``version``-1 file, of RECORD_SCHEMA_V1),
    that every buffer lies inside the body, and that the decompressed body (each
    compressed buffer declares its size) is at most MAX_DECODED_BATCH. Returns (row count,
    decoded body bytes). ``position`` is the payload's absolute position.
    """
    m = inspect_message(
        payload, position, object_name, check_expansion=check_expansion, version=version
    )
    return m.rows, m.decoded


def inspect_message(
    payload: Payload,
    position: int,
    object_name: str,
    *,
    check_expansion: bool = True,
    version: int = FORMAT_VERSION,
) -> Message:
    """``check_message``, also saying whether the body is compressed and its schema."""
    m = _memo_check(payload, position, object_name, check_expansion)
    if m.schema is not RECORD_SCHEMA and version != 1:
        raise FormatError(
            object_name,
            position,
            f"Arrow message: a batch without delete_horizon ({FIELD_NODES_V1} field nodes) "
            f"in a version-{version} file",
        )
    return m


def _memo_check(
    payload: Payload, position: int, object_name: str, check_expansion: bool
) -> Message:
    if type(payload) in (bytes, memoryview) and len(payload) >= _PREFIX.size:
        meta_len = _PREFIX.unpack_from(payload, 0)[1]
        if 0 < meta_len <= len(payload) - _PREFIX.size:
            key = (bytes(payload[: _PREFIX.size + meta_len]), len(payload))
            hit = _checked.get(key)
            if hit is not None:
                return hit
            m = _check_message(payload, position, object_name, check_expansion)
            if not m.compressed:
                if len(_checked) >= _CHECKED_LIMIT:
                    _checked.clear()
                _checked[key] = m
            return m
    return _check_message(payload, position, object_name, check_expansion)


def _check_message(
    payload: Payload, position: int, object_name: str, check_expansion: bool
) -> Message:
    usual = _sections.usual_message(payload, check_expansion, MAX_DECODED_BATCH, MAX_EXPANSION)
    if usual is None:
        return _check_message_fields(payload, position, object_name, check_expansion)
    rows, decoded, codec, nodes = usual
    return Message(
        rows, decoded, None if codec is None else CODEC_NAMES[codec], _SCHEMA_OF_NODES[nodes]
    )


def _check_message_fields(
    payload: Payload, position: int, object_name: str, check_expansion: bool
) -> Message:
    """``_check_message`` field by field, where the compiled pass
    (``_sections.usual_message``, which makes the same checks) finds a problem: the
    FormatError names it."""

    def fail(reason: str, at: int = 0) -> FormatError:
        return FormatError(object_name, position + at, f"Arrow message: {reason}")

    if len(payload) < _PREFIX.size:
        raise fail(f"{len(payload)} bytes is too short for a message")
    marker, meta_len = _PREFIX.unpack_from(payload, 0)
    if marker != CONTINUATION:
        raise fail(f"missing continuation marker (found {marker:#010x})")
    if meta_len <= 0 or _PREFIX.size + meta_len > len(payload):
        raise fail(f"metadata length {meta_len} does not fit in {len(payload)} bytes", 4)
    body_start = _PREFIX.size + meta_len
    fb = _Flatbuffer(
        bytes(payload[_PREFIX.size : body_start]), position + _PREFIX.size, object_name
    )
    message = fb.table(fb.read(_U32, 0))
    version = fb.scalar(message, 0, _I16, 0)
    if version != METADATA_V5:
        raise fb.error(f"metadata version {version}, expected {METADATA_V5} (V5)")
    header_type = fb.scalar(message, 1, _U8, 0)
    if header_type != HEADER_RECORD_BATCH:
        raise fb.error(f"message type {header_type}, expected {HEADER_RECORD_BATCH} (RecordBatch)")
    body_len = fb.scalar(message, 3, _I64, 0)
    if body_len != len(payload) - body_start:
        raise fb.error(f"body length {body_len}, but {len(payload) - body_start} bytes follow")
    batch_at = fb.ref(message, 2)
    if not batch_at:
        raise fb.error("no RecordBatch header")
    batch = fb.table(batch_at)
    rows = fb.scalar(batch, 0, _I64, 0)
    if not 1 <= rows <= MAX_DECODED_BATCH // MIN_ROW_BYTES:
        raise fb.error(f"impossible row count {rows}")
    _, nodes = fb.vector(batch, 1, 16)
    buffers_at, buffers = fb.vector(batch, 2, 16)
    schema = _SCHEMAS.get((nodes, buffers))
    if schema is None:
        raise fb.error(
            f"{nodes} field nodes and {buffers} buffers, RECORD_SCHEMA has {FIELD_NODES} "
            f"and {BUFFERS}"
        )
    if fb.vector(batch, 4, 8)[1]:
        raise fb.error("variadic buffer counts present; RECORD_SCHEMA has no view types")
    compression_at = fb.ref(batch, 3)
    codec = None
    if compression_at:
        compression = fb.table(compression_at)
        codec = fb.scalar(compression, 0, _I8, CODEC_LZ4_FRAME)
        method = fb.scalar(compression, 1, _I8, 0)
        if codec not in CODEC_NAMES or method != 0:
            raise fb.error(f"unsupported body compression codec {codec} method {method}")
    decoded = 0
    spans = struct.unpack_from(f"<{2 * buffers}q", fb.data, buffers_at)
    for i in range(buffers):
        off, length = spans[2 * i], spans[2 * i + 1]
        if off < 0 or length < 0 or off + length > body_len:
            raise fb.error(f"buffer {i} ({off}, {length}) lies outside the {body_len}-byte body")
        if not compression_at or length == 0:
            decoded += length
            continue
        if length < 8:
            raise fail(
                f"compressed buffer {i} of {length} bytes has no length prefix", body_start + off
            )
        declared = _I64.unpack_from(payload, body_start + off)[0]
        if declared < -1:
            raise fail(f"compressed buffer {i} declares {declared} bytes", body_start + off)
        decoded += length - 8 if declared == -1 else declared
    if decoded > MAX_DECODED_BATCH:
        raise fb.error(f"decoded body of {decoded} bytes exceeds the {MAX_DECODED_BATCH}-byte cap")
    if check_expansion and decoded > MAX_EXPANSION * len(payload):
        raise fb.error(
            f"decoded body of {decoded} bytes is more than {MAX_EXPANSION} times the "
            f"{len(payload)}-byte payload"
        )
    return Message(int(rows), decoded, None if codec is None else CODEC_NAMES[codec], schema)


def _schema_message(schema: pa.Schema) -> bytes:
    """A schema's IPC schema message: prefixed to a batch frame's payload it makes an IPC
    stream (FORMAT.md 6.2), which Arrow reads with options (some fields, no threads)."""
    sink = pa.BufferOutputStream()
    pa.ipc.new_stream(sink, schema).close()
    return bytes(sink.getvalue().to_pybytes()[:-8])  # without the end-of-stream marker


_SCHEMA_MESSAGES = {len(s): _schema_message(s) for s in (RECORD_SCHEMA, RECORD_SCHEMA_V1)}
_ON_THIS_THREAD = pa.ipc.IpcReadOptions(use_threads=False)
_KEPT_READERS_LIMIT = 16


class _PayloadFeed:
    """The file under a kept stream reader: it hands out the loaded bytes by memoryview
    slices (Arrow keeps them without a copy) and ends at their end, so a message can
    never reach past its payload."""

    closed = False

    def __init__(self, first: bytes) -> None:
        self.load(first)

    def load(self, payload: Payload) -> None:
        self._view = memoryview(payload)
        self._at = 0

    def unread(self) -> int:
        """How many loaded bytes the reader has not taken; then lets go of them."""
        left = len(self._view) - self._at
        self.load(b"")
        return left

    def read(self, n: int = -1) -> memoryview:
        start = self._at
        self._at = len(self._view) if n < 0 else min(len(self._view), start + n)
        return self._view[start : self._at]

    def close(self) -> None:
        pass


def _buffer_count(t: pa.DataType) -> int:
    """How many buffers an IPC message holds for a column of type ``t`` (of the types
    RECORD_SCHEMA has): validity and data, offsets too for binary and strings, a list's
    and a struct's own and their children's."""
    if pa.types.is_list(t):
        return 2 + _buffer_count(t.value_type)
    if pa.types.is_struct(t):
        return 1 + sum(_buffer_count(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_binary(t) or pa.types.is_string(t):
        return 3
    return 2


def wanted_buffers(schema: pa.Schema, fields: Sequence[int] | None) -> int:
    """The buffers of a message of ``schema`` that decoding ``fields`` (top-level
    indices; None for all) reads, as a bit mask of buffer indices."""
    mask, at = 0, 0
    for i, field in enumerate(schema):
        n = _buffer_count(field.type)
        if fields is None or i in fields:
            mask |= ((1 << n) - 1) << at
        at += n
    return mask


class _KeptReader:
    """One Arrow stream reader kept open over a ``_PayloadFeed``, fed one batch message
    at a time: the schema message is parsed once, not once a batch, and no payload is
    copied behind it. ``wanted``: the buffers its options decode (``wanted_buffers``).

    Invariant: the feed is empty between reads. A read that fails or leaves bytes of its
    payload unread makes the caller drop this reader (``read_compressed``), so a reader
    left mid-message is never fed again."""

    def __init__(self, schema: pa.Schema, options: pa.ipc.IpcReadOptions) -> None:
        self._feed = _PayloadFeed(_SCHEMA_MESSAGES[len(schema)])
        source = pa.PythonFile(self._feed, mode="r")
        self._reader = pa.ipc.open_stream(source, options=options)
        self._feed.unread()
        self.wanted = wanted_buffers(schema, options.included_fields or None)

    def read(self, payload: Payload) -> pa.RecordBatch:
        self._feed.load(payload)
        batch = self._reader.read_next_batch()
        left = self._feed.unread()
        if left:
            raise ValueError(f"the message ends {left} bytes before its payload's end")
        return batch


class _ThreadsReaders(threading.local):
    """Each thread's kept readers, by schema (its field count) and read options."""

    def __init__(self) -> None:
        self.readers: dict[tuple[int, pa.ipc.IpcReadOptions], _KeptReader] = {}


_kept = _ThreadsReaders()


def read_compressed(
    payload: Payload, schema: pa.Schema, options: pa.ipc.IpcReadOptions, codec: str | None
) -> pa.RecordBatch:
    """The batch of a compressed batch message of ``schema`` (RECORD_SCHEMA or its
    version 1) in ``codec``, decoded with ``options``: the callers' options decompress on
    the calling thread (``use_threads=False``). Arrow's default hands each buffer to its
    thread pool and waits: for the batches of a job, up to a MiB, that handoff cost more
    than the decompression (a sixth of a job's thread on the L0 shape at 64 partitions,
    in condition-variable signals and waits), and the job's other threads keep the second
    core busy.

    A zstd message's wanted buffers are first decompressed by the thread's kept zstd
    context (``_sections.zstd_stored_as_is``, where the build had libzstd): Arrow's reader
    makes a context for every buffer, about 190 µs a batch more than lz4 on a virtual
    machine (bench.codec_calls). Where that declines, Arrow decodes the payload as it is.

    Each thread keeps one stream reader per schema and options (``_KeptReader``). Opening
    one a batch, over a copy of the payload behind the schema message, cost 10-30 µs of
    a 30-150 µs decode (bench.ipc_decode); its batches also shared no schema object, so
    concatenating them fingerprinted every batch's schema. Any error drops the thread's
    reader and is raised as Arrow raised it."""
    readers = _kept.readers
    key = (len(schema), options)
    reader = readers.get(key)
    if reader is None:
        if len(readers) >= _KEPT_READERS_LIMIT:
            readers.clear()
        reader = readers[key] = _KeptReader(schema, options)
    if codec == "zstd":
        stored = _sections.zstd_stored_as_is(payload, reader.wanted, MAX_DECODED_BATCH)
        if stored is not None:
            payload = stored
    try:
        return reader.read(payload)
    except BaseException:
        del readers[key]
        raise


def decode_batch(
    payload: Payload,
    position: int,
    object_name: str,
    version: int = FORMAT_VERSION,
    role: Role = None,
    ordered: bool = True,
) -> pa.RecordBatch:
    """The batch of ``decode_measured``, without its stats."""
    return decode_measured(payload, position, object_name, version, role, ordered)[0]


def decode_measured(
    payload: Payload,
    position: int,
    object_name: str,
    version: int = FORMAT_VERSION,
    role: Role = None,
    ordered: bool = True,
) -> tuple[pa.RecordBatch, BatchStats]:
    """Decodes a batch frame's payload whose CRC the caller has verified; ``version`` is
    the file's format version; ``ordered``: see ``batches.batch_problem``.

    Returns a non-empty batch of RECORD_SCHEMA that passed Arrow's full validation and
    ``batches.checked_stats``, with its stats; anything else is a FormatError at
    ``position`` (the payload's start).
    A version-1 batch without delete_horizon gets a null one. ``role``: the reader's part
    in a pair reading the same bytes (``fileformat.second_read``); a second reader takes
    what the first accepted for an equal payload.
    """

    def measured() -> tuple[tuple[pa.RecordBatch, BatchStats], bool]:
        batch, shared = _decoded(payload, position, object_name, version)
        found = checked_stats(batch, ordered)
        if isinstance(found, str):
            raise FormatError(object_name, position, f"invalid batch: {found}")
        return (batch, found), shared

    return MEMO.decoded(("batch", version, ordered), payload, role, measured)


def decode_unchecked(
    payload: Payload,
    position: int,
    object_name: str,
    version: int = FORMAT_VERSION,
    role: Role = None,
) -> pa.RecordBatch:
    """The batch of ``decode_measured`` before ``checked_stats``: Arrow's full validation
    and the rows its message gives, for a caller that checks its records itself in the
    same pass as it measures them (a shared block's whole batch: ``check_block_batch``).
    ``role`` as for ``decode_measured``: a second reader takes the first's decode of an
    equal payload, and checks it again."""
    return MEMO.decoded(
        ("unchecked", version),
        payload,
        role,
        lambda: _decoded(payload, position, object_name, version),
    )


def _decoded(
    payload: Payload, position: int, object_name: str, version: int
) -> tuple[pa.RecordBatch, bool]:
    """The batch of RECORD_SCHEMA a payload decodes to, validated by Arrow and with the
    rows its message gives, and whether a job's first reader may leave it for the second
    (``MEMO.decoded``): only if the message is uncompressed, since a compressed batch's
    first reader decodes only some of its columns."""
    m = inspect_message(payload, position, object_name, version=version)
    try:
        if m.compressed:
            batch = read_compressed(payload, m.schema, _ON_THIS_THREAD, m.codec)
        else:
            batch = pa.ipc.read_record_batch(pa.py_buffer(payload), m.schema)
        batch.validate(full=True)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, MemoryError, ...
        raise FormatError(object_name, position, f"Arrow cannot decode batch: {exc}") from None
    if batch.num_rows != m.rows:
        raise FormatError(object_name, position, f"invalid batch: {batch.num_rows} rows decoded")
    return with_horizons(batch), not m.compressed  # of RECORD_SCHEMA: m.schema decoded it


_HORIZON_FIELD = RECORD_SCHEMA.field("delete_horizon")


def with_horizons(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch``, given a null ``delete_horizon`` column last if it has none (a batch of
    RECORD_SCHEMA_V1, or some of its columns)."""
    if _HORIZON_FIELD.name in batch.schema.names:
        return batch
    return batch.append_column(_HORIZON_FIELD, pa.nulls(batch.num_rows, pa.int64()))
