"""``compactor.spark.read_topic`` on a real SparkSession (``local[2]``).

``view="all"`` is ``compactor dump``, record for record and byte for byte, one Spark
partition per (file, section) of the topic; ``view="latest"`` is the independent model's
materialized view (``kafka_model.view``) of every record ever ingested, although the store
has compacted part of them since. Partitions span L1 files (compacted) and L0 files (a
later ingest). Topics cover the three compaction strategies, tombstones, null keys, binary
keys and values, empty values and null or binary header values. The S3 variant reads a
small store on the test endpoint.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clirunner import run_cli
from conftest import S3Url
from kafka_model import TopicRules, view
from queue_scenarios import NOW, SMALL_LEVELS

from compactor.catalog import Catalog, CatalogError
from compactor.fileformat import Record
from compactor.ingest.agent import L0Ingest
from compactor.ingest.workload import Workload
from compactor.objectstore import LocalStore, ObjectStore
from compactor.objectstore.s3 import S3Store
from compactor.spark import read_topic
from compactor.spark.driver import spark_session

Row = tuple[str, int, int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]
Partition = tuple[str, int]

DEAD_ENDPOINT = "http://127.0.0.1:9"
"""Nothing listens on the discard port."""
WORKLOAD_TOPICS = (("c", 8), ("d", 2), ("h", 3))
EDGE_TOPICS = (("e", 1), ("s", 1))
RULES = {
    "c": TopicRules(),
    "d": TopicRules(compacted=False),
    "h": TopicRules(strategy="header", header="version"),
    "e": TopicRules(),
    "s": TopicRules(strategy="timestamp"),
}
CREATE = {
    "c": ("--config", "cleanup.policy=compact"),
    "d": (),
    "h": ("--config", "cleanup.policy=compact", "--config", "compaction.strategy=header")
    + ("--config", "compaction.strategy.header=version"),
    "e": ("--config", "cleanup.policy=compact"),
    "s": ("--config", "cleanup.policy=compact", "--config", "compaction.strategy=timestamp"),
}
EDGE_LINES = [
    # e: a key tombstoned for good, one tombstoned then written again, a null key, binary
    # and empty values, null and binary header values, non-ASCII text.
    {"topic": "e", "partition": 0, "key": "gone", "value": "v1", "timestamp": 1},
    {"topic": "e", "partition": 0, "key": "back", "value": None, "timestamp": 2},
    {"topic": "e", "partition": 0, "key": None, "value": "no key", "timestamp": 3},
    {"topic": "e", "partition": 0, "key": "gone", "value": None, "timestamp": 4},
    {"topic": "e", "partition": 0, "key": "back", "value": "again", "timestamp": 5},
    {"topic": "e", "partition": 0, "key_b64": "//4A", "value_b64": "AAH/", "timestamp": 6},
    {"topic": "e", "partition": 0, "key": "empty", "value": "", "timestamp": 7},
    {
        "topic": "e",
        "partition": 0,
        "key": "héad",
        "value": "ü",
        "timestamp": 8,
        "headers": [["n", None], ["b", {"b64": "/wA="}], ["t", "é"], ["n", "twice"]],
    },
    # s (timestamp strategy): the later offset has the older timestamp, so it loses.
    {"topic": "s", "partition": 0, "key": "k", "value": "newest", "timestamp": 200},
    {"topic": "s", "partition": 0, "key": "k", "value": "older", "timestamp": 100},
    {"topic": "s", "partition": 0, "key": "j", "value": "j1", "timestamp": 50},
    {"topic": "s", "partition": 0, "key": "j", "value": None, "timestamp": 60},
]


@dataclass
class Built:
    root: Path
    history: dict[Partition, list[Record]]
    """Every record ever ingested, per partition in offset order (before compaction)."""
    dumps: dict[Partition, list[Record]]
    """What ``dump`` prints now."""


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("local[2]")
    try:
        yield session
    finally:
        session.stop()


def _create(args: list[str], topics: tuple[tuple[str, int], ...]) -> None:
    for name, partitions in topics:
        create = ("topic", "create", name, "--partitions", str(partitions), *CREATE.get(name, ()))
        r = run_cli(*args, *create)
        assert r.code == 0, r.err


def _ingest(store: ObjectStore, topics: tuple[tuple[str, int], ...], rounds: range, n: int) -> None:
    catalog = Catalog(store)
    for seed in rounds:
        ingest = L0Ingest(store, catalog, now_ms=NOW, max_file_bytes=8 << 10)
        workload = Workload(
            topics=topics,
            records=n,
            keys_per_partition=60,
            seed=seed,
            start_ms=NOW - 10**6 + seed * 10**5,
            versioned_topics=frozenset({"h"}),
        )
        for r in workload.generate():
            ingest.add(r)
        ingest.commit()


def _bytes(obj: dict[str, Any], name: str) -> bytes | None:
    if f"{name}_b64" in obj:
        return base64.b64decode(obj[f"{name}_b64"])
    text = obj[name]
    return None if text is None else str(text).encode()


def _header(value: Any) -> bytes | None:
    if value is None:
        return None
    return base64.b64decode(value["b64"]) if isinstance(value, dict) else str(value).encode()


def _from_dump(line: str) -> Record:
    """A line ``dump`` printed (``ingest.jsonl.format_record``), decoded on its own."""
    obj = json.loads(line)
    return Record(
        offset=obj["offset"],
        timestamp=obj["timestamp"],
        key=_bytes(obj, "key"),
        value=_bytes(obj, "value"),
        headers=tuple((k, _header(v)) for k, v in obj["headers"]),
    )


def _dumps(args: list[str], topics: tuple[tuple[str, int], ...]) -> dict[Partition, list[Record]]:
    out = {}
    for topic, partitions in topics:
        for p in range(partitions):
            r = run_cli(*args, "dump", "--topic", topic, "--partition", str(p))
            assert r.code == 0, r.err
            out[topic, p] = [_from_dump(line) for line in r.out.splitlines()]
    return out


def _extend(history: dict[Partition, list[Record]], now: dict[Partition, list[Record]]) -> None:
    """Appends to each partition's history the records ingested since it was taken."""
    for tp, records in now.items():
        last = history[tp][-1].offset if history[tp] else -1
        history[tp] += [r for r in records if r.offset > last]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Two ingest rounds, ``compact --until-idle``, then a third round: L1 and L0 files."""
    root = tmp_path_factory.mktemp("read-topic") / "store"
    args = ["--store", str(root)]
    topics = WORKLOAD_TOPICS + EDGE_TOPICS
    _create(args, topics)
    store = LocalStore(root)
    _ingest(store, WORKLOAD_TOPICS, range(2), 1500)
    lines = "".join(json.dumps(line) + "\n" for line in EDGE_LINES).encode()
    assert run_cli(*args, "ingest", "-", stdin=lines).code == 0
    history = _dumps(args, topics)
    compact = run_cli(*args, "--now-ms", str(NOW), "compact", "--until-idle", *SMALL_LEVELS)
    assert compact.code == 0, compact.err
    _ingest(store, WORKLOAD_TOPICS, range(2, 3), 400)
    dumps = _dumps(args, topics)
    _extend(history, dumps)
    levels = {f.level for f in Catalog(store).snapshot().files_holding("c", 0)}
    assert 0 in levels and max(levels) >= 1  # partitions span L0 and L1 files
    for topic in ("c", "h"):  # compaction did drop superseded records
        assert sum(len(dumps[tp]) for tp in dumps if tp[0] == topic) < sum(
            len(history[tp]) for tp in history if tp[0] == topic
        )
    store.close()
    return Built(root, history, dumps)


def _row(r: Any) -> Row:
    def b(v: Any) -> bytes | None:
        return None if v is None else bytes(v)

    headers = [(h["key"], b(h["value"])) for h in r["headers"]]
    return (
        r["topic"],
        r["partition"],
        r["offset"],
        r["timestamp"],
        b(r["key"]),
        b(r["value"]),
        headers,
    )


def _expected(topic: str, records: dict[Partition, list[Record]]) -> list[Row]:
    return [
        (topic, p, r.offset, r.timestamp, r.key, r.value, list(r.headers))
        for (t, p), rs in sorted(records.items())
        if t == topic
        for r in rs
    ]


def test_all_is_dump_record_for_record(spark: Any, built: Built) -> None:
    for topic, _ in WORKLOAD_TOPICS + EDGE_TOPICS:
        df = read_topic(spark, str(built.root), topic)
        assert df.dtypes == [
            ("topic", "string"),
            ("partition", "int"),
            ("offset", "bigint"),
            ("timestamp", "bigint"),
            ("key", "binary"),
            ("value", "binary"),
            ("headers", "array<struct<key:string,value:binary>>"),
        ]
        assert [_row(r) for r in df.collect()] == _expected(topic, built.dumps), topic
    edge = read_topic(spark, built.root.as_uri(), "e", view="all")  # a file:// URL
    assert [_row(r) for r in edge.collect()] == _expected("e", built.dumps)
    assert any(r.key is None for r in built.dumps["e", 0])  # null keys are in "all"


def _sections(store: ObjectStore, topic: str) -> list[tuple[int, int, int]]:
    """(partition, live order, record count) of every section of ``topic``, sorted."""
    catalog = Catalog(store)
    return sorted(
        (s.partition, order, s.record_count)
        for order, live in enumerate(catalog.snapshot().files)
        if live.topic(topic) is not None
        for s in catalog.sections(live)
        if s.topic == topic
    )


def test_one_spark_partition_per_file_section(spark: Any, built: Built) -> None:
    def partition_and_count(rows: Iterator[Any]) -> list[tuple[set[int], int]]:
        """A Spark partition's topic-partitions and row count (defined here: executors
        cannot import this test module)."""
        partitions: set[int] = set()
        n = 0
        for r in rows:
            partitions.add(r["partition"])
            n += 1
        return [(partitions, n)]

    store = LocalStore(built.root)
    sections = _sections(store, "c")
    df = read_topic(spark, str(built.root), "c")
    assert df.rdd.getNumPartitions() == len(sections) > 8  # partitions span several files
    per_partition = df.rdd.mapPartitions(partition_and_count).collect()
    assert per_partition == [({p}, n) for p, _, n in sections]
    store.close()


def _latest_by_partition(df: Any) -> dict[int, dict[bytes, Row]]:
    out: dict[int, dict[bytes, Row]] = {}
    for r in df.collect():
        row = _row(r)
        key = row[4]
        assert key is not None and row[5] is not None
        assert key not in out.setdefault(row[1], {})  # one row per key
        out[row[1]][key] = row
    return out


def test_latest_is_the_model_view(spark: Any, built: Built) -> None:
    for topic, partitions in WORKLOAD_TOPICS + EDGE_TOPICS:
        latest = _latest_by_partition(read_topic(spark, str(built.root), topic, view="latest"))
        assert set(latest) <= set(range(partitions))
        for p in range(partitions):
            history = built.history[topic, p]
            rows = latest.get(p, {})
            assert {k: r[5] for k, r in rows.items()} == view(history, RULES[topic]), (topic, p)
            by_offset = {r.offset: r for r in history}
            for row in rows.values():  # each row is its winning record, unchanged
                r = by_offset[row[2]]
                assert row == (topic, p, r.offset, r.timestamp, r.key, r.value, list(r.headers))


def test_the_fixture_exercises_every_rule(built: Built) -> None:
    """Tombstones decide some keys, null keys exist, and the header and timestamp
    strategies pick other winners than the highest offset would."""
    c_history = [r for tp, rs in built.history.items() if tp[0] == "c" for r in rs]
    assert any(r.value is None for r in c_history)
    by_offset = TopicRules()
    for topic in ("h", "s"):
        records = built.history[topic, 0]
        assert view(records, RULES[topic]) != view(records, by_offset), topic
    e_view = view(built.history["e", 0], RULES["e"])
    assert b"gone" not in e_view and e_view[b"back"] == b"again" and e_view[b"empty"] == b""
    assert view(built.history["s", 0], RULES["s"]) == {b"k": b"newest"}


def test_the_frame_is_the_snapshot_of_the_call(spark: Any, tmp_path: Path) -> None:
    """A DataFrame made before a compaction still reads what it saw (the replaced files
    stay for the grace period); a new call reads the compacted files."""
    args = ["--store", str(tmp_path / "store")]
    _create(args, (("c", 2),))
    store = LocalStore(tmp_path / "store")
    _ingest(store, (("c", 2),), range(2), 600)
    before = _dumps(args, (("c", 2),))
    df = read_topic(spark, str(tmp_path / "store"), "c")
    compact = run_cli(*args, "--now-ms", str(NOW), "compact", "--until-idle", *SMALL_LEVELS)
    assert compact.code == 0, compact.err
    after = _dumps(args, (("c", 2),))
    assert after != before
    assert [_row(r) for r in df.collect()] == _expected("c", before)
    fresh = read_topic(spark, str(tmp_path / "store"), "c")
    assert [_row(r) for r in fresh.collect()] == _expected("c", after)
    store.close()


def test_an_empty_topic_has_no_rows_and_no_partitions(spark: Any, tmp_path: Path) -> None:
    args = ["--store", str(tmp_path / "store")]
    _create(args, (("c", 3),))
    for v in ("all", "latest"):
        df = read_topic(spark, str(tmp_path / "store"), "c", view=v)
        assert df.columns == [
            "topic",
            "partition",
            "offset",
            "timestamp",
            "key",
            "value",
            "headers",
        ]
        assert df.collect() == []
    assert read_topic(spark, str(tmp_path / "store"), "c").rdd.getNumPartitions() == 0


def test_unknown_topic_and_bad_view_are_clear_errors(spark: Any, built: Built) -> None:
    with pytest.raises(ValueError, match=r"unknown topic 'nope' \(topics: 'c', 'd', 'e'") as e:
        read_topic(spark, str(built.root), "nope")
    assert isinstance(e.value, CatalogError)
    with pytest.raises(ValueError, match=r"view must be one of 'all', 'latest', not 'newest'"):
        read_topic(spark, str(built.root), "c", view="newest")


def test_read_topic_on_s3(
    spark: Any, s3_url: S3Url, s3_store: S3Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Executors reach the endpoint the driver resolved from its environment: they are
    given the test's credentials (as ``spark.executorEnv.*`` would) and, in their own
    environment, an endpoint where nothing listens."""
    executor_env = {**s3_url.env, "AWS_ENDPOINT_URL": DEAD_ENDPOINT}
    executor_env["AWS_ENDPOINT_URL_S3"] = DEAD_ENDPOINT
    for name, value in executor_env.items():
        monkeypatch.setitem(spark.sparkContext.environment, name, value)
    assert os.environ["AWS_ENDPOINT_URL"] == s3_url.endpoint_url  # the driver's
    topics = (("c", 2),)
    _create(s3_url.cli_args, topics)
    _ingest(s3_store, topics, range(2), 300)
    dumps = _dumps(s3_url.cli_args, topics)
    df = read_topic(spark, s3_url.url, "c")
    assert [_row(r) for r in df.collect()] == _expected("c", dumps)
    assert df.rdd.getNumPartitions() == len(_sections(s3_store, "c")) > 2
    latest = _latest_by_partition(
        read_topic(spark, s3_url.url, "c", view="latest", endpoint_url=s3_url.endpoint_url)
    )
    for p in range(2):
        got = {k: r[5] for k, r in latest.get(p, {}).items()}
        assert got == view(dumps["c", p], RULES["c"])
