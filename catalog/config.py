"""Topic configuration under Kafka's names, validated on the way in.

A ``TopicConfig`` is only ever built by ``TopicConfig.parse`` (user input) or
``TopicConfig.from_json`` (the catalog), so every instance is valid: each ``*.ms`` value
within Kafka's range for it, at most ``MAX_MS``.

Times are Kafka's longs. A time-rule sum (now + delete.retention.ms, a timestamp +
retention.ms or a compaction lag) saturates at ``MAX_MS`` (``add_ms``), which reads as
never, rather than leaving the 64-bit range that the files and the worker's columns hold.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from compactor.catalog.errors import ConfigError
from compactor.catalog.numbers import INT64_MAX, INT64_MIN, saturated_int, shown

CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
STRATEGIES = ("offset", "timestamp", "header")
MIN_MAX_COMPACTION_LAG_MS = 2 * 60 * 60 * 1000
"""``max.compaction.lag.ms`` values below two hours are raised to two hours."""
MAX_MS = INT64_MAX
"""Kafka's Long.MAX_VALUE: the largest value of a ``*.ms`` config and, as a time, never
(a delete horizon this late is never reached; the files write "no horizon" as it)."""
MIN_MS = INT64_MIN
"""Kafka's Long.MIN_VALUE, where a time-rule difference saturates."""
MS_RANGES: dict[str, int] = {
    "retention.ms": -1,
    "delete.retention.ms": 0,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": 0,
}
"""Each ``*.ms`` config's least value, as Kafka's broker validates it (``LogConfig``),
except max.compaction.lag.ms, whose least is 1 there: 0 has always been taken here, and
like any value below two hours it is raised to two hours. The greatest is ``MAX_MS``."""
_INTEGER = re.compile(r"-?[0-9]+")
"""A ``*.ms`` value's text: ASCII digits with an optional leading minus (``int`` alone
would take other scripts' digits, underscores and spaces)."""

DEFAULTS: dict[str, str] = {
    "cleanup.policy": "delete",
    "retention.ms": "604800000",
    "delete.retention.ms": "86400000",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": "",
    "compaction.strategy": "offset",
    "compaction.strategy.header": "",
}


def add_ms(a: int, b: int) -> int:
    """``a + b`` for times and durations in ms, saturated to the 64-bit range: at
    ``MAX_MS`` (never) above it, at ``MIN_MS`` below."""
    return max(MIN_MS, min(MAX_MS, a + b))


def _ms(name: str, text: str, *, stored: bool) -> int:
    """A ``*.ms`` config's value. From the user (not ``stored``) it must be within Kafka's
    range (``MS_RANGES``, ``MAX_MS``). From the catalog (``stored``), as an earlier version
    may have accepted it: a value past ``MAX_MS`` reads as ``MAX_MS`` (forever either
    way)."""
    if not isinstance(text, str) or _INTEGER.fullmatch(text) is None:
        raise ConfigError(f"{name} must be an integer number of milliseconds, got {text!r}")
    value = saturated_int(text)
    least = MS_RANGES[name]
    if value < least:
        hint = " (-1 keeps records forever)" if least == -1 else ""
        raise ConfigError(f"{name} must be >= {least}{hint}, got {shown(text)}")
    if value > MAX_MS:
        if stored:
            return MAX_MS
        raise ConfigError(f"{name} must be at most {MAX_MS} (2^63 - 1), got {shown(text)}")
    return value


@dataclass(frozen=True, slots=True)
class TopicConfig:
    cleanup_policy: str = "delete"
    retention_ms: int = 604800000
    """-1 keeps records forever."""
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int | None = None
    """As configured; see ``effective_max_compaction_lag_ms``."""
    compaction_strategy: str = "offset"
    compaction_strategy_header: str | None = None

    @property
    def compacted(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def deletes_by_retention(self) -> bool:
        return "delete" in self.cleanup_policy

    def retention_cutoff_ms(self, now_ms: int) -> int | None:
        """A record with a timestamp below this has passed retention.ms (None: this topic
        keeps records forever). It leaves once every record before it in its partition
        has too (docs/ARCHITECTURE.md §4, invariant 1(c))."""
        if not self.deletes_by_retention or self.retention_ms < 0:
            return None
        return add_ms(now_ms, -self.retention_ms)

    def delete_horizon_ms(self, now_ms: int) -> int:
        """The delete horizon a compaction at ``now_ms`` gives a tombstone: now +
        delete.retention.ms, at least 1 ms ahead, so that the job that sets a horizon never
        finds it passed; saturated at ``MAX_MS``, never (so the clock must stay below it:
        ``--now-ms`` does)."""
        return add_ms(now_ms, max(1, self.delete_retention_ms))

    @property
    def effective_max_compaction_lag_ms(self) -> int | None:
        if self.max_compaction_lag_ms is None:
            return None
        return max(self.max_compaction_lag_ms, MIN_MAX_COMPACTION_LAG_MS)

    @classmethod
    def parse(cls, settings: Mapping[str, str]) -> TopicConfig:
        """Validate user settings (Kafka names, string values) as Kafka's broker does:
        unknown keys, values out of Kafka's range and min.compaction.lag.ms above
        max.compaction.lag.ms are errors."""
        return cls._parse(settings, stored=False)

    @classmethod
    def _parse(cls, settings: Mapping[str, str], *, stored: bool) -> TopicConfig:
        """``parse``; ``stored``: settings from the catalog, which an earlier version
        may have written with looser bounds (see ``_ms``; nor is min.compaction.lag.ms
        above max.compaction.lag.ms an error: both rules still apply)."""
        unknown = sorted(set(settings) - set(DEFAULTS))
        if unknown:
            known = ", ".join(DEFAULTS)
            raise ConfigError(f"unknown topic config {unknown[0]!r} (known: {known})")
        merged = {**DEFAULTS, **settings}
        policy = merged["cleanup.policy"].replace(" ", "")
        if policy == "delete,compact":
            policy = "compact,delete"
        if policy not in CLEANUP_POLICIES:
            raise ConfigError(
                f"cleanup.policy must be one of {', '.join(CLEANUP_POLICIES)}, got {policy!r}"
            )
        strategy = merged["compaction.strategy"]
        if strategy not in STRATEGIES:
            raise ConfigError(
                f"compaction.strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}"
            )
        header = merged["compaction.strategy.header"] or None
        if strategy == "header" and header is None:
            raise ConfigError("compaction.strategy=header needs compaction.strategy.header")
        if strategy != "header" and header is not None:
            raise ConfigError(
                "compaction.strategy.header is only valid with compaction.strategy=header"
            )
        max_lag_text = merged["max.compaction.lag.ms"]
        max_lag = None
        if max_lag_text:
            max_lag = _ms("max.compaction.lag.ms", max_lag_text, stored=stored)
        min_lag = _ms("min.compaction.lag.ms", merged["min.compaction.lag.ms"], stored=stored)
        if not stored and max_lag is not None and min_lag > max_lag:
            raise ConfigError(
                f"min.compaction.lag.ms ({min_lag}) must not be greater than "
                f"max.compaction.lag.ms ({max_lag})"
            )
        return cls(
            cleanup_policy=policy,
            retention_ms=_ms("retention.ms", merged["retention.ms"], stored=stored),
            delete_retention_ms=_ms(
                "delete.retention.ms", merged["delete.retention.ms"], stored=stored
            ),
            min_compaction_lag_ms=min_lag,
            max_compaction_lag_ms=max_lag,
            compaction_strategy=strategy,
            compaction_strategy_header=header,
        )

    def to_json(self) -> dict[str, str]:
        """Kafka names and string values, as ``parse`` takes them."""
        out = {
            "cleanup.policy": self.cleanup_policy,
            "retention.ms": str(self.retention_ms),
            "delete.retention.ms": str(self.delete_retention_ms),
            "min.compaction.lag.ms": str(self.min_compaction_lag_ms),
            "compaction.strategy": self.compaction_strategy,
        }
        if self.max_compaction_lag_ms is not None:
            out["max.compaction.lag.ms"] = str(self.max_compaction_lag_ms)
        if self.compaction_strategy_header is not None:
            out["compaction.strategy.header"] = self.compaction_strategy_header
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, str]) -> TopicConfig:
        """A topic config as the catalog holds it (``to_json``): validated as ``parse``
        does, but a store written before Kafka's bounds were enforced still loads."""
        return cls._parse(data, stored=True)
