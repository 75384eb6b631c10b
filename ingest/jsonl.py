"""Records as JSON Lines, the shape ``ingest`` reads and ``dump`` writes.

``{"topic": "t", "partition": 0, "key": "k", "value": "v", "timestamp": 1700000000000,
"headers": [["h", "v"]]}``. ``key``/``value`` may be null (a null value is a tombstone);
binary data goes in ``key_b64``/``value_b64``; a header value may be ``{"b64": "..."}``.
``dump`` adds ``"offset"`` and uses the string forms wherever the bytes are UTF-8.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from compactor.fileformat import Record

_INPUT_FIELDS = frozenset(
    {"topic", "partition", "key", "key_b64", "value", "value_b64", "timestamp", "headers"}
)


class InputError(ValueError):
    """A line of input that is not a valid record; the message says why."""


@dataclass(frozen=True, slots=True)
class InputRecord:
    topic: str
    partition: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _b64(text: object, field: str) -> bytes:
    if not isinstance(text, str):
        raise InputError(f"{field} must be a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise InputError(f"{field} is not valid base64") from None


def _utf8(text: str, field: str) -> bytes:
    try:
        return text.encode()
    except UnicodeEncodeError:
        raise InputError(f"{field} is not valid Unicode (use {field}_b64 for binary)") from None


def _bytes_field(obj: dict[str, Any], name: str) -> bytes | None:
    if f"{name}_b64" in obj:
        if name in obj:
            raise InputError(f"give either {name} or {name}_b64, not both")
        return _b64(obj[f"{name}_b64"], f"{name}_b64")
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"{name} must be a string or null (use {name}_b64 for binary)")
    return _utf8(value, name)


def _header(item: object) -> tuple[str, bytes | None]:
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
        raise InputError('each header must be ["name", value]')
    name, value = item
    _utf8(name, "header name")
    if value is None:
        return name, None
    if isinstance(value, str):
        return name, _utf8(value, f"header {name!r}")
    if isinstance(value, dict) and set(value) == {"b64"}:
        return name, _b64(value["b64"], f"header {name!r}")
    raise InputError(f'header {name!r} value must be a string, null or {{"b64": ...}}')


def parse_line(line: str | bytes) -> InputRecord:
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise InputError(f"not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise InputError("a record must be a JSON object")
    unknown = sorted(set(obj) - _INPUT_FIELDS)
    if unknown:
        raise InputError(f"unknown field {unknown[0]!r}")
    topic = obj.get("topic")
    if not isinstance(topic, str):
        raise InputError("topic must be a string")
    partition = obj.get("partition")
    if not _is_int(partition):
        raise InputError("partition must be an integer")
    timestamp = obj.get("timestamp")
    if timestamp is not None and not (_is_int(timestamp) and 0 <= timestamp < 2**63):
        raise InputError("timestamp must be a non-negative integer (milliseconds)")
    headers = obj.get("headers", [])
    if not isinstance(headers, list):
        raise InputError("headers must be a list")
    assert isinstance(partition, int)
    return InputRecord(
        topic=topic,
        partition=partition,
        timestamp=timestamp,
        key=_bytes_field(obj, "key"),
        value=_bytes_field(obj, "value"),
        headers=tuple(_header(h) for h in headers),
    )


def _text_or_b64(out: dict[str, Any], name: str, data: bytes | None) -> None:
    if data is None:
        out[name] = None
        return
    try:
        out[name] = data.decode()
    except UnicodeDecodeError:
        out[f"{name}_b64"] = base64.b64encode(data).decode()


def _header_json(value: bytes | None) -> Any:
    if value is None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(value).decode()}


def format_record(topic: str, partition: int, record: Record) -> str:
    out: dict[str, Any] = {"topic": topic, "partition": partition, "offset": record.offset}
    _text_or_b64(out, "key", record.key)
    _text_or_b64(out, "value", record.value)
    out["timestamp"] = record.timestamp
    out["headers"] = [[k, _header_json(v)] for k, v in record.headers]
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"))
