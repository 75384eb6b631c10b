"""The compiled key buffer (worker.kernel) against hashlib and a dict model."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from compactor.worker.kernel import (
    ENTRY_BYTES,
    HASH_IMPL,
    HASH_IMPLS,
    HAVE_AVX2,
    HAVE_AVX512,
    HAVE_OPENSSL,
    START_SLOTS,
    KeyBuffer,
    hash_keys,
    member_bits,
    run_labels,
    salted_keys,
    sha512_256,
    survivor_order,
)

IMPLS = list(HASH_IMPLS)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def ref(data: bytes) -> bytes:
    return hashlib.new("sha512_256", data).digest()


# --- SHA-512/256 -------------------------------------------------------------------


BOUNDARY_LENGTHS = [0, 1, 36, 111, 112, 127, 128, 129, 239, 240, 255, 256, 10_000]


@pytest.mark.parametrize("impl", IMPLS)
def test_sha512_256_matches_hashlib(impl: str) -> None:
    rng = random.Random(7)
    lengths = BOUNDARY_LENGTHS + [rng.randrange(0, 600) for _ in range(300)]
    for n in lengths:
        for _ in range(3):
            data = rng.randbytes(n)
            assert sha512_256(data, impl) == ref(data), n


def test_default_impl_is_the_fastest_available() -> None:
    fastest = (
        "avx512"
        if HAVE_AVX512
        else "avx2"
        if HAVE_AVX2
        else "openssl"
        if HAVE_OPENSSL
        else "portable"
    )
    assert fastest == HASH_IMPL
    assert KeyBuffer(ENTRY_BYTES).hash_impl == HASH_IMPL


@pytest.mark.parametrize(
    ("impl", "have", "flag", "name"),
    [("avx512", HAVE_AVX512, "avx512f", "AVX-512"), ("avx2", HAVE_AVX2, "avx2", "AVX2")],
)
def test_simd_lanes_are_offered_exactly_where_the_cpu_runs_them(
    impl: str, have: bool, flag: str, name: str
) -> None:
    flags = ""
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    if flags:
        assert have == (flag in flags.split(":", 1)[1].split())
    if have:
        assert sha512_256(b"k" * 36, impl) == ref(b"k" * 36)
        assert KeyBuffer(ENTRY_BYTES, hash_impl=impl).hash_impl == impl
    else:
        with pytest.raises(ValueError, match=name):
            sha512_256(b"k", impl)


@pytest.mark.parametrize("impl", IMPLS)
def test_hash_keys_of_every_short_length_in_every_lane(impl: str) -> None:
    """Keys of 0..130 bytes in runs that leave every count of keys (1..8) for the last
    eight-key group, with null keys between: each hash is its key's, whatever its lane."""
    rng = random.Random(11)
    for run in range(1, 40):
        values: list[bytes | None] = [
            None if rng.random() < 0.1 else rng.randbytes(rng.randrange(131)) for _ in range(run)
        ]
        expected = b"".join(bytes(32) if v is None else ref(v) for v in values)
        assert hash_keys(pa.array(values, pa.binary()), threads=1, impl=impl) == expected


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_hash_keys_matches_hashlib(impl: str, threads: int) -> None:
    rng = random.Random(threads)
    values: list[bytes | None] = [
        None if rng.random() < 0.05 else rng.randbytes(rng.choice(BOUNDARY_LENGTHS[:-1]))
        for _ in range(3000)
    ]
    expected = b"".join(bytes(32) if v is None else ref(v) for v in values)
    for typ in (pa.binary(), pa.large_binary()):
        arr = pa.array(values, typ)
        assert hash_keys(arr, threads=threads, impl=impl) == expected
        sliced = arr.slice(17, 2000)
        assert hash_keys(sliced, threads=threads, impl=impl) == expected[17 * 32 : 2017 * 32]
    text = pa.array(["", "a", "é" * 40, None], pa.string())
    assert hash_keys(text, impl=impl) == b"".join(
        [ref(b""), ref(b"a"), ref(("é" * 40).encode()), bytes(32)]
    )


def test_hash_keys_rejects_non_binary() -> None:
    with pytest.raises(TypeError):
        hash_keys(pa.array([1, 2], pa.int64()))
    with pytest.raises(TypeError):
        hash_keys([b"a"])


# --- the dict model ----------------------------------------------------------------


@dataclass
class Rec:
    key: bytes | None
    offset: int
    value: int | None  # timestamp (timestamp strategy) or header value (None: no header)
    eligible: bool


@dataclass
class ModelWindow:
    """What one window of the key buffer must hold, in plain Python."""

    strategy: str
    capacity: int
    base: int | None
    value_base: int | None = None
    win: dict[bytes, Rec] = field(default_factory=dict)

    def rank(self, r: Rec) -> tuple[int, ...]:
        if self.strategy == "offset":
            return (r.offset,)
        if self.strategy == "timestamp":
            assert r.value is not None
            return (r.value, r.offset)
        if r.value is None:
            return (0, 0, r.offset)
        return (1, r.value, r.offset)

    def insert(self, recs: list[Rec], start: int, end: int) -> int:
        """The index of the first record not consumed (mirrors the documented rule)."""
        for i in range(start, end):
            r = recs[i]
            if r.key is None or not r.eligible:
                continue
            if self.base is None:
                self.base = r.offset
            if not 0 <= r.offset - self.base < 2**32:
                if self.win:
                    return i
                self.base = r.offset  # an empty window moves its base
            if self.strategy != "offset" and r.value is not None:
                if self.value_base is None:
                    self.value_base = r.value
                if not INT32_MIN <= r.value - self.value_base <= INT32_MAX:
                    return i
            old = self.win.get(r.key)
            if old is None:
                if len(self.win) >= self.capacity:
                    return i
                self.win[r.key] = r
            elif self.rank(r) > self.rank(old):
                self.win[r.key] = r
        return end

    def winners(self) -> list[int]:
        return sorted(r.offset for r in self.win.values())


def arrays(recs: list[Rec], pad: int) -> dict[str, pa.Array]:
    """The records as Arrow arrays, each a slice at offset ``pad`` of a longer array."""
    filler = [Rec(b"filler", 0, 0, True)] * pad
    allrecs = filler + recs + filler
    n = len(recs)
    return {
        "keys": pa.array([r.key for r in allrecs], pa.binary()).slice(pad, n),
        "offsets": pa.array([r.offset for r in allrecs], pa.int64()).slice(pad, n),
        "values": pa.array([r.value for r in allrecs], pa.int64()).slice(pad, n),
        "eligible": pa.array([r.eligible for r in allrecs], pa.bool_()).slice(pad, n),
    }


def check_window(
    kb: KeyBuffer, model: ModelWindow, recs: list[Rec], arr: dict[str, pa.Array]
) -> None:
    assert kb.size == len(model.win)
    assert kb.winners().to_pylist() == model.winners()
    for key, r in model.win.items():
        assert kb.lookup(key) == r.offset
        entry = kb.lookup_entry(key)
        expected_value = None if model.strategy == "offset" else r.value
        assert entry == (r.offset, expected_value)
    # The keep-set: phase 2 keeps record i iff not eligible or its offset won.
    winners = set(model.winners())
    offsets = arr["offsets"]
    assert kb.keep_mask(offsets).to_pylist() == [r.offset in winners for r in recs]
    backwards = pa.array(offsets.to_pylist()[::-1], pa.int64())
    assert kb.keep_mask(backwards).to_pylist() == [r.offset in winners for r in recs[::-1]]
    eligible = pc.and_(pc.is_valid(arr["keys"]), arr["eligible"])
    expected = [not (r.eligible and r.key is not None) or r.offset in winners for r in recs]
    assert kb.keep_mask(offsets, eligible).to_pylist() == expected


def run_windows(
    recs: list[Rec],
    strategy: str,
    entries: int,
    splits: list[int],
    pad: int,
    explicit_base: bool,
    threads: int = 2,
    start_slots: int = START_SLOTS,
) -> int:
    """Feeds the records through a KeyBuffer of ``entries`` slots in batches, closing a
    window wherever insert stops, and checks every window against the model. Returns the
    number of windows."""
    arr = arrays(recs, pad)
    kb = KeyBuffer(
        entries * ENTRY_BYTES + pad % ENTRY_BYTES, threads=threads, start_slots=start_slots
    )
    assert kb.slots == entries
    capacity = kb.capacity
    assert capacity == max(1, entries - entries // 20)
    values = None if strategy == "offset" else arr["values"]
    n = len(recs)
    bounds = sorted({0, n, *(s % (n + 1) for s in splits)})
    pos = 0
    wstart = 0
    windows = 0
    prev_keys: list[bytes] = []

    def open_window(at: int) -> ModelWindow:
        base = recs[at].offset if explicit_base and at < n else None
        kb.reset(strategy, base)
        for k in prev_keys:  # nothing leaks from the previous window
            assert kb.lookup(k) is None
        assert kb.size == 0
        return ModelWindow(strategy, capacity, base)

    model = open_window(0)
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        pos = lo
        while pos < hi:
            was_empty = kb.size == 0 and not model.win
            expect = model.insert(recs, pos, hi)
            got = kb.insert(arr["keys"], arr["offsets"], values, None, arr["eligible"], pos, hi)
            assert got == expect
            if was_empty:
                assert got > pos  # progress: an empty window always takes a record
            assert kb.active_slots <= entries
            if kb.active_slots < entries:  # grown only as far as the keys held needed
                assert kb.size <= kb.active_slots - kb.active_slots // 20
            if got == hi:
                pos = hi
                continue
            # The window closes at `got`: check it, then phase 2 "catches up" and we reset.
            r = recs[got]
            full = r.key not in model.win and len(model.win) == capacity
            event(f"{strategy}: window closed {'full' if full else 'unrepresentable'}")
            check_window(
                kb,
                model,
                recs[wstart:got],
                {k: a.slice(wstart, got - wstart) for k, a in arr.items()},
            )
            wstart = got
            windows += 1
            prev_keys = list(model.win)
            model = open_window(got)
            pos = got
    check_window(kb, model, recs[wstart:], {k: a.slice(wstart) for k, a in arr.items()})
    stats = kb.stats()
    for kind in ("keepset_bitmaps", "keepset_sorted"):
        if stats[kind]:
            event(f"keep-set built as {kind}")
    if stats["grows"]:
        event("a window's table grew")
    return windows + 1


@st.composite
def workloads(draw: st.DrawFn) -> tuple[list[Rec], str]:
    strategy = draw(st.sampled_from(["offset", "timestamp", "header"]))
    pool = draw(st.lists(st.binary(min_size=0, max_size=40), min_size=1, max_size=30, unique=True))
    n = draw(st.integers(0, 120))
    wide = draw(st.booleans())  # values and offset gaps wide enough to close windows early
    # Sparse offsets (gaps up to 2^22) make the keep-set a sorted list, not a bitmap.
    gap = st.integers(1, 2**22) if draw(st.booleans()) else st.integers(1, 3)
    offset = draw(st.integers(0, 2**40))
    recs = []
    for _ in range(n):
        offset += draw(st.one_of(gap, st.just(2**32)) if wide else gap)
        key = None if draw(st.integers(0, 9)) == 0 else draw(st.sampled_from(pool))
        if wide:
            value_st = st.one_of(st.integers(INT64_MIN, INT64_MAX), st.integers(-5, 5))
        else:
            value_st = st.integers(-5, 5)
        value: int | None = draw(value_st)
        if strategy == "header" and draw(st.integers(0, 3)) == 0:
            value = None
        eligible = draw(st.integers(0, 5)) > 0
        recs.append(Rec(key, offset, value, eligible))
    return recs, strategy


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workloads(),
    st.integers(1, 40),
    st.lists(st.integers(0, 200), max_size=6),
    st.integers(0, 50),
    st.booleans(),
    st.sampled_from([1, 2, 3, 5, START_SLOTS]),
)
def test_model(
    workload: tuple[list[Rec], str],
    entries: int,
    splits: list[int],
    pad: int,
    explicit: bool,
    start_slots: int,
) -> None:
    """Small ``start_slots`` make windows grow their table in place, many times over."""
    recs, strategy = workload
    run_windows(recs, strategy, entries, splits, pad, explicit, start_slots=start_slots)


def trace_windows(
    recs: list[Rec],
    strategy: str,
    entries: int,
    threads: int | list[int],
    start_slots: int = START_SLOTS,
) -> list[tuple[int, bytes]]:
    """(closing index, raw winners) of every window, with no model: to compare builds of
    the same run with different thread counts (a list: the buffer's ``threads`` set to
    each in turn, window by window) or tables that start at other sizes."""
    arr = arrays(recs, 0)
    cycle = threads if isinstance(threads, list) else [threads]
    kb = KeyBuffer(entries * ENTRY_BYTES, threads=cycle[0], start_slots=start_slots)
    values = None if strategy == "offset" else arr["values"]
    out = []
    pos, n = 0, len(recs)
    while True:
        kb.threads = cycle[len(out) % len(cycle)]
        kb.reset(strategy)
        pos = kb.insert(arr["keys"], arr["offsets"], values, None, arr["eligible"], pos)
        out.append((pos, kb._kb.winners()))
        if pos == n:
            return out


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from(["offset", "timestamp", "header"]))
def test_model_many_records_many_threads(seed: int, strategy: str) -> None:
    """Batches larger than a hashing segment (65,536 records) and windows closing
    mid-block; 1, 2 and 3 hashing threads give the same windows."""
    rng = random.Random(seed)
    n = rng.choice([600, 5000, 70_000])
    pool = [rng.randbytes(rng.randrange(0, 40)) for _ in range(rng.choice([50, 3000]))]
    recs = [
        Rec(
            None if rng.random() < 0.02 else rng.choice(pool),
            1000 + 2 * i,
            None if strategy == "header" and rng.random() < 0.3 else rng.randrange(-50, 50),
            rng.random() < 0.95,
        )
        for i in range(n)
    ]
    entries = rng.choice([300, 5000] if n > 5000 else [1, 7, 300, 5000])
    start = rng.choice([1, 16, 100])
    run_windows(recs, strategy, entries, [], 3, bool(seed % 2), threads=2, start_slots=start)
    trace = trace_windows(recs, strategy, entries, threads=2)
    assert trace_windows(recs, strategy, entries, threads=1) == trace
    assert trace_windows(recs, strategy, entries, threads=3) == trace
    assert trace_windows(recs, strategy, entries, threads=[1, 3, 2]) == trace
    assert trace_windows(recs, strategy, entries, threads=2, start_slots=start) == trace


def test_strategies_by_hand() -> None:
    keys = pa.array([b"a", b"b", None, b"a", b"c", b"b", b"c"])
    offsets = pa.array([10, 11, 12, 13, 14, 15, 16], pa.int64())
    kb = KeyBuffer(1 << 16)
    kb.reset("offset", 10)
    assert kb.insert(keys, offsets) == 7
    assert kb.winners().to_pylist() == [13, 15, 16]
    kb.reset("timestamp")
    ts = pa.array([5, 9, 0, 3, 7, 9, 7], pa.int64())
    assert kb.insert(keys, offsets, ts) == 7
    assert kb.winners().to_pylist() == [10, 15, 16]  # b: tie at 9 -> higher offset
    kb.reset("header")
    hv = pa.array([5, None, 0, 3, 1, 2, 1], pa.int64())  # null = no header
    assert kb.insert(keys, offsets, hv) == 7
    assert kb.winners().to_pylist() == [10, 15, 16]  # b: header beats none; c: tie
    kb.reset("header")
    has = pa.array([False, False, True, False, False, False, False])
    assert kb.insert(keys, offsets, hv, has) == 7
    assert kb.winners().to_pylist() == [13, 15, 16]  # nobody has the header: offsets


def test_one_entry_buffer_holds_exactly_one_key() -> None:
    kb = KeyBuffer(ENTRY_BYTES)
    assert (kb.slots, kb.capacity) == (1, 1)
    keys = pa.array([b"x", b"x", b"y", b"x"])
    offsets = pa.array([0, 1, 2, 3], pa.int64())
    kb.reset("offset")
    assert kb.insert(keys, offsets) == 2
    assert kb.winners().to_pylist() == [1]
    assert kb.insert(keys, offsets, start=2) == 2  # full: y does not fit
    kb.reset("offset", 2)
    assert kb.insert(keys, offsets, start=2) == 3
    assert kb.lookup(b"y") == 2 and kb.lookup(b"x") is None


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        KeyBuffer(ENTRY_BYTES - 1)
    with pytest.raises(ValueError):
        KeyBuffer(ENTRY_BYTES, threads=0)
    kb = KeyBuffer(1 << 12)
    for threads in (0, 9):
        with pytest.raises(ValueError):
            kb.threads = threads
    assert kb.threads == 2
    with pytest.raises(ValueError):
        kb.reset("latest")
    keys = pa.array([b"a", b"b"])
    offsets = pa.array([5, 6], pa.int64())
    with pytest.raises(TypeError):
        kb.insert(keys, pa.array([5, 6], pa.int32()))
    with pytest.raises(ValueError):
        kb.insert(keys, pa.array([5], pa.int64()))
    with pytest.raises(ValueError):
        kb.insert(keys, offsets, start=1, end=3)
    kb.reset("timestamp")
    with pytest.raises(ValueError):
        kb.insert(keys, offsets)  # the timestamp strategy needs timestamps
    with pytest.raises(ValueError):
        kb.insert(keys, offsets, pa.array([1, None], pa.int64()))


def test_empty_window_moves_an_unusable_base() -> None:
    kb = KeyBuffer(1 << 12)
    keys = pa.array([None, b"a", b"b"])
    offsets = pa.array([5, 5 + 2**32, 6 + 2**32], pa.int64())
    for base in (5, 2**40, None):
        kb.reset("offset", base)
        assert kb.insert(keys, offsets) == 3
        assert kb.base_offset == 5 + 2**32
        assert kb.winners().to_pylist() == [5 + 2**32, 6 + 2**32]
    kb.reset("offset", 5 - 2**32 + 1)
    assert kb.insert(keys, offsets) == 3
    kb.reset("offset", 4)
    keys2 = pa.array([b"a", b"b"])
    assert kb.insert(keys2, pa.array([4, 4 + 2**32], pa.int64())) == 1  # 2^32 past the base


# --- capacity and clearing ---------------------------------------------------------


def distinct_keys(first: int, count: int, width: int) -> pa.Array:
    """Distinct keys: the decimal numbers first..first+count, zero-padded to ``width``."""
    nums = pa.array(range(first, first + count), pa.int64())
    return pc.utf8_lpad(pc.cast(nums, pa.string()), width=width, padding="0")


def test_128_mib_takes_over_3_1_million_distinct_keys() -> None:
    kb = KeyBuffer(128 << 20)
    assert kb.slots == 3_273_603
    assert kb.capacity >= 3_100_000
    kb.reset("offset", 0)
    taken = 0
    chunk = 400_000
    width = 16
    while True:
        keys = distinct_keys(taken, chunk, width)  # 16..36-byte keys, a width per chunk
        offsets = pa.array(range(taken, taken + chunk), pa.int64())
        got = kb.insert(keys, offsets)
        taken += got
        width = 16 + (width - 15) % 21
        if got < chunk:
            break
    assert taken == kb.capacity == kb.size
    assert taken >= 3_100_000
    assert kb.utilization == pytest.approx(0.95, abs=0.001)
    # Full, but keys already held still update.
    again = distinct_keys(0, 1000, 16)
    assert kb.insert(again, pa.array(range(10**7, 10**7 + 1000), pa.int64())) == 1000
    assert kb.lookup(b"0" * 15 + b"7") == 10**7 + 7
    winners = kb.winners()
    assert len(winners) == taken
    assert pc.all(pc.greater(winners.slice(1), winners.slice(0, len(winners) - 1))).as_py()
    kb.reset("offset", 0)
    assert kb.size == 0 and kb.lookup(b"0" * 15 + b"7") is None
    assert kb.full_clears == 1  # a full window: one memset of the flag array (3.2 MB)


def rss_anon_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads Linux's RSS")
def test_a_window_of_few_keys_touches_little_of_a_128_mib_table() -> None:
    """A window grows its table as it fills: 100,000 keys in a 128 MiB buffer use
    3,273,603 >> 4 slots (8 MiB), so the process's anonymous RSS grows by about that,
    not by the table; the keys are those of a full-size table all the same."""
    keys = distinct_keys(0, 100_000, 12)
    offsets = pa.array(range(100_000), pa.int64())
    before = rss_anon_kib()
    kb = KeyBuffer(128 << 20)
    assert kb.active_slots == 3_273_603 >> 7 <= START_SLOTS
    kb.reset("offset", 0)
    assert kb.insert(keys, offsets) == 100_000
    assert kb.active_slots == 3_273_603 >> 4
    assert kb.stats()["grows"] == 3
    grown = rss_anon_kib() - before
    assert grown < 16 << 10, f"RSS grew by {grown} KiB"
    assert kb.lookup(b"000000012345") == 12345
    assert kb.winners() == offsets
    kb.reset("offset", 0)  # the next window starts small again
    assert kb.active_slots == 3_273_603 >> 7 and kb.lookup(b"000000012345") is None


def test_a_full_windows_successor_starts_on_the_whole_table() -> None:
    """Windows of a partition too big for one: after a full window the next starts on
    every slot (it is likely full too), after any other it starts small."""
    kb = KeyBuffer(5000 * ENTRY_BYTES, start_slots=100)
    small = 5000 >> 6
    assert kb.active_slots == small
    keys = distinct_keys(0, 12_000, 8)
    offsets = pa.array(range(12_000), pa.int64())
    kb.reset("offset", 0)
    taken = kb.insert(keys, offsets)
    assert taken == kb.capacity == 4750 and kb.active_slots == 5000
    kb.reset("offset", taken)
    assert kb.active_slots == 5000  # the full window's successor
    grows = kb.stats()["grows"]
    assert kb.insert(keys, offsets, start=taken, end=taken + 100) == taken + 100
    assert kb.stats()["grows"] == grows
    assert kb.lookup(keys[taken + 7].as_py().encode()) == taken + 7
    kb.reset("offset", 0)
    assert kb.active_slots == small  # after a window that was not full


@pytest.mark.parametrize("start_slots", [1, 3, 1000])
def test_growing_in_place_loses_no_key(start_slots: int) -> None:
    """Windows of 40,000 random keys in 50,000 slots, grown from ``start_slots`` (many
    keys set aside at the table's start and end on the way): every key is found with
    its winner, and the window is full exactly where the full-size table is."""
    rng = random.Random(start_slots)
    kb = KeyBuffer(50_000 * ENTRY_BYTES, start_slots=start_slots)
    for _window in range(3):
        pool = [rng.randbytes(rng.randrange(1, 30)) for _ in range(60_000)]
        kb.reset("offset", 0)
        got = kb.insert(pa.array(pool, pa.binary()), pa.array(range(60_000), pa.int64()))
        last: dict[bytes, int] = {}
        for i, k in enumerate(pool[:got]):
            last[k] = i
        assert len(last) == kb.size == kb.capacity == 47_500
        assert kb.active_slots == 50_000
        assert all(kb.lookup(k) == i for k, i in last.items())
        assert kb.winners().to_pylist() == sorted(last.values())


def test_many_small_clears_never_sweep_the_table() -> None:
    """10,000s of partitions: clearing a big buffer costs O(keys held), never a memset."""
    kb = KeyBuffer(128 << 20)
    keys = pa.array([b"k1", b"k2", b"k3"])
    for i in range(100_000):
        kb.reset("offset", i)
        if i % 10 == 0:
            assert kb.insert(keys, pa.array([i, i + 1, i + 2], pa.int64())) == 3
            assert kb.lookup(b"k2") == i + 1
    stats = kb.stats()
    assert stats["resets"] == 100_000
    assert kb.full_clears == 0


@pytest.mark.parametrize(
    "entries,keys_per_window",
    [(64, 1), (64, 40), (25_575, 100), (25_575, 2000)],
)
def test_clears_never_resurrect(entries: int, keys_per_window: int) -> None:
    """Hundreds of windows, cleared slot by slot (small windows) or by a memset of the
    flag array (windows holding more than 1/16 of the slots): an old entry never comes
    back."""
    kb = KeyBuffer(entries * ENTRY_BYTES)
    rng = random.Random(entries + keys_per_window)
    pool = [b"key-%d" % i for i in range(3 * keys_per_window + 5)]
    for w in range(300):
        kb.reset("offset", w * 10_000)
        window = rng.sample(pool, keys_per_window)
        offsets = pa.array(range(w * 10_000, w * 10_000 + keys_per_window), pa.int64())
        assert kb.insert(pa.array(window), offsets) == keys_per_window
        assert kb.size == keys_per_window
        position = {k: i for i, k in enumerate(window)}
        for k in rng.sample(pool, min(50, len(pool))):
            expected = w * 10_000 + position[k] if k in position else None
            assert kb.lookup(k) == expected
        assert kb.winners() == offsets
    stats = kb.stats()
    assert stats["resets"] == 300
    if keys_per_window * 16 > entries:
        assert kb.full_clears == 299
    else:
        assert kb.full_clears == 0 and stats["slot_clears"] == 300


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_child_starts_its_own_helper_threads() -> None:
    keys = distinct_keys(0, 20_000, 20)
    offsets = pa.array(range(20_000), pa.int64())
    kb = KeyBuffer(1 << 22, threads=2)
    kb.reset("offset")
    assert kb.insert(keys, offsets) == 20_000  # the parent's helper thread is running
    pid = os.fork()
    if pid == 0:  # the child: the helper thread did not come along
        code = 1
        try:
            kb.reset("offset")
            if kb.insert(keys, offsets) == 20_000 and len(kb.winners()) == 20_000:
                code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0
    kb.reset("offset")
    assert kb.insert(keys, offsets) == 20_000  # and the parent's pool still works


# --- member_bits: a keep-set against a batch's offsets ----------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(INT64_MIN, INT64_MAX), max_size=300, unique=True),
    st.lists(st.one_of(st.none(), st.integers(-50, 50), st.integers(INT64_MIN, INT64_MAX))),
    st.booleans(),
    st.integers(0, 5),
    st.integers(0, 5),
)
def test_member_bits_matches_a_set(
    members: list[int], offsets: list[int | None], ascending: bool, cut_m: int, cut_o: int
) -> None:
    members = sorted(members + [o for o in offsets[::3] if o is not None and o not in members])
    if ascending:
        offsets = sorted({o for o in offsets if o is not None})
    m = pa.array([0] * cut_m + members, pa.int64()).slice(cut_m)  # sliced: offset arrays
    o = pa.array([0] * cut_o + offsets, pa.int64()).slice(cut_o)
    expected = sum(1 << i for i, x in enumerate(offsets) if x is not None and x in set(members))
    assert member_bits(m, o) == expected


def test_member_bits_rejects_what_it_cannot_read() -> None:
    with pytest.raises(TypeError):
        member_bits(pa.array([1, 2], pa.int32()), pa.array([1], pa.int64()))
    with pytest.raises(ValueError):
        member_bits(pa.array([1, None], pa.int64()), pa.array([1], pa.int64()))
    assert member_bits(pa.array([], pa.int64()), pa.array([1, 2], pa.int64())) == 0


# --- a group's labels and the order of its survivors ------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 9)), max_size=40), st.integers(0, 3))
def test_run_labels_repeats_each_runs_ordinal(runs: list[tuple[int, int]], spare: int) -> None:
    partitions = max((o for o, _ in runs), default=-1) + 1 + spare
    labels, totals = run_labels([o for o, _ in runs], [c for _, c in runs], partitions)
    assert labels.type == pa.int32()
    assert labels.to_pylist() == [o for o, c in runs for _ in range(c)]
    assert totals == [sum(c for o, c in runs if o == p) for p in range(partitions)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.none() | st.binary(max_size=40), st.integers(-(2**31), 2**31 - 1))),
    st.integers(0, 5),
    st.sampled_from([pa.binary(), pa.large_binary(), pa.string()]),
)
def test_salted_keys_is_arrows_join_in_one_pass(
    rows: list[tuple[bytes | None, int]], cut: int, typ: pa.DataType
) -> None:
    """The same values (and nulls) as Arrow's binary_join_element_wise of each key and its
    label's four native bytes, for any key type, slices of both columns, and null keys."""
    if typ == pa.string():
        rows = [(None if k is None else k.hex().encode(), label) for k, label in rows]
    pad = [(b"x", 7)] * cut
    keys = pa.array(
        [k if typ != pa.string() or k is None else k.decode() for k, _ in pad + rows], typ
    )
    labels = pa.array([label for _, label in pad + rows], pa.int32())
    keys, labels = keys.slice(cut), labels.slice(cut)
    salts = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(4), len(labels), [None, labels.buffers()[1]], offset=labels.offset
    ).cast(pa.binary())
    expected = pc.binary_join_element_wise(keys.cast(pa.binary()), salts, b"")
    salted = salted_keys(keys, labels)
    assert salted.type == pa.binary()
    assert salted.validate(full=True) is None
    assert salted.equals(expected)
    assert salted.null_count == sum(k is None for k, _ in rows)


def test_salted_keys_rejects_what_it_cannot_salt() -> None:
    with pytest.raises(ValueError, match="2 keys but 1 labels"):
        salted_keys(pa.array([b"a", b"b"]), pa.array([0], pa.int32()))
    with pytest.raises(ValueError, match="no nulls"):
        salted_keys(pa.array([b"a"]), pa.array([None], pa.int32()))
    with pytest.raises(TypeError, match="int32"):
        salted_keys(pa.array([b"a"]), pa.array([0], pa.int64()))
    with pytest.raises(TypeError, match="binary"):
        salted_keys(pa.array([1]), pa.array([0], pa.int32()))


def test_run_labels_rejects_what_it_cannot_label() -> None:
    with pytest.raises(ValueError):
        run_labels([0, 3], [1, 1], 3)  # an ordinal past the partitions
    with pytest.raises(ValueError):
        run_labels([0], [-1], 1)
    with pytest.raises(ValueError):
        run_labels([0, 1], [1], 2)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.booleans()), max_size=80),
    st.integers(0, 3),
    st.integers(0, 5),
)
def test_survivor_order_is_a_stable_sort_of_the_kept_rows(
    rows: list[tuple[int, bool]], spare: int, cut: int
) -> None:
    partitions = max((label for label, _ in rows), default=-1) + 1 + spare
    labels = pa.array([0] * cut + [label for label, _ in rows], pa.int32()).slice(cut)
    keep = sum(1 << i for i, (_, kept) in enumerate(rows) if kept)
    order, counts = survivor_order(keep, labels, partitions)
    kept = [i for i, (_, k) in enumerate(rows) if k]
    expected = sorted(kept, key=lambda i: rows[i][0])  # stable: row order within a label
    if order is None:
        assert expected == list(range(len(rows)))  # nothing to move
    else:
        assert order.type == pa.int32() and order.to_pylist() == expected
    assert counts == [sum(1 for i in kept if rows[i][0] == p) for p in range(partitions)]


def test_survivor_order_rejects_what_it_cannot_order() -> None:
    labels = pa.array([0, 2, 1], pa.int32())
    with pytest.raises(ValueError):
        survivor_order(0b111, labels, 2)  # a label past the partitions
    with pytest.raises(ValueError):
        survivor_order(0b111, pa.array([0, None, 1], pa.int32()), 2)
    with pytest.raises(TypeError):
        survivor_order(0b111, pa.array([0, 1, 1], pa.int64()), 2)
    with pytest.raises(OverflowError):
        survivor_order(0b1111_1111_1, labels, 3)  # a kept row past the rows
