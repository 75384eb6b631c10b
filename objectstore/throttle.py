"""A read throttle shared by a job's GET streams, like Kafka's
``log.cleaner.io.max.bytes.per.second``; without a rate, a meter of the bytes read.

``ReadThrottle`` is a token bucket: reading ``n`` bytes takes ``n`` tokens, tokens come
back at ``bytes_per_second``, and the bucket holds at most ``burst_bytes``. A read that
overdraws the bucket sleeps until the debt is repaid, so over any window of ``w`` seconds
the streams read at most ``bytes_per_second * w + burst_bytes`` plus one read's length.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .base import ObjectStream

DEFAULT_BURST_S = 0.1
"""The bucket holds this many seconds' worth of bytes: short enough that no window of a
second overshoots the rate by much."""


class ReadThrottle:
    """Thread-safe: phase 1 may read on its own thread while phase 2 reads on another."""

    def __init__(
        self,
        bytes_per_second: float | None,
        *,
        on_read: Callable[[int], None] = lambda n: None,
        burst_bytes: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if bytes_per_second is not None and not bytes_per_second > 0:
            raise ValueError(f"a throttle needs a positive rate, got {bytes_per_second}")
        self.rate = float(bytes_per_second) if bytes_per_second else float("inf")
        if burst_bytes is None:
            burst_bytes = int(self.rate * DEFAULT_BURST_S) if bytes_per_second else 0
        self.burst = burst_bytes
        self._on_read = on_read
        self._clock, self._sleep = clock, sleep
        self._lock = threading.Lock()
        self._tokens = float(self.burst)
        self._at = clock()
        self.bytes_total = 0
        self.slept_s = 0.0

    @property
    def paces(self) -> bool:
        """Whether it has a rate to keep; without one it only meters."""
        return self.rate != float("inf")

    def consume(self, n: int) -> None:
        """Account for ``n`` bytes read; sleeps while the bucket is in debt."""
        self._on_read(n)
        if self.rate == float("inf"):
            with self._lock:
                self.bytes_total += n
            return
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now
            self._tokens -= n
            self.bytes_total += n
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
            self.slept_s += wait
        if wait > 0:
            self._sleep(wait)


class ThrottledStream:
    """A source over ``inner`` whose reads ``throttle`` paces (what a file reader takes:
    ``read``, ``readinto`` and ``read_mapped``; the stream's own position and resumes
    stay on ``inner``)."""

    def __init__(self, inner: ObjectStream, throttle: ReadThrottle) -> None:
        self.inner, self.throttle = inner, throttle

    def read(self, n: int) -> bytes:
        data = self.inner.read(n)
        self.throttle.consume(len(data))
        return data

    def readinto(self, view: memoryview) -> int:
        n = self.inner.readinto(view)
        self.throttle.consume(n)
        return n

    def read_mapped(self, n: int, back: int = 0) -> memoryview | None:
        """``ObjectStream.read_mapped``, paced: the ``n - back`` bytes it takes from the
        stream count as read (the ``back`` bytes were, when they were read ahead)."""
        view = self.inner.read_mapped(n, back)
        if view is not None:
            self.throttle.consume(n - back)
        return view
