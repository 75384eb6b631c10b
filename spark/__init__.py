"""Compaction on a Spark cluster (``compactor spark compact``): the driver plans and
leases, one task per job runs it as a queue worker would. And ``read_topic``: a topic as a
DataFrame (``spark.read``).

The base command line imports only ``spark.failures`` (plain Python: the errors whose
exit statuses it maps) until a ``spark`` command runs, and only the driver sides
(``spark.driver``, and ``spark.read`` when called) import pyspark: the task side
(``spark.task``, ``spark.read.section_rows``) is plain Python that an executor's worker
process imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def read_topic(
    spark: SparkSession,
    store_url: str,
    topic: str,
    view: str = "all",
    *,
    endpoint_url: str | None = None,
) -> DataFrame:
    """``compactor.spark.read.read_topic`` (see there), imported only when called."""
    from compactor.spark.read import read_topic as read

    return read(spark, store_url, topic, view, endpoint_url=endpoint_url)
