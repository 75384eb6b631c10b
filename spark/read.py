"""A topic as a Spark DataFrame: ``read_topic(spark, store_url, topic, view)``.

The driver reads the catalog once (one snapshot, one manifest GET per file holding the
topic) and makes one task per (file, section) of the topic, in partition order and, within
a partition, in the live order of its files (so in offset order). Each task reads its
section with ranged reads (as ``compactor dump`` does) on its executor process's own store,
opened from plain settings (the store URL and endpoint as the driver resolved them) and
kept for the process's later tasks; no client crosses the wire.

Invariants:

- ``view="all"``: every record of the snapshot's sections, exactly as ``compactor dump``
  prints them (offsets, timestamps, key, value and header bytes); one Spark partition per
  (file, section), holding that section's records in offset order.
- ``view="latest"``: the materialized view of ``compactor.worker.view`` (which compaction
  leaves unchanged): per (topic, partition, key), the record that ranks highest under the
  topic's ``compaction.strategy`` (offset: the highest offset; timestamp and header: KIP-280
  rank, ties broken by offset), absent if that record is a tombstone; null keys are no part
  of it.
- The DataFrame is the snapshot taken when ``read_topic`` was called: each action reads
  those files again, and a file that a later compaction replaced stays readable only for
  the garbage grace period (10 minutes by default). Persist it, or call ``read_topic``
  again, to work on it for longer.

Only the driver side imports pyspark, and only when called; the executor side
(``section_rows``) is plain Python.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compactor.catalog import Catalog, CatalogError, LiveFile, Snapshot, TopicConfig
from compactor.fileformat import SectionMeta, batch_to_records, read_section
from compactor.objectstore import ObjectStore, open_store
from compactor.worker.policy import header_value, record_rank

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

VIEWS = ("all", "latest")
COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
RANK_COLUMNS = ("_rank0", "_rank1", "_rank2")
"""The record's rank under the topic's strategy, left-padded with zeros to three longs
(``worker.policy.record_rank``); only rows of ``view="latest"`` carry them."""
MANIFEST_THREADS = 16

Row = tuple[Any, ...]


class UnknownTopic(CatalogError, ValueError):
    """The store has no topic of that name."""


@dataclass(frozen=True, slots=True)
class SectionTask:
    """One Spark partition's work: plain values only (what an executor needs to open its
    own store and read one section)."""

    store_url: str
    endpoint_url: str | None
    key: str
    section: dict[str, object]
    """``SectionMeta.to_json()``."""
    strategy: str | None
    """The topic's compaction strategy when the rows carry their rank (``latest``)."""
    header: str | None


def read_topic(
    spark: SparkSession,
    store_url: str,
    topic: str,
    view: str = "all",
    *,
    endpoint_url: str | None = None,
) -> DataFrame:
    """The records of ``topic`` in the store at ``store_url`` as a DataFrame with columns
    topic (string), partition (int), offset (long), timestamp (long), key (binary),
    value (binary), headers (array<struct<key:string, value:binary>>).

    ``store_url`` and ``endpoint_url`` are as the command line takes them (a directory,
    ``file://``, ``s3://bucket[/prefix]``; the endpoint defaults to ``AWS_ENDPOINT_URL_S3``
    or ``AWS_ENDPOINT_URL`` in the driver's environment) and are resolved on the driver;
    executors need only their own AWS credentials.

    ``view="all"``: every record, exactly as ``compactor dump`` prints it, one Spark
    partition per (file, section) of the topic, the rows in (partition, offset) order.
    ``view="latest"``: the materialized view, each key's winning record under the topic's
    compaction strategy (offset: the highest offset), keys whose winner is a tombstone
    and records with a null key left out; its rows are in no particular order.

    Raises UnknownTopic (a ValueError) for a topic the store does not have, ValueError for
    another ``view``. The DataFrame reads the catalog snapshot of this call (see the module
    docstring for how long its files stay readable).
    """
    if view not in VIEWS:
        raise ValueError(f"view must be one of {', '.join(map(repr, VIEWS))}, not {view!r}")
    store = open_store(store_url, endpoint_url=endpoint_url)
    try:
        catalog = Catalog(store)
        snap = catalog.snapshot()
        config = _topic_config(snap, topic)
        tasks = _tasks(store, catalog, snap, topic, config if view == "latest" else None)
    finally:
        store.close()
    if view == "all":
        return _frame(spark, tasks, record_schema())
    return _latest(_frame(spark, tasks, record_schema(ranked=True)))


def record_schema(*, ranked: bool = False) -> StructType:
    """The DataFrame's schema, nullability as in ``fileformat.RECORD_SCHEMA``; ``ranked``
    adds the rank columns of ``view="latest"``."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    header = StructType(
        [StructField("key", StringType(), False), StructField("value", BinaryType(), True)]
    )
    fields = [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("timestamp", LongType(), False),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("headers", ArrayType(header, containsNull=False), False),
    ]
    if ranked:
        fields += [StructField(name, LongType(), False) for name in RANK_COLUMNS]
    return StructType(fields)


def _topic_config(snap: Snapshot, topic: str) -> TopicConfig:
    found = snap.topics.get(topic)
    if found is None:
        known = ", ".join(map(repr, sorted(snap.topics))) or "none"
        raise UnknownTopic(f"unknown topic {topic!r} (topics: {known})")
    return found.config


def _tasks(
    store: ObjectStore, catalog: Catalog, snap: Snapshot, topic: str, ranked: TopicConfig | None
) -> list[SectionTask]:
    """One task per (file, section) of ``topic``, by partition, then by live order.

    ``store.url`` is absolute and the endpoint is the one the driver resolved, so an
    executor elsewhere opens the same store (as ``spark compact`` hands them out)."""
    files = [live for live in snap.files if live.topic(topic) is not None]
    endpoint = getattr(store, "endpoint_url", None)
    strategy = ranked.compaction_strategy if ranked is not None else None
    header = ranked.compaction_strategy_header if ranked is not None else None
    ordered: list[tuple[int, int, SectionTask]] = []
    for order, (live, sections) in enumerate(zip(files, _manifests(catalog, files), strict=True)):
        for s in sections:
            if s.topic == topic:
                task = SectionTask(store.url, endpoint, live.key, s.to_json(), strategy, header)
                ordered.append((s.partition, order, task))
    ordered.sort(key=lambda item: item[:2])
    return [task for _, _, task in ordered]


def _manifests(catalog: Catalog, files: list[LiveFile]) -> list[tuple[SectionMeta, ...]]:
    """The sections of each file, from the manifests read a few at a time."""
    if len(files) <= 1:
        return [catalog.sections(live) for live in files]
    with ThreadPoolExecutor(min(MANIFEST_THREADS, len(files))) as pool:
        return list(pool.map(catalog.sections, files))


def _frame(spark: SparkSession, tasks: list[SectionTask], schema: StructType) -> DataFrame:
    """The rows of ``tasks``, one Spark partition per task, in the tasks' order."""
    sc = spark.sparkContext
    if not tasks:
        return spark.createDataFrame(sc.emptyRDD(), schema)
    rdd = sc.parallelize(tasks, len(tasks)).flatMap(section_rows)
    return spark.createDataFrame(rdd, schema)


def _latest(ranked: DataFrame) -> DataFrame:
    """Each (topic, partition, key)'s highest-ranked record, unless it is a tombstone."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_key = Window.partitionBy("topic", "partition", "key").orderBy(
        *(F.col(name).desc() for name in RANK_COLUMNS)
    )
    return (
        ranked.withColumn("_winner", F.row_number().over(by_key))
        .where((F.col("_winner") == 1) & F.col("value").isNotNull())
        .select(*COLUMNS)
    )


# --- executor side: plain Python ------------------------------------------------------

_stores: dict[tuple[str, str | None], ObjectStore] = {}
"""This executor process's stores, opened by its first task on each and kept."""


def _executor_store(store_url: str, endpoint_url: str | None) -> ObjectStore:
    key = (store_url, endpoint_url)
    store = _stores.get(key)
    if store is None:
        store = _stores[key] = open_store(store_url, endpoint_url=endpoint_url)
    return store


def section_rows(task: SectionTask) -> Iterator[Row]:
    """The rows of one section in offset order, read with ranged reads; with a strategy
    (``latest``), only records with a key, each followed by its rank."""
    store = _executor_store(task.store_url, task.endpoint_url)
    section = SectionMeta.from_json(task.section)
    topic, partition = section.topic, section.partition

    def read_range(start: int, end: int) -> bytes:
        return store.get_range(task.key, start, end)

    for batch in read_section(read_range, section, object_name=task.key):
        for r in batch_to_records(batch):
            row = (topic, partition, r.offset, r.timestamp, r.key, r.value, list(r.headers))
            if task.strategy is None:
                yield row
            elif r.key is not None:
                header = header_value(r.headers, task.header)
                rank = record_rank(task.strategy, r.offset, r.timestamp, header)
                yield row + (0,) * (len(RANK_COLUMNS) - len(rank)) + rank
