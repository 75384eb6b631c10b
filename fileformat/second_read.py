"""What decoding accepted bytes gave, kept for the second reader of the same bytes.

A job reads every input twice, through two GET streams (the phase-1 and the phase-2
pointer), and for the small batches and trailers of small sections the decoding and
checking of those bytes costs far more than reading them. So a reader that decoded and
accepted a payload leaves the result here, and a reader that later holds an equal payload
(its own bytes, read from its own stream and checksummed, compared byte for byte with the
first) takes that result instead of decoding again: the same bytes decode to the same
result. Nothing else is ever shared: a payload that differs by one byte is a miss and is
decoded (and rejected, if bad) afresh.

Bounds: only payloads of at most ``MAX_PAYLOAD`` bytes are kept, at most ``MAX_BYTES`` of
payload in all; a result is handed out once (taken, not copied) and the oldest go first
when full. Phase 1 runs at most a window ahead of phase 2, so for small sections an entry
lives for a partition or two; for large ones the bound is what it costs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Final, Literal, TypeVar, cast

Role = Literal["first", "second"] | None
"""A reader's part in a pair of readers of the same bytes: the ``first`` leaves what it
accepted, the ``second`` takes it; a reader on its own (None) does neither."""

MAX_PAYLOAD: Final = 64 << 10
MAX_BYTES: Final = 16 << 20
_T = TypeVar("_T")


class SecondReadMemo:
    """Results by (kind, payload bytes): a reader decodes through ``decoded``, which takes
    before decoding and puts after accepting. Thread-safe (phase 1 may run on a thread of
    its own)."""

    def __init__(self, max_payload: int = MAX_PAYLOAD, max_bytes: int = MAX_BYTES) -> None:
        self._entries: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._bytes = 0
        self._max_payload, self._max_bytes = max_payload, max_bytes
        self._lock = threading.Lock()

    def keeps(self, payload: object, role: Role) -> bool:
        """Whether a reader in ``role`` uses the memo for ``payload`` (of a kind and size
        this memo keeps)."""
        return role is not None and type(payload) is bytes and len(payload) <= self._max_payload

    def decoded(
        self,
        kind: Hashable,
        payload: bytes | memoryview,
        role: Role,
        decode: Callable[[], tuple[_T, bool]],
    ) -> _T:
        """What ``decode()`` makes of ``payload`` (raising if it refuses it), through the
        memo: a ``second`` reader takes what a ``first`` one left for an equal payload of
        the same ``kind`` (the kind of result and whatever else it depends on), and
        decodes only without it; a ``first`` reader leaves its result when ``decode``
        says it may be shared (its second value). A payload the memo does not keep
        (``keeps``), or a reader of no role, just decodes."""
        memo = self.keeps(payload, role)
        if memo and role == "second":
            hit = self.take((kind, payload))
            if hit is not None:
                return cast(_T, hit)
        value, shared = decode()
        if memo and role == "first" and shared:
            self.put((kind, payload), value, 2 * len(payload))
        return value

    def take(self, key: Hashable) -> object | None:
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is None:
                return None
            self._bytes -= entry[1]
            return entry[0]

    def put(self, key: Hashable, value: object, nbytes: int) -> None:
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = (value, nbytes)
            self._bytes += nbytes
            while self._bytes > self._max_bytes:
                _, (_, gone) = self._entries.popitem(last=False)
                self._bytes -= gone

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)


MEMO = SecondReadMemo()
"""The process's memo: the two pointers of a job are two readers in one process."""
