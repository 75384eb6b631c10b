"""Topic configuration under Kafka's names, validated on the way in.

A ``TopicConfig`` is only ever built by ``TopicConfig.parse`` (user input) or
``TopicConfig.from_json`` (the catalog), so every instance is valid.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from compactor.catalog.errors import ConfigError

CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
STRATEGIES = ("offset", "timestamp", "header")
MIN_MAX_COMPACTION_LAG_MS = 2 * 60 * 60 * 1000
"""``max.compaction.lag.ms`` values below two hours are raised to two hours."""

DEFAULTS: dict[str, str] = {
    "cleanup.policy": "delete",
    "retention.ms": "604800000",
    "delete.retention.ms": "86400000",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": "",
    "compaction.strategy": "offset",
    "compaction.strategy.header": "",
}


def _non_negative_ms(name: str, text: str, *, allow_infinite: bool = False) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(
            f"{name} must be an integer number of milliseconds, got {text!r}"
        ) from None
    if allow_infinite and value == -1:
        return value
    if value < 0:
        hint = " (or -1 for no limit)" if allow_infinite else ""
        raise ConfigError(f"{name} must be >= 0{hint}, got {value}")
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
        return now_ms - self.retention_ms

    def delete_horizon_ms(self, now_ms: int) -> int:
        """The delete horizon a compaction at ``now_ms`` gives a tombstone: now +
        delete.retention.ms, at least 1 ms ahead, so that the job that sets a horizon never
        finds it passed."""
        return now_ms + max(1, self.delete_retention_ms)

    @property
    def effective_max_compaction_lag_ms(self) -> int | None:
        if self.max_compaction_lag_ms is None:
            return None
        return max(self.max_compaction_lag_ms, MIN_MAX_COMPACTION_LAG_MS)

    @classmethod
    def parse(cls, settings: Mapping[str, str]) -> TopicConfig:
        """Validate user settings (Kafka names, string values); unknown keys are errors."""
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
        max_lag = _non_negative_ms("max.compaction.lag.ms", max_lag_text) if max_lag_text else None
        return cls(
            cleanup_policy=policy,
            retention_ms=_non_negative_ms(
                "retention.ms", merged["retention.ms"], allow_infinite=True
            ),
            delete_retention_ms=_non_negative_ms(
                "delete.retention.ms", merged["delete.retention.ms"]
            ),
            min_compaction_lag_ms=_non_negative_ms(
                "min.compaction.lag.ms", merged["min.compaction.lag.ms"]
            ),
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
        return cls.parse(data)
