import pytest

from compactor.catalog import ConfigError, TopicConfig
from compactor.catalog.config import MIN_MAX_COMPACTION_LAG_MS


def test_defaults_are_kafkas() -> None:
    c = TopicConfig.parse({})
    assert c.cleanup_policy == "delete"
    assert c.delete_retention_ms == 86_400_000
    assert c.min_compaction_lag_ms == 0
    assert c.max_compaction_lag_ms is None
    assert c.compaction_strategy == "offset"
    assert not c.compacted


def test_compact_delete_in_either_order() -> None:
    assert (
        TopicConfig.parse({"cleanup.policy": "delete,compact"}).cleanup_policy == "compact,delete"
    )
    c = TopicConfig.parse({"cleanup.policy": "compact,delete"})
    assert c.compacted and c.deletes_by_retention


def test_max_lag_below_two_hours_is_raised() -> None:
    c = TopicConfig.parse({"cleanup.policy": "compact", "max.compaction.lag.ms": "1000"})
    assert c.max_compaction_lag_ms == 1000
    assert c.effective_max_compaction_lag_ms == MIN_MAX_COMPACTION_LAG_MS
    big = TopicConfig.parse({"max.compaction.lag.ms": str(10 * MIN_MAX_COMPACTION_LAG_MS)})
    assert big.effective_max_compaction_lag_ms == 10 * MIN_MAX_COMPACTION_LAG_MS


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"cleanup.polcy": "compact"}, "unknown topic config 'cleanup.polcy'"),
        ({"cleanup.policy": "shred"}, "cleanup.policy must be one of"),
        ({"retention.ms": "soon"}, "retention.ms must be an integer"),
        ({"delete.retention.ms": "-5"}, "delete.retention.ms must be >= 0"),
        ({"compaction.strategy": "newest"}, "compaction.strategy must be one of"),
        ({"compaction.strategy": "header"}, "needs compaction.strategy.header"),
        ({"compaction.strategy.header": "v"}, "only valid with compaction.strategy=header"),
    ],
)
def test_bad_settings_are_clear_errors(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TopicConfig.parse(settings)


def test_retention_minus_one_means_forever() -> None:
    assert TopicConfig.parse({"retention.ms": "-1"}).retention_ms == -1


def test_json_round_trip() -> None:
    c = TopicConfig.parse(
        {
            "cleanup.policy": "compact",
            "compaction.strategy": "header",
            "compaction.strategy.header": "version",
            "max.compaction.lag.ms": "9000000",
        }
    )
    assert TopicConfig.from_json(c.to_json()) == c
