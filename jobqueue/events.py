"""One line on stderr per event a worker or scheduler reports: ``text`` for people, or
``json`` (one object per line) for log pipelines.

No line ever holds a credential: the AWS secrets in the environment are masked wherever
they would appear (an error message that quotes a request, say)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, TextIO

FORMATS = ("text", "json")
_SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")


class EventLog:
    def __init__(self, fmt: str = "text", stream: TextIO | None = None, source: str = "") -> None:
        if fmt not in FORMATS:
            raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        self.fmt, self.source = fmt, source
        self._stream = stream
        self._secrets = [v for v in (os.environ.get(n) for n in _SECRET_ENV) if v and len(v) > 3]

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
        for secret in self._secrets:
            line = line.replace(secret, "***")
        stream = self._stream if self._stream is not None else sys.stderr
        print(line, file=stream, flush=True)


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return json.dumps(text) if not text or any(c.isspace() or c == '"' for c in text) else text
