"""Compaction on a Spark cluster (``compactor spark compact``): the driver plans and
leases, one task per job runs it as a queue worker would.

Nothing here is imported by the base command line until a ``spark`` command runs, and
only ``spark.driver`` imports pyspark: the task side (``spark.task``) is plain Python
that an executor's worker process imports.
"""
