"""The small-batch fast paths (files of many small sections) agree with the general ones."""

from __future__ import annotations

import io
import random
import struct
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import test_worker_model
from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_shared_blocks import stats_of_records
from worker_scenarios import add_file, make_topics

import compactor.fileformat.batches as batches
import compactor.fileformat.bitmap as bitmap
import compactor.fileformat.ipc as ipc
import compactor.fileformat.read_frames as read_frames
import compactor.fileformat.reader as reader
import compactor.worker.gather as gather
import compactor.worker.masks as masks
import compactor.worker.runner as runner
from compactor.catalog import Catalog
from compactor.fileformat import (
    FileWriter,
    FormatError,
    Record,
    SectionReader,
    StreamReader,
    _sections,
    batch_to_records,
    records_to_batch,
)
from compactor.fileformat.batches import RECORD_OVERHEAD, filter_batch
from compactor.fileformat.bitmap import OffsetSetBuilder
from compactor.fileformat.framing import (
    FRAME_HEADER,
    MAX_DECODED_BATCH,
    MAX_EXPANSION,
    EncodedFrame,
)
from compactor.fileformat.records import RECORD_SCHEMA, RECORD_SCHEMA_V1
from compactor.objectstore import LocalStore
from compactor.planner.job import Job, JobInput
from compactor.worker.gather import GroupRows, gathered, weighed, weight
from compactor.worker.group import by_partition
from compactor.worker.kernel import KeyBuffer
from compactor.worker.merge import SectionMerge
from compactor.worker.runner import run_job


def _records(rnd: random.Random, n: int, headers: bool) -> list[Record]:
    out = []
    offset = rnd.randrange(0, 1000)
    for _ in range(n):
        offset += rnd.choice([1, 1, 2, 7])
        out.append(
            Record(
                offset,
                rnd.randrange(-5, 1 << 41),
                None if rnd.random() < 0.2 else rnd.randbytes(rnd.randrange(0, 9)),
                None if rnd.random() < 0.3 else rnd.randbytes(rnd.randrange(0, 30)),
                (("h", rnd.randbytes(3)), ("e", None)) if headers and rnd.random() < 0.5 else (),
                None if rnd.random() < 0.7 else rnd.randrange(0, 100),
            )
        )
    return out


def _batches(seed: int) -> list[pa.RecordBatch]:
    """Batches of all kinds, whole and sliced (slices start mid-byte of the bitmaps)."""
    rnd = random.Random(seed)
    out = []
    for n in (1, 2, 9, 40, 64, 65, 200):
        for headers in (False, True):
            batch = records_to_batch(_records(rnd, n, headers))
            out.append(batch)
            if n > 4:
                start = rnd.randrange(1, n // 2)
                out.append(batch.slice(start, rnd.randrange(1, n - start + 1)))
    return out


def _general_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (batches, bitmap, masks):  # each binds fileformat.batches.SMALL_BATCH
        monkeypatch.setattr(module, "SMALL_BATCH", 0)


@pytest.mark.parametrize("seed", range(3))
def test_batch_helpers_agree_with_the_general_paths(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = _batches(seed)
    fast = [
        (batches.batch_problem(b), batches.batch_stats(b), batches.logical_bytes(b)) for b in cases
    ]
    _general_paths(monkeypatch)
    general = [
        (batches.batch_problem(b), batches.batch_stats(b), batches.logical_bytes(b)) for b in cases
    ]
    assert fast == general
    for b, (problem, stats, size) in zip(cases, fast, strict=True):
        assert problem is None
        assert stats == stats_of_records(batch_to_records(b))
        assert size == sum(
            16
            + len(r.key or b"")
            + len(r.value or b"")
            + sum(len(k.encode()) + len(v or b"") for k, v in r.headers)
            for r in batch_to_records(b)
        )


def _nulls_spanning_bytes(rnd: random.Random, n: int, nulls: int) -> pa.Array:
    """A binary array of ``n`` values whose ``nulls`` null slots each span some bytes
    (Arrow allows it; the writers here never make it), sliced from a longer one."""
    pad = rnd.randrange(0, 9)
    total = n + pad
    null_at = set(rnd.sample(range(pad, total), nulls))
    values = [None if i in null_at else rnd.randbytes(rnd.randrange(0, 6)) for i in range(total)]
    return _binary_spanning_nulls(rnd, values).slice(pad, n)


def _binary_spanning_nulls(rnd: random.Random, values: list[bytes | None]) -> pa.Array:
    """A binary array of ``values`` whose null slots each span some bytes of the data
    buffer (Arrow allows it; the writers here never make it)."""
    offsets, data = [0], b""
    for v in values:
        data += rnd.randbytes(rnd.randrange(0, 6)) if v is None else v
        offsets.append(len(data))
    valid = sum((v is not None) << i for i, v in enumerate(values))
    buffers = [
        pa.py_buffer(valid.to_bytes((len(values) + 7) // 8 or 1, "little")),
        pa.py_buffer(struct.pack(f"<{len(offsets)}i", *offsets)),
        pa.py_buffer(data),
    ]
    return pa.Array.from_buffers(pa.binary(), len(values), buffers)


@pytest.mark.parametrize("nulls", [1, 5, 32, 33, 90])
def test_a_columns_lengths_leave_out_what_its_null_slots_span(
    nulls: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rnd = random.Random(nulls)
    arrays = [_nulls_spanning_bytes(rnd, n, min(nulls, n)) for n in (40, 64, 65, 300, 1000)]
    truth = [sum(len(v) for v in a.to_pylist() if v is not None) for a in arrays]
    assert [batches._sum_lengths(a) for a in arrays] == truth
    _general_paths(monkeypatch)
    assert [batches._sum_lengths(a) for a in arrays] == truth


def _logical_size(r: Record) -> int:
    return (
        RECORD_OVERHEAD
        + len(r.key or b"")
        + len(r.value or b"")
        + sum(len(k.encode()) + len(v or b"") for k, v in r.headers)
    )


def _with_shifted_header_items(batch: pa.RecordBatch, rnd: random.Random) -> pa.RecordBatch:
    """The same records, their headers' items a slice of a longer struct array (an offset
    of its own, under the list's), and their values with null slots that span bytes."""
    headers = batch.column("headers")
    items = headers.flatten()
    pad = rnd.randrange(1, 5)
    padding = pa.array([{"key": "p", "value": b"pp"}] * pad, items.type)
    shifted = pa.concat_arrays([padding, items]).slice(pad)
    starts = [o - headers.offsets[0].as_py() for o in headers.offsets.to_pylist()]
    lists = pa.ListArray.from_arrays(pa.array(starts, pa.int32()), shifted)
    spanning = _binary_spanning_nulls(rnd, batch.column("value").to_pylist())
    columns = {name: batch.column(name) for name in batch.schema.names}
    columns["headers"], columns["value"] = lists.cast(headers.type), spanning
    return pa.RecordBatch.from_arrays(list(columns.values()), schema=batch.schema)


@pytest.mark.parametrize("seed", range(3))
def test_record_sizes_are_each_records_logical_size(seed: int) -> None:
    """``batches.record_sizes`` (one compiled pass over the columns' offsets) is each
    record's logical size as the format defines it, for batches whole and sliced
    mid-byte, null keys, values and header values, header items with an offset of their
    own and null values whose slots span bytes."""
    rnd = random.Random(seed)
    cases = _batches(seed)
    cases += [_with_shifted_header_items(b, rnd) for b in cases]
    for b in cases:
        b.validate(full=True)
        expected = [_logical_size(r) for r in batch_to_records(b)]
        assert batches.record_sizes(b).to_pylist() == expected
        assert sum(expected) == batches.logical_bytes(b)


def test_decreasing_offsets_are_found_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(4)
    for n in (2, 40, 100):
        batch = records_to_batch(_records(rnd, n, False))
        swapped = batch.take(pa.array([*range(n - 2), n - 1, n - 2]))
        repeated = batch.take(pa.array([*range(n - 1), n - 2]))
        for bad in (swapped, repeated):
            assert batches.batch_problem(bad) == "offsets do not strictly increase"
    _general_paths(monkeypatch)
    assert batches.batch_problem(swapped) == "offsets do not strictly increase"


def test_filter_batch_equals_filter() -> None:
    rnd = random.Random(1)
    for batch in _batches(1):
        for _ in range(3):
            mask = pa.array([rnd.random() < 0.5 for _ in range(batch.num_rows)])
            out = batches.filter_batch(batch, mask)
            assert out.schema.equals(RECORD_SCHEMA)
            out.validate(full=True)
            assert out.equals(batch.filter(mask))
    assert batches.filter_batch(_batches(2)[0], pa.array([False])).num_rows == 0


def _stream_writers(batch: pa.RecordBatch) -> bytes:
    """What pyarrow's stream writer without compression writes for ``batch``: its
    stream less the schema message before it and the end-of-stream marker after it."""
    empty = pa.BufferOutputStream()
    pa.ipc.new_stream(empty, RECORD_SCHEMA).close()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, RECORD_SCHEMA) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes()[len(empty.getvalue()) - 8 : -8])


def test_plain_encoding_is_the_stream_writers() -> None:
    for batch in _batches(2):
        assert ipc._encode_plain(batch) == _stream_writers(batch)


def test_compiled_encodings_hold_the_records() -> None:
    """The compiled encoder (``_encoder``, behind ``ipc._StreamEncoder``), on the calling
    thread and on its own, gives the same bytes, which decode to the batch, whole or
    sliced; uncompressed and unsliced, the stream writer's bytes."""
    for codec in (None, "zstd", "lz4"):
        here, ahead = ipc._StreamEncoder(codec), ipc._StreamEncoder(codec)
        encodings = [(batch, ahead.submit(batch)) for batch in _batches(3)]
        for batch, encoding in encodings:
            payload = here.encode(batch)
            assert encoding.result() == payload
            decoded = pa.ipc.read_record_batch(pa.ipc.read_message(payload), RECORD_SCHEMA)
            assert decoded.equals(batch)
            if codec is None and not any(column.offset for column in batch.columns):
                assert payload == _stream_writers(batch)
        ahead.close()


@pytest.mark.parametrize("seed", range(3))
def test_offset_set_builder_paths_agree(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(seed)

    def build(runs: list[pa.Array]) -> bitmap.OffsetSet:
        builder = OffsetSetBuilder(runs[0][0].as_py())
        for arr in runs:
            builder.add(arr, arr[0].as_py(), arr[-1].as_py())
        return builder.build()

    offsets = sorted(rnd.sample(range(1 << 33), 300)) + [(1 << 34) + i for i in range(5)]
    arr = pa.array(offsets, pa.int64())
    runs = [arr.slice(0, 40), arr.slice(40, 1), arr.slice(41, 100), arr.slice(141)]
    fast = build(runs)
    _general_paths(monkeypatch)
    assert fast == build(runs)
    assert list(fast) == offsets
    assert fast.kind == bitmap.KIND_ROARING64


def test_message_check_memo_never_accepts_what_a_fresh_check_rejects() -> None:
    batch = _batches(3)[4]
    payload = ipc._encode_plain(batch)
    assert ipc.check_message(payload, 0, "f") == ipc.check_message(payload, 0, "f")
    assert ipc.decode_batch(payload, 0, "f").equals(batch)
    # Same metadata, one byte more or less of body: rejected, memo or not.
    for bad in (payload + b"\0", payload[:-1]):
        with pytest.raises(FormatError, match="body length"):
            ipc.check_message(bad, 0, "f")
    # A corrupt body the metadata check cannot see still fails Arrow's validation.
    meta_len = struct.unpack_from("<i", payload, 4)[0]
    body = 8 + meta_len
    rejected = 0
    for at in range(body, len(payload) - 4, 4):
        bad = payload[:at] + struct.pack("<i", 10**8) + payload[at + 4 :]
        try:
            ipc.decode_batch(bad, 0, "f")
        except FormatError:
            rejected += 1
    assert rejected > 0
    assert ipc.check_message(payload, 0, "f")[0] == batch.num_rows


def arrow_message(batch: pa.RecordBatch, codec: str | None) -> bytes:
    """``batch``'s encapsulated IPC message as pyarrow's own stream writer writes it,
    compressed with ``codec``."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=codec)
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    messages = pa.ipc.MessageReader.open_stream(sink.getvalue())
    messages.read_next_message()  # the schema's
    return bytes(messages.read_next_message().serialize().to_pybytes())


@settings(max_examples=400, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    codec=st.sampled_from([None, "lz4", "zstd"]),
    v1=st.booleans(),
    flips=st.lists(
        st.tuples(
            st.integers(0, 1 << 20), st.sampled_from(["xor", 0, 1, 0xFF]), st.integers(1, 255)
        ),
        max_size=3,
    ),
    in_metadata=st.booleans(),
    cut=st.integers(-12, 12),
    expansion=st.booleans(),
)
def test_the_compiled_message_check_accepts_exactly_what_the_field_by_field_one_does(
    seed: int,
    codec: str | None,
    v1: bool,
    flips: list[tuple[int, str | int, int]],
    in_metadata: bool,
    cut: int,
    expansion: bool,
) -> None:
    """``_sections.usual_message`` accepts an Arrow message exactly when
    ``ipc._check_message_fields`` does, with the same rows, decoded bytes, compression
    and schema: on valid messages of both schemas and every codec, with bytes changed
    (mostly in the metadata, where the checks look), cut or padded."""
    rnd = random.Random(seed)
    batch = records_to_batch(_records(rnd, rnd.choice([1, 7, 300]), rnd.random() < 0.5))
    if v1:
        batch = pa.RecordBatch.from_arrays(batch.columns[:5], schema=RECORD_SCHEMA_V1)
    payload = bytearray(arrow_message(batch, codec))
    meta_end = 8 + struct.unpack_from("<i", payload, 4)[0]
    for at, how, xor in flips:  # a bit pattern changed, or a byte set to 0, 1 or 0xFF
        at %= meta_end if in_metadata else len(payload)
        payload[at] = payload[at] ^ xor if how == "xor" else int(how)
    data = bytes(payload[: len(payload) + cut] if cut < 0 else payload + bytes(cut))
    _both_checks(data, expansion)
    if not flips and not cut:
        usual = _sections.usual_message(data, expansion, MAX_DECODED_BATCH, MAX_EXPANSION)
        assert usual is not None and usual[0] == batch.num_rows


def test_the_compiled_message_check_knows_the_messages_ipc_names() -> None:
    """``_sections.c`` checks a message against constants of its own: they are
    ``fileformat.ipc``'s (RECORD_SCHEMA's field nodes and buffers, the codecs)."""
    for name in (
        "METADATA_V5",
        "HEADER_RECORD_BATCH",
        "FIELD_NODES",
        "BUFFERS",
        "FIELD_NODES_V1",
        "BUFFERS_V1",
        "CODEC_LZ4_FRAME",
        "CODEC_ZSTD",
        "MIN_ROW_BYTES",
    ):
        assert getattr(_sections, name) == getattr(ipc, name), name


def _both_checks(data: bytes, expansion: bool) -> None:
    """The compiled message check and the field-by-field one agree on ``data``."""
    usual = _sections.usual_message(data, expansion, MAX_DECODED_BATCH, MAX_EXPANSION)
    try:
        m = ipc._check_message_fields(data, 0, "f", expansion)
    except FormatError:
        assert usual is None
        return
    nodes = ipc.FIELD_NODES_V1 if m.schema is RECORD_SCHEMA_V1 else ipc.FIELD_NODES
    codec = {name: number for number, name in ipc.CODEC_NAMES.items()}.get(m.codec)
    assert usual == (m.rows, m.decoded, codec, nodes)


@pytest.mark.parametrize("codec", [None, "lz4", "zstd"])
@pytest.mark.parametrize("v1", [False, True])
def test_the_compiled_message_check_agrees_on_every_byte_of_the_metadata_changed(
    codec: str | None, v1: bool
) -> None:
    """Every byte of a message's prefix, metadata and first body bytes, set in turn to 0,
    1, 0xFF or with its lowest or highest bit flipped, and the first buffers' length
    prefixes set to -2, -1, 0 or 2^62: the compiled check and the field-by-field one accept
    the same messages, with the same findings."""
    batch = records_to_batch(_records(random.Random(7), 3, True))
    if v1:
        batch = pa.RecordBatch.from_arrays(batch.columns[:5], schema=RECORD_SCHEMA_V1)
    payload = arrow_message(batch, codec)
    meta_end = 8 + struct.unpack_from("<i", payload, 4)[0]
    for at in range(min(len(payload), meta_end + 64)):
        for value in {0, 1, 0xFF, payload[at] ^ 1, payload[at] ^ 0x80}:
            changed = payload[:at] + bytes([value]) + payload[at + 1 :]
            _both_checks(changed, expansion=True)
    for at in range(meta_end, min(len(payload) - 8, meta_end + 64), 8):  # buffers' prefixes
        for declared in (-2, -1, 0, 1 << 62):
            _both_checks(payload[:at] + struct.pack("<q", declared) + payload[at + 8 :], True)
    _both_checks(payload, expansion=False)


def test_partial_decode_of_a_plain_batch_is_the_whole_one_selected() -> None:
    for batch in _batches(5):
        payload = ipc._encode_plain(batch)
        whole = ipc.decode_batch(payload, 0, "f")
        for fields in (("key",), ("timestamp", "headers"), ("value", "delete_horizon")):
            part = reader.decode_fields(payload, 0, "f", fields)
            names = [n for n in RECORD_SCHEMA.names if n in fields or n == "offset"]
            assert part.schema.names == names
            assert part.equals(whole.select(names))


def test_gathered_copies_only_batches_lighter_than_its_bound() -> None:
    """A pointer's batches of GATHER_BELOW or more pass as they are, between the runs of
    lighter ones gathered up to GATHER_BYTES."""
    value = b"v" * 1000

    def batch(first: int, n: int) -> pa.RecordBatch:
        return records_to_batch([Record(first + i, 0, b"k", value, ()) for i in range(n)])

    light = gather.GATHER_BELOW // 1100  # records of a batch just under the bound
    parts = [batch(i * 10_000, light) for i in range(3)]
    heavy = batch(30_000, gather.GATHER_BELOW // 1000)
    parts += [heavy] + [batch(40_000 + i * 10_000, light) for i in range(6)]
    out = list(gathered(weighed(iter(parts))))
    assert pa.Table.from_batches(out).equals(pa.Table.from_batches(parts))
    assert any(b is heavy for b in out)
    assert [b.num_rows for b in out] == [3 * light, heavy.num_rows, 4 * light, 2 * light]
    assert all(weight(b) < gather.GATHER_BYTES for b in out)


def test_gathered_lets_go_of_a_gathered_batchs_pieces_before_handing_it_on() -> None:
    """While the caller works on a gathered batch, the pieces it was made of are not
    held as well (they weigh as much again)."""
    value = b"v" * 1000
    pieces: list[weakref.ref[pa.RecordBatch]] = []

    def source() -> Iterator[pa.RecordBatch]:
        for i in range(3):
            piece = records_to_batch([Record(i * 10 + j, 0, b"k", value, ()) for j in range(10)])
            pieces.append(weakref.ref(piece))
            yield piece
            del piece  # only the pointer's own references are in question
        yield records_to_batch(
            [Record(100 + j, 0, b"k", value, ()) for j in range(gather.GATHER_BELOW // 1000)]
        )

    out = gathered(weighed(source()))
    joined = next(out)
    assert joined.num_rows == 30 and len(pieces) == 3
    assert all(ref() is None for ref in pieces)


def _any_frame(frame: EncodedFrame) -> bool:
    return True


def test_gathered_passes_a_batch_in_a_frame_its_output_may_write_as_it_is() -> None:
    """A batch lighter than GATHER_BELOW, read in a frame kept for it, is gathered with
    its neighbours unless ``as_read`` accepts the frame (its output may write it as it
    was read)."""
    value = b"v" * 1000

    def batch(first: int, n: int) -> pa.RecordBatch:
        return records_to_batch([Record(first + i, 0, b"k", value, ()) for i in range(n)])

    framed = batch(10_000, read_frames.KEPT_FROM // 1000 + 1)
    assert weight(framed) < gather.GATHER_BELOW
    frame = EncodedFrame(b"the frame it was read in", 7)
    read_frames.keep_frame(framed, frame)
    parts = [batch(0, 10), framed, batch(20_000, 10)]
    seen: list[EncodedFrame] = []

    def as_read(answer: bool) -> Callable[[EncodedFrame], bool]:
        def accepts(f: EncodedFrame) -> bool:
            seen.append(f)
            return answer

        return accepts

    kept = list(gathered(weighed(iter(parts)), as_read=as_read(True)))
    assert [b.num_rows for b in kept] == [10, framed.num_rows, 10]
    assert kept[1] is framed and seen == [frame]
    mixed = list(gathered(weighed(iter(parts)), as_read=as_read(False)))
    assert [b.num_rows for b in mixed] == [framed.num_rows + 20]
    assert pa.Table.from_batches(mixed).equals(pa.Table.from_batches(parts))
    assert [b.num_rows for b in gathered(weighed(iter(parts)))] == [framed.num_rows + 20]


def test_coalesced_keeps_every_record_in_order() -> None:
    rnd = random.Random(6)
    parts = []
    for _ in range(60):
        batch = records_to_batch(_records(rnd, rnd.randrange(0, 50), True))
        parts.append(batch)
    big = records_to_batch(
        [Record(i, 0, b"k", b"x" * 1000, ()) for i in range(runner.COALESCE_BYTES // 1000 + 1)]
    )
    parts[30:30] = [big, big.slice(0, 0)]
    out = list(runner.coalesced(iter(parts), _any_frame))
    assert all(b.num_rows for b in out)
    assert pa.Table.from_batches(out).equals(pa.Table.from_batches(parts))
    assert len(out) < len([p for p in parts if p.num_rows])
    for b in out:
        if b is not big:
            assert runner._gathered_size(b) < runner.COALESCE_BYTES


NOW = test_worker_model.NOW


@pytest.mark.parametrize("files", [3, 12])
def test_a_partitions_survivors_are_written_in_batches_of_the_writers_size(
    files: int, tmp_path: Path
) -> None:
    """A partition's survivors come one batch per input batch; gathered up to
    COALESCE_BYTES, twelve inputs' worth of 40 KiB each is written as one batch per MiB,
    not twelve, with every record kept in order."""
    store = LocalStore(str(tmp_path))
    catalog = Catalog(store)
    make_topics(catalog, {"t": (1, {"cleanup.policy": "compact"})})
    per_file = 300
    written = []
    for f in range(files):
        records = [
            Record(f * per_file + i, NOW, b"k%06d" % (f * per_file + i), b"v" * 120, ())
            for i in range(per_file)
        ]
        live = add_file(store, catalog, f"f{f}", {("t", 0): records})
        written.append(live)
    job = Job(
        inputs=tuple(JobInput(f.id, f.key, f.size) for f in written),
        output_level=2,
        deduplicate=True,
    )
    report = run_job(store, catalog, job, KeyBuffer(1 << 20), now_ms=NOW + 1)
    assert report.committed and len(report.outputs) == 1
    data, _ = store.get(report.outputs[0])
    stream = StreamReader(io.BytesIO(data), object_name="out", size=len(data))
    batches_out = []
    for section in stream.sections():
        assert (section.topic, section.partition) == ("t", 0)
        batches_out += section.batches()
    logical = sum(batches.logical_bytes(b) for b in batches_out)
    assert logical > files * per_file * 120
    assert len(batches_out) == -(-logical // runner.COALESCE_BYTES)  # one per MiB, rounded up
    offsets = [o for b in batches_out for o in b.column("offset").to_pylist()]
    assert offsets == list(range(files * per_file))


def test_coalesced_gathers_filtered_batches_without_headers() -> None:
    """Survivors of a small section without headers carry a slice of a cached column of
    empty lists: sized by their whole buffers, each would count as 4 KiB and few would be
    gathered (each written batch costs a frame and ~600 bytes of Arrow metadata)."""
    rnd = random.Random(8)
    parts = []
    for i in range(25):
        batch = records_to_batch(
            [Record(10 * i + j, 0, b"k%d" % j, b"v" * 10, ()) for j in range(8)]
        )
        parts.append(filter_batch(batch, pa.array([rnd.random() < 0.6 for _ in range(8)])))
    out = list(runner.coalesced(iter(parts), _any_frame))
    assert pa.Table.from_batches(out).equals(pa.Table.from_batches(parts))
    assert sum(b.nbytes for b in parts) < runner.COALESCE_BYTES
    assert sum(runner._gathered_size(b) for b in parts) < runner.COALESCE_BYTES
    assert len(out) == 1


def test_many_small_sections_round_trip() -> None:
    rnd = random.Random(7)
    sink = io.BytesIO()
    writer = FileWriter(sink, object_name="f", max_batch_bytes=400)
    expected = {}
    for p in range(300):
        recs = _records(rnd, rnd.randrange(1, 12), p % 3 == 0)
        expected[p] = recs
        writer.write_section("t", p, [records_to_batch(recs)])
    writer.finish()
    data = sink.getvalue()
    got = {}
    stream = StreamReader(io.BytesIO(data), object_name="f", size=len(data), verify=True)
    for section in stream.sections():
        got[section.partition] = [r for b in section.batches() for r in batch_to_records(b)]
    assert got == expected
    # Every frame header of the file, corrupted, is still caught.
    pos = 16
    checked = 0
    while pos < len(data) - 20 and checked < 50:
        tag, length, _ = FRAME_HEADER.unpack_from(data, pos)
        bad = data[:pos] + b"X" + data[pos + 1 :]
        with pytest.raises(FormatError):
            s = StreamReader(io.BytesIO(bad), object_name="f", size=len(bad))
            for section in s.sections():
                for _ in section.batches():
                    pass
        pos += FRAME_HEADER.size + length + (8 if tag == b"STRL" else 0)
        checked += 1


def test_worker_model_on_the_general_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker against the Kafka model with every small-batch path turned off."""
    _general_paths(monkeypatch)
    test_worker_model.test_worker_matches_kafka_model()


def test_a_slice_of_a_shared_block_weighs_its_own_rows() -> None:
    """Phase 1 and phase 2 gather a partition's small batches; a section of a shared block
    is a slice of the block's batch, and must weigh its rows, not the block's buffers."""
    block = records_to_batch([Record(i, 0, b"k%06d" % i, b"v" * 100, ()) for i in range(4000)])
    part = block.slice(1000, 5)
    assert weight(part) == 5 * (RECORD_OVERHEAD + 7 + 100)
    assert weight(block) == 4000 * (RECORD_OVERHEAD + 7 + 100)
    parts = [block.slice(i * 5, 5) for i in range(40)]
    out = list(gathered(weighed(iter(parts))))
    assert len(out) == 1
    assert pa.Table.from_batches(out).equals(pa.Table.from_batches(parts))


@pytest.mark.parametrize("way", ["by partition", "by input", "merge", "verifying merge"])
@pytest.mark.parametrize("inputs", [1, 3])
@pytest.mark.parametrize("share_below", [0, 600, 1 << 20])
def test_group_rows_are_each_inputs_rows_input_after_input(
    inputs: int, share_below: int, way: str
) -> None:
    """``GroupRows`` (a group's partitions, each from every input) gives the rows input
    after input, oldest first, each input's in partition order, each row labelled with
    its partition's ordinal; ``by_partition`` then gives each partition's rows, partitions
    in group order, and within one its inputs' rows oldest input first; whatever order
    they were taken in: section by section partition after partition, or input after
    input (which the merge's runs are), or by ``SectionMerge.take_upto``
    (shared sections as runs of their blocks, framed ones and a verifying stream's through
    their readers); whether shared sections of one or many blocks, framed ones, or both;
    with a few columns or all. ``pending_shared`` lists, from the pointer's head, the
    partitions whose sections are all shared, with their logical bytes together, looking
    no further than its budget needs."""
    rnd = random.Random(inputs * 7 + share_below)
    files = []
    for _ in range(inputs):
        sink = io.BytesIO()
        writer = FileWriter(
            sink,
            object_name="f",
            max_batch_bytes=400,
            share_below=share_below,
            block_bytes=max(share_below, 2000),
        )
        for p in range(40):
            recs = _records(rnd, rnd.randrange(1, 9), p % 4 == 0)
            writer.write_section("t", p, [records_to_batch(recs)])
        writer.finish()
        files.append(sink.getvalue())

    def pointer(data: bytes) -> Iterator[SectionReader]:
        return StreamReader(io.BytesIO(data), object_name="f", size=len(data)).sections()

    def reader(data: bytes) -> StreamReader:
        return StreamReader(
            io.BytesIO(data), object_name="f", size=len(data), verify=way == "verifying merge"
        )

    sizes = [
        {s.partition: s.logical_bytes for s in reader(data).sections() if s.skip() is None}
        for data in files
    ]
    shared = [
        {p: share_below > 0 and size < share_below for p, size in sizes[i].items()}
        for i in range(inputs)
    ]
    for fields in (None, ("offset", "key")):
        alone = [{s.partition: list(s.batches(fields)) for s in pointer(data)} for data in files]
        pointers = [pointer(data) for data in files]
        merge = SectionMerge([reader(data) for data in files])
        for group in range(0, 40, 7):  # groups of 7 partitions: runs start mid-block
            members = range(group, min(group + 7, 40))
            keys = [(b"t", p) for p in members]  # an ordinal is a place here
            rows, expected, grouped, labels = GroupRows(fields), [], [], []
            for p in members:
                expected += [b for i in range(inputs) for b in alone[i][p]]
            for i in range(inputs):
                for p in members:
                    grouped += alone[i][p]
                    labels += [p - group] * sum(b.num_rows for b in alone[i][p])
            if way.startswith("by"):
                taken = [(i, p) for p in members for i in range(inputs)]
                if way == "by input":
                    taken.sort()  # each input's stream is still read in order
                for i, p in taken:
                    section = next(pointers[i])
                    assert section.partition == p
                    assert rows.add(i, section, p - group) == sum(b.num_rows for b in alone[i][p])
            else:
                assert merge.next_partition() == ("t", group)
                pending = merge.pending_shared(1 << 30)
                # a budget a section fills: every input looks at its head alone
                assert merge.pending_shared(1) == pending[:1]
                all_shared = [p for p in members if all(s[p] for s in shared)]
                assert [(k, t, p) for k, t, p, _ in pending][: len(all_shared)] == [
                    ((b"t", p), "t", p) for p in all_shared[: len(pending)]
                ]
                for _, _, p, size in pending:
                    assert all(s[p] for s in shared)
                    assert size == sum(sizes[i][p] for i in range(inputs))
                if share_below > 1000:  # every section shared: the group's first is pending
                    assert pending[0][2] == group
                merge.take_upto((b"t", members[-1]), rows, keys)
            got, got_labels, counts = rows.batch(len(members))
            assert got.equals(pa.concat_batches(grouped))
            assert got_labels.to_pylist() == labels
            assert by_partition(got, got_labels, len(members)).equals(pa.concat_batches(expected))
            assert counts == [
                sum(b.num_rows for i in range(inputs) for b in alone[i][p]) for p in members
            ]
        assert merge.next_partition() is None or way.startswith("by")


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32), inputs=st.integers(1, 5), data=st.data())
def test_pending_shared_stops_at_the_first_partition_that_reaches_the_budget(
    seed: int, inputs: int, data: st.DataObject
) -> None:
    """Whatever the inputs' densities (each holds its own subset of the partitions, with
    sections of its own sizes, in blocks of its own size, some framed), ``pending_shared``
    with a budget lists the shortest prefix of its unbounded answer that weighs the
    budget, or all of it if it weighs less; and the unbounded answer holds exactly the
    partitions from the head up to the first one with a framed section in any input,
    however many blocks of each input that spans, each with its sections' logical bytes
    over every input. Beyond the blocks at its heads, the pointer then holds only blocks
    the budget reached into, and one more per input. Checked at every step of a walk
    that takes runs of partitions, as a group's walk does."""
    rnd = random.Random(seed)
    files, sizes, framed = [], [], []
    for _ in range(inputs):
        sink = io.BytesIO()
        density = rnd.choice([1, 2, 8, 30])
        block = rnd.choice([600, 2000, 8000])
        writer = FileWriter(sink, object_name="f", share_below=block // 2, block_bytes=block)
        held = sorted(rnd.sample(range(60), rnd.randrange(1, 60)))
        for p in held:
            writer.write_section("t", p, [records_to_batch(_records(rnd, density, False))])
        writer.finish()
        data_ = sink.getvalue()
        files.append(data_)
        rd = StreamReader(io.BytesIO(data_), object_name="f", size=len(data_))
        sections = [s for s in rd.sections() if s.skip() is None]
        sizes.append({s.partition: s.logical_bytes or 0 for s in sections})
        framed.append({s.partition for s in sections if s.logical_bytes is None})
    held = sorted({p for s in sizes for p in s})
    everything = [(b"t", p) for p in range(60)]

    def fresh() -> SectionMerge:
        return SectionMerge(
            [StreamReader(io.BytesIO(d), object_name="f", size=len(d)) for d in files]
        )

    merge, steps = fresh(), 0
    while (at := merge.next_partition()) is not None and steps < 40:
        steps += 1
        model = []
        for p in (p for p in held if p >= at[1]):
            if any(p in f for f in framed):
                break
            model.append(((b"t", p), "t", p, sum(s.get(p, 0) for s in sizes)))
        budget = data.draw(st.integers(0, sum(e[3] for e in model) + 10), label="budget")
        total, expected = 0, []
        for entry in model:
            if expected and total >= budget:
                break
            expected.append(entry)
            total += entry[3]
        # a pointer that has not looked ahead yet, at the same place, with the budget
        twin = fresh()
        if at[1] > held[0]:
            twin.take_upto((b"t", at[1] - 1), GroupRows(("offset", "key")), everything)
        got = twin.pending_shared(budget)
        assert got == (expected if total >= budget else model)
        for ahead in twin._ahead:  # read ahead: blocks the answer reaches into, one more
            assert all(t is not None and t.keys[-1] <= got[-1][0] for _, t in ahead[:-1])
        unbounded = merge.pending_shared(1 << 62)
        assert unbounded == model
        assert merge.pending_shared(budget) == got
        if not unbounded:  # a framed section at the head: taken through its reader
            last = (b"t", at[1])
        else:
            last = unbounded[data.draw(st.integers(0, len(unbounded) - 1), label="take")][0]
        merge.take_upto(last, GroupRows(("offset", "key")), everything)


@settings(max_examples=500, deadline=None)
@given(
    base=st.integers(0, 2**62),
    span=st.sampled_from([1, 2, 3, 4, 6, 40, 4096, 5000, 65_536, 65_537, 1 << 20]),
    data=st.data(),
)
def test_a_small_bitmap_compiled_is_the_builders_byte_for_byte(
    base: int, span: int, data: st.DataObject
) -> None:
    """``bitmap.small_bitmap`` gives exactly the bytes ``OffsetSetBuilder`` serializes
    (array or run container, CRoaring's choice at every tie), or None where it does not
    cover the offsets (over 4,096, 2^16 or more above the base)."""
    rnd = random.Random(data.draw(st.integers(0, 2**32)))
    shape = data.draw(st.sampled_from(["dense", "runs", "sparse"]))
    n = data.draw(st.integers(1, min(span, 5000)))
    if shape == "dense":
        relative = list(range(n))
    elif shape == "runs":
        relative, at = [], 0
        while len(relative) < n and at < span:
            length = rnd.randint(1, 5)
            relative += range(at, min(at + length, span))
            at += length + rnd.randint(1, 4)
        relative = relative[:n]
    else:
        relative = sorted({0} | set(rnd.sample(range(span), n - 1)))
    if base + relative[-1] > 2**63 - 1:
        base = 0
    offsets = pa.array([base + r for r in relative], pa.int64())
    builder = OffsetSetBuilder(base)
    builder.add_column(offsets)
    made = bitmap.small_bitmap(offsets, base)
    covered = len(relative) <= 4096 and relative[-1] < 65_536
    event(f"{shape}, covered={covered}")
    assert (made is not None) == covered
    if made is not None:
        assert made == builder.build().serialize()
        sliced = pa.array([-1, *offsets.to_pylist()], pa.int64()).slice(1)  # an array offset
        assert made == bitmap.small_bitmap(sliced, base)
        held = bitmap.OffsetSet.made(bitmap.KIND_ROARING32, made, base, base + relative[-1])
        assert (held.first(), held.last(), held.serialize()) == (base, base + relative[-1], made)
        assert held == builder.build() and list(held) == offsets.to_pylist()
