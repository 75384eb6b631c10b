"""A one-line progress display on stderr, shown only when stderr is a terminal."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, interval_s: float = 0.5) -> None:
        self.enabled = sys.stderr.isatty()
        self.interval_s = interval_s
        self._last = 0.0
        self._shown = False

    def update(self, text: str, *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if force or now - self._last >= self.interval_s:
            self._last = now
            sys.stderr.write(f"\r\x1b[K{text}")
            sys.stderr.flush()
            self._shown = True

    def done(self) -> None:
        if self._shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self._shown = False
