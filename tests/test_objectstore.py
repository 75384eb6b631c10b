"""The ObjectStore contract, held by both LocalStore and S3Store (the ``store`` fixture)."""

from __future__ import annotations

import random
import threading

import pytest

from compactor.objectstore import (
    ObjectNotFound,
    ObjectStore,
    PreconditionFailed,
    StoreError,
)
from compactor.objectstore.s3 import S3Store

MiB = 1 << 20


def blob(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


def part_size(store: ObjectStore) -> int:
    """Multipart part size of the store (the local store has none; use the S3 test size)."""
    return store.part_size if isinstance(store, S3Store) else 256 * 1024


# -- put / get / head / list / delete ---------------------------------------------------


def test_put_get_head(store: ObjectStore) -> None:
    etag = store.put("dir/sub/obj.bin", b"hello world")
    data, got_etag = store.get("dir/sub/obj.bin")
    assert (data, got_etag) == (b"hello world", etag)
    info = store.head("dir/sub/obj.bin")
    assert (info.key, info.size, info.etag) == ("dir/sub/obj.bin", 11, etag)


def test_unusual_key_characters(store: ObjectStore) -> None:
    keys = ["sp ace/ü+%20=&?.bin", "tab\there", "a/ümlaut#1"]
    for i, key in enumerate(keys):
        store.put(key, str(i).encode())
    assert [i.key for i in store.list()] == sorted(keys)
    for i, key in enumerate(keys):
        assert store.get(key)[0] == str(i).encode()
        with store.open_stream(key) as s:
            assert s.read(5) == str(i).encode()
    assert [i.key for i in store.list("a/ü")] == ["a/ümlaut#1"]


def test_put_overwrites_and_changes_etag(store: ObjectStore) -> None:
    first = store.put("k", b"one")
    second = store.put("k", b"two!")
    assert first != second
    assert store.get("k") == (b"two!", second)
    assert store.head("k").size == 4


def test_empty_object(store: ObjectStore) -> None:
    etag = store.put("empty", b"")
    assert store.get("empty") == (b"", etag)
    assert store.head("empty").size == 0
    assert store.get_range("empty", -10, 0) == b""
    assert store.get_range("empty", 0, 10) == b""
    with store.open_stream("empty") as s:
        assert (s.size, s.etag) == (0, etag)
        assert s.read(5) == b""


def test_missing_objects_raise_object_not_found(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound, match="nope"):
        store.get("nope")
    with pytest.raises(ObjectNotFound, match="nope"):
        store.head("nope")
    with pytest.raises(ObjectNotFound, match="nope"):
        store.get_range("nope", 0, 10)
    with pytest.raises(ObjectNotFound, match="nope"):
        store.open_stream("nope")


def test_list_sorted_with_prefixes(store: ObjectStore) -> None:
    keys = ["b/2", "a/b/c", "a/bc", "a/b/d/e", "z", "a/a", "b/10"]
    for i, key in enumerate(keys):
        store.put(key, b"x" * i)
    listed = list(store.list())
    assert [i.key for i in listed] == sorted(keys)
    assert {i.key: i.size for i in listed} == {k: i for i, k in enumerate(keys)}
    assert all(i.etag == store.head(i.key).etag for i in listed)
    assert [i.key for i in store.list("a/b")] == ["a/b/c", "a/b/d/e", "a/bc"]
    assert [i.key for i in store.list("a/b/")] == ["a/b/c", "a/b/d/e"]
    assert [i.key for i in store.list("b/1")] == ["b/10"]
    assert list(store.list("nothing/here")) == []


def test_delete(store: ObjectStore) -> None:
    store.put("d/one", b"1")
    store.put("d/two", b"2")
    store.delete("d/one")
    store.delete("d/one")  # missing: not an error
    store.delete("never/existed")
    with pytest.raises(ObjectNotFound):
        store.head("d/one")
    assert [i.key for i in store.list()] == ["d/two"]
    store.delete("d/two")
    assert list(store.list()) == []
    store.put("d/one", b"again")  # the directory (if any) is usable again
    assert store.get("d/one")[0] == b"again"


@pytest.mark.parametrize(
    "key", ["", "/abs", "a//b", "a/", "../x", "a/../b", "./a", "a/.", ".compactor-tmp/x", "a\x00b"]
)
def test_invalid_keys_are_rejected(store: ObjectStore, key: str) -> None:
    with pytest.raises(StoreError, match="invalid key"):
        store.put(key, b"x")
    with pytest.raises(StoreError, match="invalid key"):
        store.get(key)


# -- ranges ----------------------------------------------------------------------------


def test_get_range_and_suffix(store: ObjectStore) -> None:
    data = blob(10_000, seed=1)
    store.put("r", data)
    assert store.get_range("r", 0, 1) == data[:1]
    assert store.get_range("r", 123, 4567) == data[123:4567]
    assert store.get_range("r", 9_990, 20_000) == data[9_990:]  # clipped at the end
    assert store.get_range("r", 10_000, 10_010) == b""  # starts at the end
    assert store.get_range("r", 50, 50) == b""
    assert store.get_range("r", -1, 0) == data[-1:]
    assert store.get_range("r", -4096, 0) == data[-4096:]
    assert store.get_range("r", -20_000, 0) == data  # suffix longer than the object


# -- streams ---------------------------------------------------------------------------


def test_stream_exact_reads_in_odd_chunks(store: ObjectStore) -> None:
    data = blob(3 * MiB + 12_345, seed=2)
    etag = store.put("big", data)
    sizes = [1, 7, 4093, 65_537, 1_000_003, 3, 2 * MiB + 1]
    out = bytearray()
    with store.open_stream("big") as s:
        assert (s.key, s.etag, s.size, s.position, s.resumes) == ("big", etag, len(data), 0, 0)
        i = 0
        while True:
            n = sizes[i % len(sizes)]
            i += 1
            chunk = s.read(n)
            remaining = len(data) - len(out)
            assert len(chunk) == min(n, remaining)  # exact, short only at the end
            out += chunk
            assert s.position == len(out)
            if not chunk:
                break
        assert s.read(10) == b""
        assert s.resumes == 0
    assert bytes(out) == data


def test_stream_readinto_mixed_with_reads(store: ObjectStore) -> None:
    """``readinto`` fills the whole view (short only at the end) from where ``read`` left
    off, and the position follows both."""
    data = blob(MiB + 777, seed=6)
    store.put("ri", data)
    out = bytearray()
    with store.open_stream("ri", buffer_size=64 << 10) as s:
        for i, n in enumerate([3, 200_001, 12, 70_000, MiB]):
            if i % 2:
                buf = bytearray(n)
                got = s.readinto(memoryview(buf))
                assert got == min(n, len(data) - len(out))
                out += buf[:got]
            else:
                out += s.read(n)
            assert s.position == len(out)
        assert s.readinto(memoryview(bytearray(5))) == 0
    assert bytes(out) == data


def test_stream_from_offset_and_read_rest(store: ObjectStore) -> None:
    data = blob(2 * MiB + 3, seed=3)
    store.put("o", data)
    with store.open_stream("o", start=MiB + 1) as s:
        assert s.position == MiB + 1
        assert s.size == len(data)
        assert s.read(5) == data[MiB + 1 : MiB + 6]
        assert s.read(-1) == data[MiB + 6 :]
        assert s.position == len(data)
    with store.open_stream("o", start=len(data)) as s:
        assert s.read(100) == b""
    with pytest.raises(StoreError, match="past the end"):
        store.open_stream("o", start=len(data) + 1)


def test_stream_read_after_close_fails(store: ObjectStore) -> None:
    store.put("c", b"abc")
    s = store.open_stream("c")
    s.close()
    s.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        s.read(1)


def test_stream_keeps_reading_the_version_it_opened(store: ObjectStore) -> None:
    old = blob(3 * MiB, seed=4)
    store.put("v", old)
    with store.open_stream("v") as s:
        first = s.read(10)
        store.put("v", blob(3 * MiB, seed=5))
        rest = s.read(-1)
    assert first + rest == old


# -- GET counting ------------------------------------------------------------------------


def test_get_counter_one_per_request(store: ObjectStore) -> None:
    store.put("g", blob(2 * MiB, seed=6))
    store.gets.reset()
    with store.open_stream("g") as s:
        while s.read(1000):
            pass
    assert store.gets.get("g") == 1
    store.get("g")
    store.get_range("g", 10, 20)
    store.get_range("g", -5, 0)
    store.head("g")  # not a GET
    list(store.list())
    assert store.gets.get("g") == 4
    assert store.gets.snapshot() == {"g": 4}


# -- conditional writes ----------------------------------------------------------------


def test_if_none_match(store: ObjectStore) -> None:
    etag = store.put("c", b"first", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.put("c", b"second", if_none_match=True)
    assert store.get("c") == (b"first", etag)


def test_if_match(store: ObjectStore) -> None:
    stale = store.put("m", b"v1")
    current = store.put("m", b"v2")
    with pytest.raises(PreconditionFailed):
        store.put("m", b"v3", if_match=stale)
    assert store.get("m") == (b"v2", current)
    newer = store.put("m", b"v3", if_match=current)
    assert store.get("m") == (b"v3", newer)
    with pytest.raises(PreconditionFailed):
        store.put("absent", b"x", if_match=current)
    with pytest.raises(ObjectNotFound):
        store.head("absent")


def test_both_conditions_is_a_usage_error(store: ObjectStore) -> None:
    with pytest.raises(ValueError):
        store.put("x", b"", if_none_match=True, if_match="e")


def test_concurrent_if_match_exactly_one_winner_per_round(store: ObjectStore) -> None:
    threads, rounds = 4, 6
    store.put("round", b"0")
    barrier = threading.Barrier(threads)
    wins = [[0] * threads for _ in range(rounds)]
    errors: list[BaseException] = []

    def contender(me: int) -> None:
        try:
            for r in range(rounds):
                barrier.wait()
                etag = store.head("round").etag
                barrier.wait()  # everyone holds the same ETag before anyone writes
                try:
                    store.put("round", f"{r + 1}:{me}".encode(), if_match=etag)
                    wins[r][me] = 1
                except PreconditionFailed:
                    pass
                barrier.wait()
        except BaseException as e:
            errors.append(e)
            barrier.abort()

    workers = [threading.Thread(target=contender, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert not errors
    assert [sum(r) for r in wins] == [1] * rounds
    winner = wins[-1].index(1)
    assert store.get("round")[0] == f"{rounds}:{winner}".encode()


def test_concurrent_cas_counter_loses_no_update(store: ObjectStore) -> None:
    threads, increments = 4, 8
    store.put("counter", b"0")
    errors: list[BaseException] = []

    def incrementer() -> None:
        try:
            for _ in range(increments):
                while True:
                    data, etag = store.get("counter")
                    try:
                        store.put("counter", str(int(data) + 1).encode(), if_match=etag)
                        break
                    except PreconditionFailed:
                        continue
        except BaseException as e:
            errors.append(e)

    workers = [threading.Thread(target=incrementer) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert not errors
    assert store.get("counter")[0] == str(threads * increments).encode()


# -- multipart -------------------------------------------------------------------------


def test_multipart_several_parts(store: ObjectStore) -> None:
    size = part_size(store)
    data = blob(3 * size + size // 2 + 17, seed=7)
    with store.open_multipart("mp/out") as w:
        for off in range(0, len(data), 100_003):  # writes not aligned to parts
            w.write(memoryview(data)[off : off + 100_003])
        assert w.bytes_written == len(data)
        with pytest.raises(ObjectNotFound):
            store.head("mp/out")  # nothing visible before complete
        etag = w.complete()
    assert store.get("mp/out") == (data, etag)
    assert store.head("mp/out").etag == etag


def test_multipart_small_and_empty(store: ObjectStore) -> None:
    with store.open_multipart("small") as w:
        w.write(b"tiny")
        etag = w.complete()
    assert store.get("small") == (b"tiny", etag)
    with store.open_multipart("empty", if_none_match=True) as w:
        etag = w.complete()
    assert store.get("empty") == (b"", etag)


def test_multipart_abort_leaves_nothing(store: ObjectStore) -> None:
    size = part_size(store)
    w = store.open_multipart("aborted")
    w.write(blob(2 * size + 5, seed=8))
    w.abort()
    w.abort()  # idempotent
    with pytest.raises(StoreError):
        w.write(b"more")
    with pytest.raises(ObjectNotFound):
        store.head("aborted")
    assert list(store.list()) == []


def test_multipart_context_manager_aborts_on_exception(store: ObjectStore) -> None:
    size = part_size(store)
    with pytest.raises(RuntimeError), store.open_multipart("boom") as w:
        w.write(blob(2 * size, seed=9))
        raise RuntimeError("job failed")
    with store.open_multipart("forgotten") as w:  # left without complete: aborted too
        w.write(b"x")
    assert list(store.list()) == []


@pytest.mark.parametrize("parts", [0, 3])
def test_multipart_if_none_match_on_existing_key(store: ObjectStore, parts: int) -> None:
    etag = store.put("exists", b"original")
    size = part_size(store)
    with pytest.raises(PreconditionFailed), store.open_multipart("exists", if_none_match=True) as w:
        w.write(blob(parts * size + 11, seed=10))
        w.complete()
    assert store.get("exists") == (b"original", etag)
    assert [i.key for i in store.list()] == ["exists"]


def test_multipart_if_none_match_on_new_key(store: ObjectStore) -> None:
    data = blob(2 * part_size(store) + 1, seed=11)
    with store.open_multipart("fresh", if_none_match=True) as w:
        w.write(data)
        etag = w.complete()
        assert w.complete() == etag  # idempotent
    assert store.get("fresh") == (data, etag)


def test_get_counter_holds_a_key_only_while_it_is_watched(store: ObjectStore) -> None:
    """A worker follows the catalog for months: its counter must not keep an entry for
    every log version and input it ever read, only for the keys a job watches."""
    store.put("g", b"x")
    store.put("h", b"y")
    before = store.gets.total
    store.get("g")
    assert store.gets.snapshot() == {} and store.gets.total == before + 1
    store.gets.watch(["g"])
    store.gets.watch(["g"])  # a second watcher of the same key
    store.get("g")
    store.get("h")
    assert store.gets.snapshot() == {"g": 1}
    store.gets.unwatch(["g"])
    assert store.gets.get("g") == 1  # still watched once
    store.gets.unwatch(["g"])
    assert store.gets.snapshot() == {}
    assert store.gets.total == before + 3
