"""One line on stderr per event a worker or scheduler reports: ``text`` for people, or
``json`` (one object per line) for log pipelines.

No line ever holds a credential: the AWS secrets in the environment are masked wherever
they would appear (an error message that quotes a request, say)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

from compactor.objectstore.secrets import environment_secrets, masked

FORMATS = ("text", "json")


class EventLog:
    def __init__(self, fmt: str = "text", stream: TextIO | None = None, source: str = "") -> None:
        if fmt not in FORMATS:
            raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        self.fmt, self.source = fmt, source
        self._stream = stream
        self._secrets = environment_secrets()

    def __call__(self, event: str, **fields: Any) -> None:
        now = time.time()
        stamp = (
            time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
        )
        if self.fmt == "json":
            line = json.dumps({"ts": stamp, "source": self.source, "event": event, **fields})
        else:
            rest = " ".join(f"{k}={_text(v)}" for k, v in fields.items())
            line = f"{stamp} {self.source} {event} {rest}".rstrip()
        line = masked(line, self._secrets)
        stream = self._stream if self._stream is not None else sys.stderr
        print(line, file=stream, flush=True)


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return json.dumps(text) if not text or any(c.isspace() or c == '"' for c in text) else text
