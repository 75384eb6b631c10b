"""The key buffer: compiled SHA-512/256 hashing into a fixed table of 41-byte entries.

One :class:`KeyBuffer` per worker process, allocated once and reused for every partition
and job (docs/ARCHITECTURE.md §5). Phase 1 inserts a window's records (``insert``) and,
when the window closes, takes out its winning offsets (``winners``: the keep-set); phase 2
walks the same records and keeps record i iff it is not eligible or its offset is in the
keep-set, so no key is hashed twice. (``keep_mask`` asks the buffer itself, for one window
at a time.) The C source (``_keybuffer.c``) documents the probing, the epochs and the window-closing
rule.

Entry layout (41 bytes a slot; ``slots = capacity_bytes // 41``)::

    32 bytes  SHA-512/256 of the key
     4 bytes  uint32 offset delta: record offset - the window's base offset
     4 bytes  int32 value delta: timestamp (timestamp strategy) or header value
              (header strategy) - the window's first one; unused (0) for offset
     1 byte   flag: 0 empty; else bit 7 occupied, bit 6 the record has the header,
              bits 0-5 six more bits of the hash (a tag)

The flag bytes live in their own array (then the 40-byte rest of each entry), so a
linear-probe run reads 64 flags per cache line and compares a stored hash only when its
tag matches; same 41 bytes a slot, about half the probing cost at 95% load.

Growing: a window starts on a small part of the table, ``slots >> k`` slots for the
smallest k that makes that at most ``start_slots`` (default 32,768, about 1.3 MiB), and
doubles it in place each time it holds 95% of them, the last step reaching ``slots``. The
table is mapped lazily, so a job of few distinct keys touches (and holds in RSS) only
what its largest window needed, and a small window probes a table that fits the caches.
Which records a window takes, and so its keep-set, are exactly those of the full table.
A reset starts the next window small again, unless the window it ends was full (then the
next one is likely full too: a partition too big for one window).

Capacity: a window takes ``capacity = slots - slots // 20`` keys (95% load; 3,109,923
for the default 128 MiB, 3,273,603 slots) under every strategy: all entries are the same
41 bytes. A window also closes *early* when a record cannot be stored as deltas: its
offset 2^32 or more above the window's base offset, or (timestamp/header strategies) its
timestamp or header value more than about 2^31 away from the window's first one (~24.8
days of millisecond timestamps). ``insert`` then reports that record exactly as when the
buffer is full; the caller closes the window there and resets. Closing early only keeps
more records (a key may survive once per window), never fewer, so it is always safe.

Clearing (``reset``) costs O(keys held): a used-slot list (4 bytes per key of capacity)
says which flag bytes to zero; a window holding more than 1/16 of its slots memsets
their flags instead (``full_clears``; 1/41 of what it used). The keep-set is built from
the same list, never by sweeping the table: a bitmap over the window's offset
range when that is dense, else the winners radix-sorted. Besides the table a buffer holds
that list, 2 MiB of hash scratch and the keep-set (at most max(1 MiB, 8 bytes per key)):
about ``capacity_bytes * 1.1 + 3 MiB`` at most, mapped lazily (transparent huge pages
on Linux) so only what is touched counts in RSS.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pyarrow as pa

from compactor.worker.errors import KeyBufferUnavailable
from compactor.worker.kernel import _keybuffer

__all__ = [
    "DEFAULT_CAPACITY_BYTES",
    "ENTRY_BYTES",
    "HASH_IMPL",
    "HASH_IMPLS",
    "HAVE_AVX2",
    "HAVE_AVX512",
    "HAVE_OPENSSL",
    "STRATEGIES",
    "KeyBuffer",
    "Strategy",
    "hash_keys",
    "salted_keys",
    "sha512_256",
]

Strategy = Literal["offset", "timestamp", "header"]

ENTRY_BYTES: int = _keybuffer.ENTRY_BYTES
DEFAULT_CAPACITY_BYTES: int = 128 << 20
#: The most slots a window starts on (``KeyBuffer(start_slots=)``).
START_SLOTS: int = _keybuffer.START_SLOTS
#: SHA-512/256 implementation used by default: "avx512" (eight keys of up to 111 bytes at
#: once, on CPUs with AVX-512F; a longer key as "openssl" does), else "avx2" (the same
#: keys four at a time, on CPUs with AVX2), else "openssl", else "portable". All give the
#: same hashes.
HASH_IMPL: str = _keybuffer.HASH_IMPL
HAVE_OPENSSL: bool = _keybuffer.HAVE_OPENSSL
HAVE_AVX512: bool = _keybuffer.HAVE_AVX512
HAVE_AVX2: bool = _keybuffer.HAVE_AVX2
#: Every implementation this build and CPU can run.
HASH_IMPLS: tuple[str, ...] = (
    ("portable",)
    + (("openssl",) if HAVE_OPENSSL else ())
    + (("avx512",) if HAVE_AVX512 else ())
    + (("avx2",) if HAVE_AVX2 else ())
)
STRATEGIES: dict[str, int] = {
    "offset": _keybuffer.STRATEGY_OFFSET,
    "timestamp": _keybuffer.STRATEGY_TIMESTAMP,
    "header": _keybuffer.STRATEGY_HEADER,
}
_STRATEGY_NAMES = {code: name for name, code in STRATEGIES.items()}


def sha512_256(data: bytes, impl: str | None = None) -> bytes:
    """SHA-512/256 of one message (``impl``: one of ``HASH_IMPLS``, or the default)."""
    return _keybuffer._sha512_256(data, impl)


def hash_keys(keys: pa.Array, *, threads: int = 2, impl: str | None = None) -> bytes:
    """SHA-512/256 of every key of a binary/string Arrow array: 32 bytes per key, all
    zeros for a null key. Hashed in C on ``threads`` threads with the GIL released."""
    return _keybuffer.hash_keys(keys, threads, impl)


def member_bits(members: pa.Array, offsets: pa.Array) -> int:
    """Which ``offsets`` (int64) are among ``members`` (int64, strictly ascending, no
    nulls), as a Python int: bit i for offsets[i]. In C, without the GIL; O(n + log k)
    for ascending offsets."""
    return int.from_bytes(_keybuffer.member_mask(members, offsets), "little")


def salted_keys(keys: pa.Array, labels: pa.Array) -> pa.Array:
    """``keys`` (binary or string) each followed by its row's label (int32, no nulls) as
    its 4 bytes in the machine's order, as a binary array (large_binary past 2 GiB); a
    null key stays null. In C, one pass without the GIL."""
    validity, offsets, data, large = _keybuffer.salted_keys(keys, labels)
    return pa.Array.from_buffers(
        pa.large_binary() if large else pa.binary(),
        len(keys),
        [
            None if validity is None else pa.py_buffer(validity),
            pa.py_buffer(offsets),
            pa.py_buffer(data),
        ],
    )


def run_labels(
    ordinals: Sequence[int], counts: Sequence[int], partitions: int
) -> tuple[pa.Array, list[int]]:
    """The labels of rows taken as runs, run i being ``counts[i]`` rows of the partition
    whose ordinal is ``ordinals[i]`` (each in 0..partitions-1): each row's label (int32),
    and how many rows each of the ``partitions`` ordinals has. In C."""
    raw, totals = _keybuffer.run_labels(ordinals, counts, partitions)
    return _native_array(pa.int32(), raw), totals


def survivor_order(
    keep: int, labels: pa.Array, partitions: int
) -> tuple[pa.Array | None, list[int]]:
    """A group's kept rows (``keep``, a bit mask over the rows) put partition after
    partition by their ``labels`` (int32, each in 0..partitions-1, no nulls), each
    partition's in row order: their indices (int32; None when every row is kept and the
    labels never descend, so the rows are that order already), and how many rows each
    partition keeps. A counting sort in C, without the GIL: O(rows + partitions)."""
    n = len(labels)
    bits = keep.to_bytes((n + 7) >> 3, "little")
    order, counts = _keybuffer.survivor_order(bits, labels, partitions)
    if order is None:
        return None, counts
    return _native_array(pa.int32(), order), counts


def _native_array(type: pa.DataType, raw: bytes) -> pa.Array:
    """A null-free array of the fixed-width ``type`` whose values are ``raw`` (native
    order, as the kernel writes them)."""
    return pa.Array.from_buffers(type, len(raw) // type.byte_width, [None, pa.py_buffer(raw)])


def _bitmap_array(bits: bytes, n: int) -> pa.Array:
    return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(bits)])


class KeyBuffer:
    """Which record of each key wins in the current window: SHA-512/256(key) -> winning
    offset (plus the timestamp or header value the strategy compares), in a fixed table.

    ``KeyBuffer(capacity_bytes)`` raises ValueError below one 41-byte entry; a one-entry
    buffer holds exactly one key. ``threads`` hash a batch in parallel (default 2, the
    machine's cores); ``hash_impl`` picks one of ``HASH_IMPLS``; ``start_slots`` bounds
    the slots a window starts on (see the module's doc: it changes memory and speed, never
    a window's outcome).
    """

    def __init__(
        self,
        capacity_bytes: int = DEFAULT_CAPACITY_BYTES,
        *,
        threads: int = 2,
        hash_impl: str | None = None,
        start_slots: int = START_SLOTS,
    ) -> None:
        try:
            self._kb = _keybuffer.KeyBuffer(
                capacity_bytes, threads=threads, hash_impl=hash_impl, start_slots=start_slots
            )
        except MemoryError:
            raise KeyBufferUnavailable(
                f"a key buffer of {capacity_bytes:,} bytes cannot be allocated here: "
                "lower --key-buffer-bytes (a smaller buffer compacts the same way, in more "
                "windows)"
            ) from None
        self.capacity_bytes = capacity_bytes

    @property
    def slots(self) -> int:
        """41-byte entries in the table (``capacity_bytes // 41``)."""
        return self._kb.slots

    @property
    def active_slots(self) -> int:
        """Slots the current window uses: it starts at most ``start_slots`` and doubles
        as it fills, up to ``slots``."""
        return self._kb.active_slots

    @property
    def capacity(self) -> int:
        """Distinct keys a window takes before the buffer is full (95% of the slots)."""
        return self._kb.capacity

    @property
    def size(self) -> int:
        """Distinct keys held in the current window."""
        return self._kb.size

    @property
    def utilization(self) -> float:
        """``size / slots`` (reaches 0.95 when a window closes because it is full)."""
        return self._kb.size / self._kb.slots

    @property
    def full_clears(self) -> int:
        """Resets that memset the flags of the window's slots (1/41 of what it used): only
        after windows that held more than 1/16 of them; smaller ones are cleared slot by
        slot."""
        return self._kb.full_clears

    @property
    def strategy(self) -> Strategy:
        name = _STRATEGY_NAMES[self._kb.strategy]
        assert name in ("offset", "timestamp", "header")
        return name  # type: ignore[return-value]

    @property
    def base_offset(self) -> int | None:
        """The window's base offset (None until given or taken from the first record)."""
        return self._kb.base_offset

    @property
    def hash_impl(self) -> str:
        return self._kb.hash_impl

    @property
    def threads(self) -> int:
        """Threads hashing each inserted batch; settable between calls (1..8)."""
        return self._kb.threads

    @threads.setter
    def threads(self, value: int) -> None:
        self._kb.threads = value

    def reset(self, strategy: str = "offset", base_offset: int | None = None) -> None:
        """Start a window: forget every key, at a cost proportional to the keys held.

        ``strategy`` (KIP-280) decides who wins: "offset" (highest offset), "timestamp"
        (highest timestamp, ties to the highest offset) or "header" (highest header
        value; a record with the header beats one without; ties and both-missing to the
        highest offset). ``base_offset``: offsets are stored as uint32 deltas from it;
        None takes the first inserted record's offset.
        """
        try:
            code = STRATEGIES[strategy]
        except KeyError:
            raise ValueError(f"unknown compaction strategy {strategy!r}") from None
        self._kb.reset(code, base_offset)

    def insert(
        self,
        keys: pa.Array,
        offsets: pa.Array,
        values: pa.Array | None = None,
        has_value: pa.Array | None = None,
        eligible: pa.Array | None = None,
        start: int = 0,
        end: int | None = None,
    ) -> int:
        """Offer records ``start..end`` of a batch; returns the index of the first record
        not consumed (``end`` when all were).

        A return below ``end`` means the window closes at that record: the buffer is full
        (a new key and ``size == capacity``), or the record's offset or value cannot be
        stored relative to the window's bases. The caller lets phase 2 catch up to that
        index, resets, and continues from it. A freshly reset buffer always takes its
        first eligible record (if that record's offset is below or 2^32 past an explicit
        ``base_offset``, the empty window takes its offset as the base instead).

        Arrays (any Arrow C data interface producer; slices are fine): ``keys`` binary or
        string (null keys never take part), ``offsets`` int64 (ascending in practice;
        any order is handled), ``values`` int64 timestamps (timestamp strategy, required)
        or header values (header strategy; a null means no header), ``has_value``
        boolean header presence (header strategy; default: ``values`` is not null),
        ``eligible`` boolean mask of records that take part (null = no). The GIL is
        released while hashing and inserting.
        """
        return self._kb.insert(keys, offsets, values, has_value, eligible, start, end)

    def winners(self) -> pa.Array:
        """The window's winning offsets (absolute), ascending, as an Int64Array: the
        keep-set, e.g. for ``pyarrow.compute.is_in``."""
        return _native_array(pa.int64(), self._kb.winners())

    def keep_mask(self, offsets: pa.Array, eligible: pa.Array | None = None) -> pa.Array:
        """A BooleanArray: True where ``offsets[i]`` is a winner of the window, or (when
        ``eligible`` is given) where record i does not take part. No hashing: a merge
        walk over the sorted winners, O(n) for ascending offsets."""
        return _bitmap_array(self._kb.keep_mask(offsets, eligible), len(offsets))

    def lookup(self, key: bytes) -> int | None:
        """The winning offset of ``key`` in the current window, or None."""
        return self._kb.lookup(key)

    def lookup_entry(self, key: bytes) -> tuple[int, int | None] | None:
        """(winning offset, its timestamp or header value or None), or None."""
        return self._kb.lookup_entry(key)

    def stats(self) -> dict[str, int]:
        """Counters: resets, full_clears, slot_clears, records (consumed records that
        took part), new_keys, replaced (winner changes), probes (slots inspected),
        grows (windows' tables doubled), keepset_bitmaps and keepset_sorted (keep-sets
        built of each kind), memory_bytes, and the configuration (slots, active_slots,
        capacity, size, threads)."""
        return self._kb.stats()
