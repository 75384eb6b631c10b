"""Numbers as a user writes them to this system, on the command line or in a setting:
ASCII digits, an optional sign, and for a fraction a point and an exponent. ``int`` and
``float`` alone also take other scripts' digits (``١٢``), underscores (``1_000``), and
``nan`` and ``inf``, which no setting means."""

from __future__ import annotations

import re

INTEGER = re.compile(r"[+-]?[0-9]+")
FRACTION = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


INT64_MAX = (1 << 63) - 1
"""Kafka's Long.MAX_VALUE: no number this system takes is larger."""
INT64_MIN = -(1 << 63)
"""Kafka's Long.MIN_VALUE: no number this system takes is smaller."""


def saturated_int(text: str) -> int:
    """``text`` (surrounding spaces allowed) as an integer, where one of more than 19
    significant digits reads as ``±(INT64_MAX + 2)``, outside the 64-bit range at either
    end, so that a range check refuses it without ``int`` reading it (``int`` refuses more
    than 4,300 digits, leading zeros included); ValueError if it is not an integer."""
    body = text.strip()
    if INTEGER.fullmatch(body) is None:
        raise ValueError(f"not an integer: {text!r}")
    sign = -1 if body.startswith("-") else 1
    digits = body.lstrip("+-").lstrip("0")
    return sign * (INT64_MAX + 2 if len(digits) > 19 else int(digits or "0"))


def parse_float(text: str) -> float:
    """``text`` (surrounding spaces allowed) as a finite number; ValueError if it is not
    one."""
    if FRACTION.fullmatch(text.strip()) is None:
        raise ValueError(f"not a number: {text!r}")
    value = float(text)
    if value in (float("inf"), float("-inf")):  # 1e999
        raise ValueError(f"not a finite number: {text!r}")
    return value


def shown(text: str) -> str:
    """``text`` as an error quotes it: whole up to 40 characters, else its first 20 and
    its length (a value of thousands of digits stays one short line)."""
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"
